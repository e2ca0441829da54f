"""`orchestrion serve`: every strategy as a model behind an OpenAI-compatible API.

``GET /v1/models`` lists each strategy as ``orchestrion/<name>``; ``POST /v1/chat/completions``
runs one traced episode per request through :func:`orchestrion.runtime.episode.run_episode`, answered whole or
streamed as server-sent events: progress as the trace store commits it (the request
subscribes to the store's event bus before its episode starts), then the answer token by
token. The wire format (extension fields, headers, progress chunks, errors) is documented in
:mod:`orchestrion.serve._openai_schema`. ``GET /health`` says the server is up (no key
needed); ``GET /metrics`` is Prometheus text (:mod:`orchestrion.serve._metrics`).

Every episode in flight is an asyncio task: a full server answers 429 instead of queueing,
and a client that disconnects has its episode cancelled, which ``run_episode`` records as
``cancelled``; the cancellation reaches the model call in progress (the embedded model stops
before its next token, an HTTP call is closed). Each server process writes one ``runs`` row
(kind ``serve``); each request's episode has that ``run_id`` and ``task_id`` = the completion
id (``chatcmpl-...``).

Listening on an address other than loopback without ``--api-key-env`` is refused unless
``--insecure-no-auth`` says so: anyone who reaches the port could spend the pool's tokens.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._errors import ConfigError
from ..models.pool import Pool, load_pool
from ..runtime.budget import Budget
from ..runtime.episode import EpisodeResult, run_episode
from ..runtime.types import Task
from ..status import RunStatus
from ..strategies.registry import get_strategy, strategies
from ..tools.defaults import default_tools
from ..tools.registry import ToolRegistry
from ..trace.store import TraceStore
from ..trace.tracer import new_id
from ._exposure import api_key, key_matches, refuse_exposure
from ._failures import failure, pool_secrets, summary
from ._metrics import MetricsMiddleware, ServeMetrics
from ._openai_schema import (
    MODEL_PREFIX,
    ApiError,
    ChatRequest,
    completion_body,
    episode_budget,
    episode_options,
    error_body,
    parse_request,
    server_error,
    strategy_of,
    task_prompt,
)
from ._recover import own_run, recover_dead_runs
from ._stream import DONE, EpisodeStream, Watch, episode_result, sse_events

DISCONNECT_POLL_S = 0.25  # non-streamed requests: how often the connection is checked


@dataclass(frozen=True)
class ServeSettings:
    """What `orchestrion serve` is configured with."""

    pool: Path | None = None
    db: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    api_key_env: str | None = None
    max_concurrent: int = 16
    max_body_bytes: int = 256 * 1024
    max_tokens_cap: int | None = None
    insecure_no_auth: bool = False
    errors_as_200: bool = False  # an episode ending in error answers 200 instead of 502 (see _failures)


class _Service:
    """Pool, store, tools and the episodes in flight, shared by every request."""

    def __init__(self, settings: ServeSettings, pool: Pool, store: TraceStore, tools: ToolRegistry) -> None:
        self.settings = settings
        self.api_key = api_key(settings.api_key_env)
        self.pool = pool
        self.store = store
        self.tools = tools
        self.run_id = new_id()
        self.created = int(time.time())
        self.inflight: set[asyncio.Task[EpisodeResult]] = set()
        self.metrics = ServeMetrics()
        self.started = time.monotonic()
        self.secrets = pool_secrets(pool)  # never sent to a client

    # -- request checks --------------------------------------------------------------
    def authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        header = request.headers.get("authorization", "")
        if not header:
            message = "no API key: send it as 'Authorization: Bearer <key>'"
        elif header.strip().partition(" ")[0].lower() != "bearer" or not key_matches(header, self.api_key):
            message = "incorrect API key"
        else:
            return
        raise ApiError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "episodes_in_flight": len(self.inflight),
                "max_concurrent": self.settings.max_concurrent, "models": len(strategies()),
                "uptime_s": round(time.monotonic() - self.started, 1)}

    async def read_body(self, request: Request) -> bytes:
        limit = self.settings.max_body_bytes
        too_large = ApiError(413, f"the request body is over this server's limit of {limit} bytes",
                             code="request_too_large")
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                raise ApiError(400, f"bad Content-Length header: {declared!r}", code="invalid_request")
            if int(declared) > limit:
                raise too_large
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > limit:
                raise too_large
        return bytes(body)

    # -- episodes --------------------------------------------------------------------
    def start(self, req: ChatRequest, strategy: str, cid: str, budget: Budget,
              options: dict[str, Any]) -> tuple[asyncio.Task[EpisodeResult], Watch]:
        """Start the episode, watched from its first event, or 429 when the server is full.
        No await between the check and the start."""
        prompt = task_prompt(req.messages)
        limit = self.settings.max_concurrent
        if len(self.inflight) >= limit:
            raise ApiError(429, f"this server already runs {limit} episodes (its --max-concurrent); retry later",
                           type="rate_limit_error", code="too_many_episodes", headers={"Retry-After": "1"})
        task = Task(prompt=prompt, id=cid, metadata={"source": "serve", "model": req.model,
                                                        "messages": len(req.messages)})
        episode_id = new_id()
        keep_200 = req.orchestrion.errors_as_200
        watch = Watch(self.store, episode_id, live=req.stream, json_schema=req.json_schema, secrets=self.secrets,
                      errors_as_200=self.settings.errors_as_200 if keep_200 is None else keep_200)
        episode = asyncio.create_task(run_episode(
            task, get_strategy(strategy), pool=self.pool, tools=self.tools, store=self.store, budget=budget,
            options=options, run_id=self.run_id, episode_id=episode_id, answer=watch.channel,
        ))
        watch.attach(episode)
        self.inflight.add(episode)
        self.metrics.in_flight.set(len(self.inflight))
        episode.add_done_callback(lambda done: self._finished(done, strategy))
        return episode, watch

    def _finished(self, episode: asyncio.Task[EpisodeResult], strategy: str) -> None:
        self.inflight.discard(episode)
        self.metrics.in_flight.set(len(self.inflight))
        if episode.cancelled():
            self.metrics.episodes.labels(strategy, "cancelled").inc()
        elif isinstance(episode.exception(), ConfigError):
            pass  # a bad option or budget: refused (400) before any episode was recorded, so none is counted
        elif episode.exception() is not None:  # retrieved here; the handler re-raises it where it matters
            self.metrics.episodes.labels(strategy, "error").inc()
        else:
            self.metrics.episode(episode.result())

    async def shutdown(self) -> None:
        for episode in list(self.inflight):
            episode.cancel()
        if self.inflight:
            await asyncio.wait(set(self.inflight), timeout=10)
        self.store.set_run_status(self.run_id, RunStatus.STOPPED)
        await self.store.aflush()

    def model_card(self, name: str) -> dict[str, Any]:
        return {"id": MODEL_PREFIX + name, "object": "model", "created": self.created, "owned_by": "orchestrion",
                "description": strategies()[name].summary}


async def _stream(svc: _Service, req: ChatRequest, cid: str, episode: asyncio.Task[EpisodeResult],
                  watch: Watch, requested: float) -> Response:
    try:
        head = await watch.head()
    except BaseException:
        episode.cancel()
        watch.close()
        raise
    if head[-1] is DONE and watch.started is None:  # it failed before writing its row
        watch.close()
        episode_result(episode)  # raises the 500 (or 400 for a bad option)
        raise ApiError(500, "the episode ended without a trace row", type="server_error", code="orchestrion_error")

    def on_result(result: EpisodeResult, ttft: float | None) -> None:
        if ttft is not None:
            svc.metrics.ttft.observe(ttft)

    headers = {"X-Orchestrion-Trace-Id": watch.episode_id, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return EpisodeStream(sse_events(req, cid, episode, watch, head, on_result, requested), episode, watch, headers)


async def _complete(request: Request, req: ChatRequest, cid: str, episode: asyncio.Task[EpisodeResult],
                    watch: Watch) -> Response:
    try:
        while not episode.done():
            await asyncio.wait({episode}, timeout=DISCONNECT_POLL_S)
            if not episode.done() and await request.is_disconnected():
                episode.cancel()  # run_episode records the episode as cancelled
                await asyncio.wait({episode}, timeout=10)
                return Response(status_code=499)  # nobody reads it
    finally:
        if not episode.done():
            episode.cancel()
        await watch.settle()
    result = episode_result(episode)
    if not watch.errors_as_200 and (failed := failure(result, watch.secrets)) is not None:
        raise failed
    body = completion_body(cid, int(time.time()), req.model, result.answer, result.status, result.usage,
                           summary(result, watch.secrets), watch.answer_finish)
    return JSONResponse(body, headers={"X-Orchestrion-Trace-Id": result.trace_id,
                                       "X-Orchestrion-Status": result.status})


def create_app(settings: ServeSettings, *, pool: Pool | None = None, store: TraceStore | None = None,
               tools: ToolRegistry | None = None) -> FastAPI:
    """The serve app. ``pool``/``store``/``tools`` override the ones ``settings`` name (tests inject them)."""
    api_key(settings.api_key_env)  # fail fast, before anything is opened
    svc = _Service(settings, pool if pool is not None else load_pool(settings.pool),
                   store if store is not None else TraceStore(settings.db), tools or default_tools())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(settings).items()}
        recovered = await asyncio.to_thread(recover_dead_runs, svc.store)
        if recovered:
            sys.stderr.write(f"note: marked the unfinished episodes of {len(recovered)} stopped serve run(s) "
                             f"as interrupted ({', '.join(recovered)})\n")
        with own_run(svc.store, svc.run_id):  # locked before its row exists: never taken for a dead run
            svc.store.create_run(svc.run_id, "serve", {**config, "pool_source": svc.pool.source})
            try:
                yield
            finally:
                await svc.shutdown()  # the run is marked stopped while its lock is still held
        if pool is None:
            await svc.pool.aclose()
        if store is None:
            await asyncio.to_thread(svc.store.close)

    app = FastAPI(title="orchestrion serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = svc
    app.add_middleware(MetricsMiddleware, metrics=svc.metrics)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse(svc.health())

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        svc.authorize(request)
        return Response(svc.metrics.render(), media_type=svc.metrics.content_type)

    @app.get("/v1/models")
    async def list_models(request: Request) -> JSONResponse:
        svc.authorize(request)
        return JSONResponse({"object": "list", "data": [svc.model_card(n) for n in sorted(strategies())]})

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str, request: Request) -> JSONResponse:
        svc.authorize(request)
        return JSONResponse(svc.model_card(strategy_of(model_id)))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        requested = time.monotonic()
        svc.authorize(request)
        req = parse_request(await svc.read_body(request))
        strategy = strategy_of(req.model)
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        cap = settings.max_tokens_cap
        try:
            episode, watch = svc.start(req, strategy, cid, episode_budget(req, cap), episode_options(req, cap))
            if req.stream:
                return await _stream(svc, req, cid, episode, watch, requested)
            return await _complete(request, req, cid, episode, watch)
        except (ApiError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - a one-line 500; the connection stays usable
            raise server_error(exc) from None

    return app


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse(error_body(f"{request.method} {request.url.path}: {exc.detail}", type="invalid_request_error",
                                   code="not_found" if exc.status_code == 404 else None),
                        status_code=exc.status_code, headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> Response:
    return JSONResponse(server_error(exc).body(), status_code=500)


# -- running -------------------------------------------------------------------------------
def bind_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket (port 0 picks a free one), or a ConfigError that says why not."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
    except OSError as exc:
        raise ConfigError(f"--host {host}: cannot resolve it ({exc}); use an IP address such as 127.0.0.1") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); "
                          "choose another --port (0 picks a free one)") from None
    return sock


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/v1" if ":" in host else f"http://{host}:{port}/v1"


def check_exposure(settings: ServeSettings) -> None:
    """Refuse a non-loopback address without an API key, unless --insecure-no-auth says so."""
    refuse_exposure(settings.host, settings.api_key_env, settings.insecure_no_auth,
                    what="run episodes on your pool")


def run_server(settings: ServeSettings) -> None:
    """Serve until Ctrl-C; prints one line with the URL once listening."""
    check_exposure(settings)
    app = create_app(settings)
    svc: _Service = app.state.service
    sock = bind_socket(settings.host, settings.port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=5))
    auth = f"; clients must send the key in ${settings.api_key_env}" if settings.api_key_env else ""
    line = (f"orchestrion serve: listening on {base_url(sock)} — {len(strategies())} strategies as models "
            f"({MODEL_PREFIX}<strategy>); traces in {svc.store.path}{auth}; Ctrl-C to stop")
    asyncio.run(_serve(server, sock, line))


async def _serve(server: uvicorn.Server, sock: socket.socket, line: str) -> None:
    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.05)
        print(line, flush=True)

    announcer = asyncio.create_task(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        announcer.cancel()
