"""`orchestrion serve`: every strategy as a model behind an OpenAI-compatible API.

``GET /v1/models`` lists each strategy as ``orchestrion/<name>``; ``POST /v1/chat/completions``
and ``POST /v1/responses`` run one traced episode per request through
:func:`orchestrion.runtime.episode.run_episode`, answered whole or streamed as server-sent
events: progress (when asked for) as the trace store commits it (the request subscribes to the store's event bus
before its episode starts), then the answer token by token. The wire format (extension fields,
headers, progress chunks, errors) is documented in :mod:`orchestrion.serve._openai_schema`,
:mod:`._bodies` and :mod:`._responses`; what happens to each request field in :mod:`._fields`.
``GET /health`` says the server is up and ``GET /version`` gives the Orchestrion version (no
key needed for either); ``GET /metrics`` is Prometheus text (:mod:`orchestrion.serve._metrics`);
``/docs`` is Swagger UI over ``/openapi.json`` (the OpenAPI document, with every request field and
what happens to it); its script and stylesheet are served from the package, so it works offline.

Every episode in flight is an asyncio task: a full server answers 429 instead of queueing,
and a client that disconnects has its episode cancelled, which ``run_episode`` records as
``cancelled``; the cancellation reaches the model call in progress (the embedded model stops
before its next token, an HTTP call is closed). Each server process writes one ``runs`` row
(kind ``serve``); each request's episode has that ``run_id`` and ``task_id`` = the completion
or response id (``chatcmpl-...``, ``resp_...``).

Listening on an address other than loopback without ``--api-key-env`` is refused unless
``--insecure-no-auth`` says so: anyone who reaches the port could spend the pool's tokens. For
the same reason a server without a key answers a 403 to a request for another Host name than
``localhost``, ``127.0.0.1`` or ``[::1]`` (DNS rebinding) or from another site's ``Origin``
(:class:`~orchestrion.serve._exposure.HostGuard`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._errors import ConfigError
from .._version import __version__
from ..models.pool import Pool, load_pool
from ..strategies.registry import strategies
from ..tools.defaults import default_tools
from ..tools.registry import ToolRegistry
from ..trace.store import TraceStore
from ._bodies import completion_body, tool_calls_body
from ._exposure import HostGuard, api_key, loopback, refuse_exposure
from ._metrics import MetricsMiddleware
from ._openai_schema import MODEL_PREFIX, ApiError, ChatRequest, error_body, parse_request, server_error, strategy_of
from ._recover import own_run, recover_dead_runs
from ._responses import ResponsesRequest, new_response_id, parse_responses, response_body, responses_sse
from ._service import Run, ServeSettings, Service
from ._stream import EpisodeStream, Paused, chat_sse
from .viewer import static_dir

__all__ = ["ServeSettings", "base_url", "bind_socket", "check_exposure", "create_app", "run_server"]
PROGRESS_HEADER = "X-Orchestrion-Progress"  # "true": a chat stream carries progress chunks
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DOCS_ASSETS = "/docs/assets"  # Swagger UI's script and stylesheet, vendored in static/vendor/ (no CDN)
log = logging.getLogger(__name__)


def create_app(settings: ServeSettings, *, pool: Pool | None = None, store: TraceStore | None = None,
               tools: ToolRegistry | None = None) -> FastAPI:
    """The serve app. ``pool``/``store``/``tools`` override the ones ``settings`` name (tests inject them)."""
    api_key(settings.api_key_env)  # fail fast, before anything is opened
    svc = Service(settings, pool if pool is not None else load_pool(settings.pool),
                  store if store is not None else TraceStore(settings.db), tools or default_tools())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(settings).items()}
        recovered = await asyncio.to_thread(recover_dead_runs, svc.store)
        if recovered:
            log.warning("note: marked the unfinished episodes of %d stopped serve run(s) as interrupted (%s)",
                        len(recovered), ", ".join(recovered))
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

    app = FastAPI(title="orchestrion serve", version=__version__, lifespan=lifespan, redoc_url=None, docs_url=None,
                  description="Every Orchestrion strategy as a model (orchestrion/<strategy>) behind an "
                              "OpenAI-compatible API. Each request runs one traced episode.")
    app.state.service = svc
    app.add_middleware(MetricsMiddleware, metrics=svc.metrics)
    if svc.api_key is None:  # anyone who reaches it may use it: only from this machine, never from a web page
        app.add_middleware(HostGuard, check_host=loopback(settings.host), body=_refused_body)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]

    @app.get("/health", summary="Whether the server is up and can record episodes (no key needed)")
    async def health() -> JSONResponse:
        found = svc.health()
        return JSONResponse(found, status_code=200 if found["status"] == "ok" else 503)

    @app.get("/version", summary="The Orchestrion version (no key needed)")
    async def get_version() -> JSONResponse:
        return JSONResponse({"version": __version__})

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:  # Swagger UI from the package's own copy: works offline
        root = str(request.scope.get("root_path", "")).rstrip("/")  # behind a proxy's path prefix too
        return get_swagger_ui_html(openapi_url=f"{root}/openapi.json", title=f"{app.title} - API",
                                   swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css", swagger_favicon_url="data:,")

    @app.get(DOCS_ASSETS + "/{name}", include_in_schema=False)
    async def docs_asset(name: str) -> FileResponse:
        if name not in ("swagger-ui-bundle.js", "swagger-ui.css"):
            raise StarletteHTTPException(404, f"no docs asset '{name}'")
        return FileResponse(static_dir() / "vendor" / name)

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics(request: Request) -> Response:
        svc.authorize(request)
        return Response(svc.metrics.render(), media_type=svc.metrics.content_type)

    @app.get("/v1/models", summary="Every strategy, as orchestrion/<strategy>")
    async def list_models(request: Request) -> JSONResponse:
        svc.authorize(request)
        return JSONResponse({"object": "list", "data": [svc.model_card(n) for n in sorted(strategies())]})

    @app.get("/v1/models/{model_id:path}", summary="One strategy as a model")
    async def get_model(model_id: str, request: Request) -> JSONResponse:
        svc.authorize(request)
        return JSONResponse(svc.model_card(strategy_of(model_id)))

    @app.post("/v1/chat/completions", summary="Chat completions: one episode per request",
              openapi_extra=_body_schema(ChatRequest))
    async def chat_completions(request: Request) -> Response:
        requested = time.monotonic()
        svc.authorize(request)
        req = parse_request(await svc.read_body(request))
        strategy = strategy_of(req.model)
        try:
            run = svc.begin(req, strategy, f"chatcmpl-{uuid.uuid4().hex}")
            if req.stream:
                items = await svc.stream(run, requested)
                body = chat_sse(req, run.cid, items, lambda _: svc.observe(run), run.watch.episode_id,
                                progress=req.include_progress or _asked(request.headers.get(PROGRESS_HEADER)))
                return EpisodeStream(body, run.episode, run.watch, {**run.headers, **STREAM_HEADERS})
            end = await svc.complete(request, run)
            if isinstance(end, Response):
                return end
            if isinstance(end, Paused):  # the episode waits for the client's tool results
                calls = tool_calls_body(run.cid, int(time.time()), req.model, end.calls, end.usage, end.ext)
                return JSONResponse(calls, headers={**run.headers, "X-Orchestrion-Status": "running"})
            return JSONResponse(completion_body(run.cid, int(time.time()), req.model, end),
                                headers={**run.headers, "X-Orchestrion-Status": end.result.status})
        except (ApiError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - a one-line 500; the connection stays usable
            raise server_error(exc) from None

    @app.post("/v1/responses", summary="Responses API: one episode per request",
              openapi_extra=_body_schema(ResponsesRequest))
    async def responses(request: Request) -> Response:
        requested = time.monotonic()
        svc.authorize(request)
        req, chat = parse_responses(await svc.read_body(request))
        strategy = strategy_of(req.model)
        try:
            run: Run = svc.begin(chat, strategy, new_response_id())
            if req.stream:
                items = await svc.stream(run, requested)
                body = responses_sse(req, run.cid, items, lambda _: svc.observe(run))
                return EpisodeStream(body, run.episode, run.watch, {**run.headers, **STREAM_HEADERS})
            end = await svc.complete(request, run)
            if isinstance(end, Response):
                return end
            status = "running" if isinstance(end, Paused) else end.result.status
            return JSONResponse(response_body(run.cid, time.time(), req, end=end),
                                headers={**run.headers, "X-Orchestrion-Status": status})
        except (ApiError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - a one-line 500; the connection stays usable
            raise server_error(exc) from None

    return app


def _asked(header: str | None) -> bool:
    """Whether an opt-in header says yes."""
    return header is not None and header.strip().lower() in ("1", "true", "yes", "on")


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads its body itself (for its own 400s and size limit)."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's OpenAPI document, with the request models the routes read themselves."""
    if app.openapi_schema is None:
        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for model in (ChatRequest, ResponsesRequest):
            found = model.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(found.pop("$defs", {}))
            schemas[model.__name__] = found
        app.openapi_schema = doc
    return app.openapi_schema


def _refused_body(why: str) -> bytes:
    return orjson.dumps(error_body(why, type="invalid_request_error", code="forbidden_host"))


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
    svc: Service = app.state.service
    sock = bind_socket(settings.host, settings.port)
    server = _Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                    timeout_graceful_shutdown=5), svc)
    auth = f"; clients must send the key in ${settings.api_key_env}" if settings.api_key_env else ""
    line = (f"orchestrion serve: listening on {base_url(sock)} — {len(strategies())} strategies as models "
            f"({MODEL_PREFIX}<strategy>); traces in {svc.store.path}{auth}; Ctrl-C to stop")
    asyncio.run(_serve(server, sock, line))


class _Server(uvicorn.Server):
    """uvicorn's server, which cancels the episodes in flight as soon as it starts to stop: their
    requests then end at once with an error body instead of waiting out the graceful timeout."""

    def __init__(self, config: uvicorn.Config, svc: Service) -> None:
        super().__init__(config)
        self.svc = svc

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.svc.stop_episodes()
        await super().shutdown(sockets)


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
