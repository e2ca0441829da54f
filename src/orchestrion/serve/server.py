"""`orchestrion serve`: every strategy as a model behind an OpenAI-compatible API.

``GET /v1/models`` lists each strategy as ``orchestrion/<name>``; ``POST /v1/chat/completions``
runs one traced episode per request through :func:`orchestrion.api.solve`, answered whole or
streamed as server-sent events with progress first. The wire format (extension fields,
headers, progress chunks, errors) is documented in :mod:`orchestrion.serve._openai_schema`.

Every episode in flight is an asyncio task: a full server answers 429 instead of queueing,
and a client that disconnects has its episode cancelled, which ``solve`` records as
``cancelled``. Each server process writes one ``runs`` row (kind ``serve``); each request's
episode has that ``run_id`` and ``task_id`` = the completion id (``chatcmpl-...``).
"""

from __future__ import annotations

import asyncio
import hmac
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from .._errors import ConfigError, OrchestrionError
from ..api import EpisodeResult, load_pool, solve
from ..models.pool import Pool
from ..runtime.budget import Budget
from ..runtime.types import Task
from ..strategies.base import strategies
from ..tools.defaults import default_tools
from ..tools.registry import ToolRegistry
from ..trace.store import TraceStore
from ..trace.tracer import new_id
from ._openai_schema import (
    MODEL_PREFIX,
    SSE_DONE,
    SSE_KEEPALIVE,
    ApiError,
    ChatRequest,
    SpanProgress,
    chunk_body,
    completion_body,
    episode_budget,
    episode_summary,
    error_body,
    finish_reason,
    parse_request,
    server_error,
    sse,
    strategy_of,
    task_prompt,
)

POLL_S = 0.2  # progress: how often the trace store is read while an episode runs
DISCONNECT_POLL_S = 0.25  # non-streamed requests: how often the connection is checked
KEEPALIVE_S = 15.0


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


def _api_key(env: str | None) -> str | None:
    if env is None:
        return None
    key = os.environ.get(env)
    if not key:
        raise ConfigError(f"--api-key-env {env}: the environment variable {env} is not set (or empty); "
                          "export it with the key clients must send, or drop --api-key-env")
    return key


class _Service:
    """Pool, store, tools and the episodes in flight, shared by every request."""

    def __init__(self, settings: ServeSettings, pool: Pool, store: TraceStore, tools: ToolRegistry) -> None:
        self.settings = settings
        self.api_key = _api_key(settings.api_key_env)
        self.pool = pool
        self.store = store
        self.tools = tools
        self.run_id = new_id()
        self.created = int(time.time())
        self.inflight: set[asyncio.Task[EpisodeResult]] = set()

    # -- request checks --------------------------------------------------------------
    def authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.strip().partition(" ")
        if not header:
            message = "no API key: send it as 'Authorization: Bearer <key>'"
        elif scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.api_key.encode()):
            message = "incorrect API key"
        else:
            return
        raise ApiError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

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
    def start(self, req: ChatRequest, strategy: str, cid: str, budget: Budget) -> asyncio.Task[EpisodeResult]:
        """Start the episode, or 429 when the server is full. No await between check and start."""
        prompt = task_prompt(req.messages)
        limit = self.settings.max_concurrent
        if len(self.inflight) >= limit:
            raise ApiError(429, f"this server already runs {limit} episodes (its --max-concurrent); retry later",
                           type="rate_limit_error", code="too_many_episodes", headers={"Retry-After": "1"})
        task = Task(prompt=prompt, id=cid, metadata={"source": "serve", "model": req.model,
                                                        "messages": len(req.messages)})
        episode = asyncio.create_task(solve(
            task, strategy=strategy, pool=self.pool, tools=self.tools, store=self.store, budget=budget,
            options=req.orchestrion.options, run_id=self.run_id,
        ))
        self.inflight.add(episode)
        episode.add_done_callback(self._finished)
        return episode

    def _finished(self, episode: asyncio.Task[EpisodeResult]) -> None:
        self.inflight.discard(episode)
        if not episode.cancelled():
            episode.exception()  # retrieved here; the handler re-raises it where it matters

    async def episode_row(self, cid: str, episode: asyncio.Task[EpisodeResult]) -> dict[str, Any] | None:
        """The episode row ``solve`` wrote for this request, or None if it failed before writing one."""
        while True:
            done = episode.done()
            try:
                await self.store.aflush()
                row = await asyncio.to_thread(self.store.episode_for_task, self.run_id, cid)
            except OrchestrionError as exc:
                raise server_error(exc) from None
            if row is not None:
                return row
            if done:
                return None
            await asyncio.sleep(0.01)

    async def shutdown(self) -> None:
        for episode in list(self.inflight):
            episode.cancel()
        if self.inflight:
            await asyncio.wait(set(self.inflight), timeout=10)
        self.store.set_run_status(self.run_id, "stopped")
        await self.store.aflush()

    def model_card(self, name: str) -> dict[str, Any]:
        return {"id": MODEL_PREFIX + name, "object": "model", "created": self.created, "owned_by": "orchestrion",
                "description": strategies()[name].summary}


def _result(episode: asyncio.Task[EpisodeResult]) -> EpisodeResult:
    if episode.cancelled():
        raise ApiError(503, "the episode was cancelled: the server is shutting down", type="server_error",
                       code="cancelled")
    try:
        return episode.result()
    except ConfigError as exc:  # a bad option or budget in the request: the client's to fix
        raise ApiError(400, str(exc), code="invalid_option", param="orchestrion.options") from None
    except OrchestrionError as exc:
        raise server_error(exc) from None


class _EpisodeStream(StreamingResponse):
    """An SSE response that cancels its episode when it ends early (client gone, error)."""

    def __init__(self, content: AsyncIterator[bytes], episode: asyncio.Task[EpisodeResult],
                 headers: dict[str, str]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self.episode = episode

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self.episode.done():
                self.episode.cancel()


async def _events(svc: _Service, req: ChatRequest, cid: str, episode: asyncio.Task[EpisodeResult],
                  row: dict[str, Any]) -> AsyncIterator[bytes]:
    created, model = int(time.time()), req.model

    def chunk(delta: dict[str, Any] | None, **kw: Any) -> bytes:
        return sse(chunk_body(cid, created, model, delta, **kw))

    yield chunk({"role": "assistant", "content": ""}, ext={"trace_id": row["id"]})
    progress = SpanProgress(row["started"])

    def poll() -> list[dict[str, Any]]:
        return progress.feed(svc.store.spans(row["id"], exclude_kinds=("episode",), attrs=False))

    quiet_since = time.monotonic()
    while True:
        finished = episode.done()  # read before polling: the last poll then sees every span
        for item in await asyncio.to_thread(poll):
            yield chunk({}, ext={"progress": item})
            quiet_since = time.monotonic()
        if finished:
            break
        if time.monotonic() - quiet_since > KEEPALIVE_S:
            yield SSE_KEEPALIVE
            quiet_since = time.monotonic()
        await asyncio.wait({episode}, timeout=POLL_S)
    try:
        result = _result(episode)
    except ApiError as exc:
        yield sse(exc.body())
        yield SSE_DONE
        return
    if result.answer:
        yield chunk({"content": result.answer})
    yield chunk({}, finish=finish_reason(result.status), ext=episode_summary(result))
    if req.include_usage:
        yield chunk(None, usage=result.usage)
    yield SSE_DONE


async def _stream(svc: _Service, req: ChatRequest, cid: str, episode: asyncio.Task[EpisodeResult]) -> Response:
    try:
        row = await svc.episode_row(cid, episode)
    except BaseException:
        episode.cancel()
        raise
    if row is None:
        _result(episode)  # it failed before writing its row: raises the 500
        raise ApiError(500, "the episode ended without a trace row", type="server_error", code="orchestrion_error")
    headers = {"X-Orchestrion-Trace-Id": row["id"], "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return _EpisodeStream(_events(svc, req, cid, episode, row), episode, headers)


async def _complete(request: Request, req: ChatRequest, cid: str, episode: asyncio.Task[EpisodeResult]) -> Response:
    try:
        while not episode.done():
            await asyncio.wait({episode}, timeout=DISCONNECT_POLL_S)
            if not episode.done() and await request.is_disconnected():
                episode.cancel()  # solve records the episode as cancelled
                await asyncio.wait({episode}, timeout=10)
                return Response(status_code=499)  # nobody reads it
    finally:
        if not episode.done():
            episode.cancel()
    result = _result(episode)
    body = completion_body(cid, int(time.time()), req.model, result.answer, result.status, result.usage,
                           episode_summary(result))
    return JSONResponse(body, headers={"X-Orchestrion-Trace-Id": result.trace_id,
                                       "X-Orchestrion-Status": result.status})


def create_app(settings: ServeSettings, *, pool: Pool | None = None, store: TraceStore | None = None,
               tools: ToolRegistry | None = None) -> FastAPI:
    """The serve app. ``pool``/``store``/``tools`` override the ones ``settings`` name (tests inject them)."""
    _api_key(settings.api_key_env)  # fail fast, before anything is opened
    svc = _Service(settings, pool if pool is not None else load_pool(settings.pool),
                   store if store is not None else TraceStore(settings.db), tools or default_tools())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(settings).items()}
        svc.store.create_run(svc.run_id, "serve", {**config, "pool_source": svc.pool.source})
        try:
            yield
        finally:
            await svc.shutdown()
            if pool is None:
                await svc.pool.aclose()
            if store is None:
                await asyncio.to_thread(svc.store.close)

    app = FastAPI(title="orchestrion serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = svc
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)

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
        svc.authorize(request)
        req = parse_request(await svc.read_body(request))
        strategy = strategy_of(req.model)
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        episode = svc.start(req, strategy, cid, episode_budget(req, settings.max_tokens_cap))
        if req.stream:
            return await _stream(svc, req, cid, episode)
        return await _complete(request, req, cid, episode)

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


def run_server(settings: ServeSettings) -> None:
    """Serve until Ctrl-C; prints one line with the URL once listening."""
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
