"""The trace viewer: a web page over the trace store, served or exported as static files.

``orchestrion view`` serves the page and a small JSON API with FastAPI + uvicorn:

- ``GET /api/facets``: the filters' choices (strategies, datasets) and one line per run;
- ``GET /api/episodes?q=&strategy=&run=&dataset=&correct=&label=&sort=&offset=&limit=``: one page
  of episode summaries (with each answer and annotation), newest first unless ``sort`` says
  otherwise (``score``, ``-cost``, ...), with ``total`` (how many match in all). ``q`` searches
  the task text (every word, any case); ``run=-`` selects episodes recorded outside any run;
  ``correct`` is yes, no or unknown;
- ``GET /api/charts?by=time|run&<the list's filters>``: accuracy, cost and latency per strategy
  over time buckets or runs (``_viewer_charts``);
- ``POST /api/episodes/{id}/annotation`` with a JSON body ``{"label": .., "note": ..}``: sets the
  episode's annotation (both empty: clears it), stored in the trace store; the training export
  filters on the label (``train export --label NAME``);
- ``GET /api/episodes/{id}``: one episode (an id prefix works) with its spans, plan DAG or span
  graph, decisions, events and the other episodes of the same task (for the compare view);
- ``GET /api/stream``: server-sent events, one ``change`` event (``{"episodes": [ids]}``) per
  moment something was written, so the page refreshes the list, or a running episode, without
  polling.

Where the changes come from: the stream subscribes to the store's in-process event bus
(``store.bus``), which announces committed writes of a writer in this process (a viewer
embedded beside running episodes) with their episode ids and no SQL at all. ``orchestrion view``
usually watches a file another process writes; the bus then stays silent, so the stream also
keeps one read-only SQLite connection and reads ``PRAGMA data_version`` every
``WATCH_INTERVAL_S`` seconds: a number that changes when another connection commits. Only when it
has changed does it read which episodes are running or just finished, and announces those.
Neither path creates the database file: the watcher opens it read-only.

``orchestrion view --export DIR`` writes the same page with the data embedded in ``data.js``
(``window.ORCHESTRION_DATA``), because browsers refuse ``fetch()`` of ``file://`` URLs; the
bundle opens from disk with no server. There the list sorts and filters the embedded episodes
as the API would, the charts are drawn over all of them (the list's filters apply to the served
charts only), and annotations are shown but not editable. The graph and timeline are drawn by
vis-network and vis-timeline, vendored under ``static/vendor/`` (``static/widgets.js``).
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from .._errors import TraceError
from ..trace import FileWatch, TraceStore, atomic_files
from . import _viewer_data as data
from ._exposure import HostGuard, api_key, key_matches, loopback, refuse_exposure
from ._viewer_charts import charts

DATA_PLACEHOLDER = "<!-- orchestrion:data -->"
ASSETS = ("app.js", "app.css", "charts.js", "diff.js", "widgets.js")  # static/ files besides index.html and vendor/
EXPORT_LIMIT = 2000  # newest episodes embedded in a static bundle
WATCH_INTERVAL_S = 0.5  # how often the stream looks for writes of another process
HEARTBEAT_S = 15.0  # an SSE comment this often keeps proxies from closing an idle stream


def static_dir() -> Path:
    """The folder holding index.html, app.js, app.css and vendor/."""
    return Path(str(resources.files("orchestrion.serve").joinpath("static")))


def _json(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Any:
    from fastapi import Response

    return Response(orjson.dumps(value, default=str), status_code=status, media_type="application/json",
                    headers=headers)


def _annotation(body: bytes) -> tuple[str, str]:
    """(label, note) from an annotation request body; an HTTP 400 when it is not one."""
    from fastapi import HTTPException

    try:
        value = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        raise HTTPException(400, "the annotation body is not JSON") from None
    if not isinstance(value, dict) or set(value) - {"label", "note"}:
        raise HTTPException(400, 'the annotation body is {"label": "...", "note": "..."}')
    label, note = value.get("label") or "", value.get("note") or ""
    if not isinstance(label, str) or not isinstance(note, str):
        raise HTTPException(400, "label and note are strings")
    label, note = " ".join(label.split()), note.strip()
    if len(label) > data.MAX_LABEL or len(note) > data.MAX_NOTE:
        raise HTTPException(400, f"a label has at most {data.MAX_LABEL} characters and a note {data.MAX_NOTE}")
    return label, note


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"


def create_app(store: TraceStore, api_key: str | None = None, *, check_host: bool = True) -> Any:
    """The viewer as a FastAPI application (API routes, then the static page at /). With ``api_key``
    every request must carry it: ``Authorization: Bearer KEY``, or HTTP Basic with KEY as the
    password (the browser asks for it once). Without one, a request for another Host than a
    loopback name (unless not ``check_host``) or from another site's Origin is a 403
    (:class:`~orchestrion.serve._exposure.HostGuard`: DNS rebinding and cross-site posts)."""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.responses import StreamingResponse
    from fastapi.staticfiles import StaticFiles

    app = FastAPI(title="Orchestrion trace viewer", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        if api_key is not None and not key_matches(request.headers.get("authorization", ""), api_key):
            return _json({"detail": "this viewer needs its key: the password of the login prompt, or "
                                    "'Authorization: Bearer <key>'"}, 401,
                         headers={"WWW-Authenticate": 'Basic realm="orchestrion view"'})
        try:
            return await call_next(request)
        except Exception as exc:  # noqa: BLE001 - one line to the page, never a traceback
            return _json({"detail": _one_line(exc)}, 500)

    @app.get("/api/facets")
    def get_facets() -> Any:
        return _json(data.facets(store))

    @app.get("/api/episodes")
    def get_episodes(strategy: str = "", run: str = "", dataset: str = "", correct: str = "", q: str = "",
                     label: str = "", sort: str = "", offset: int = 0, limit: int = data.PAGE) -> Any:
        try:
            page = data.episode_page(store, strategy=strategy or None, run=run or None, dataset=dataset or None,
                                     correct=correct or None, q=q or None, label=label or None, sort=sort or None,
                                     offset=offset, limit=limit)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        return _json(page)

    @app.get("/api/charts")
    def get_charts(by: str = "time", strategy: str = "", run: str = "", dataset: str = "", correct: str = "",
                   q: str = "", label: str = "") -> Any:
        try:
            found = data.episode_summaries(store, strategy=strategy or None, run=run or None, dataset=dataset or None,
                                           correct=correct or None, q=q or None, label=label or None)
            return _json(charts(found, by))
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None

    async def post_annotation(request: Any) -> Any:  # a plain Starlette route: it is handed the request
        episode_id = str(request.path_params["episode_id"])
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise HTTPException(415, "send the annotation as JSON: Content-Type: application/json")
        label, note = _annotation(await request.body())
        try:
            row = store.episode(episode_id)
        except TraceError as exc:
            raise HTTPException(400, str(exc)) from None
        if row is None:
            raise HTTPException(404, f"no episode with trace id '{episode_id}'")
        store.annotate_episode(row.id, label=label, note=note)
        await store.aflush()
        return _json({"id": row.id, "label": label or None, "note": note or None})

    app.add_route("/api/episodes/{episode_id}/annotation", post_annotation, methods=["POST"])

    async def get_stream(request: Any) -> Any:  # a plain Starlette route: it is handed the request
        async def events() -> AsyncIterator[str]:
            listening = False
            async for ids in watch(store):
                if await request.is_disconnected():
                    return
                if not listening:  # the first item says the watch is in place: nothing written from now is missed
                    listening = True
                    yield "retry: 2000\nevent: ready\ndata: {}\n\n"
                elif ids is None:
                    yield ": alive\n\n"
                else:
                    yield "event: change\ndata: " + orjson.dumps({"episodes": sorted(ids)}).decode() + "\n\n"

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    app.add_route("/api/stream", get_stream, methods=["GET"])

    @app.get("/api/episodes/{episode_id}")
    def get_episode(episode_id: str) -> Any:
        try:
            found = data.episode_detail(store, episode_id)
        except TraceError as exc:
            raise HTTPException(400, str(exc)) from None
        except (sqlite3.DatabaseError, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise HTTPException(422, f"episode '{episode_id}': its stored record is damaged and cannot be shown "
                                     f"({_one_line(exc)})") from None
        if found is None:
            raise HTTPException(404, f"no episode with trace id '{episode_id}'")
        return _json(found)

    app.mount("/", StaticFiles(directory=static_dir(), html=True), name="static")
    if api_key is None:
        app.add_middleware(HostGuard, check_host=check_host, body=lambda why: orjson.dumps({"detail": why}))
    return app


async def watch(store: TraceStore, interval_s: float = WATCH_INTERVAL_S,
                watch_file: bool = True) -> AsyncIterator[set[str] | None]:
    """Yield the ids of episodes that changed (an empty set: which is unknown), about once per
    ``interval_s`` at most; None as a heartbeat. The first item, an empty set, comes once listening.
    ``watch_file=False`` hears this process's writes only (the bus)."""
    files = FileWatch(store.path if watch_file else None)
    quiet_since = time.monotonic()
    try:
        with store.bus.subscribe() as bus:
            yield set()
            while True:
                first = await bus.get(timeout=interval_s)
                ids = set()
                if first is not None:
                    await asyncio.sleep(interval_s / 2)  # let the rest of a burst arrive: one refresh for it
                    ids = {first.episode_id, *(e.episode_id for e in bus.drain())}
                from_file = files.changed()  # this process's writes bump it too; one message covers both
                if from_file is not None and first is None:
                    ids = from_file or {""}
                if ids:
                    quiet_since = time.monotonic()
                    yield {i for i in ids if i}
                elif time.monotonic() - quiet_since >= HEARTBEAT_S:
                    quiet_since = time.monotonic()
                    yield None
    finally:
        files.close()


def check_viewer_exposure(host: str, api_key_env: str | None, insecure_no_auth: bool) -> str | None:
    """The viewer's key (None without one); a non-loopback ``host`` without one is refused, as for serve."""
    refuse_exposure(host, api_key_env, insecure_no_auth, what="read every prompt, answer and decision in the traces")
    return api_key(api_key_env)


def run_viewer(store: TraceStore, *, host: str, port: int, api_key_env: str | None = None,
               insecure_no_auth: bool = False) -> None:
    """Serve the viewer until interrupted; only on loopback unless it has a key (or is told not to care)."""
    import uvicorn

    key = check_viewer_exposure(host, api_key_env, insecure_no_auth)
    shown = f"[{host}]" if ":" in host else host
    auth = f"; log in with the key in ${api_key_env} as the password" if api_key_env else ""
    sys.stderr.write(f"trace viewer for {store.path} at http://{shown}:{port}/{auth} (Ctrl-C stops)\n")
    uvicorn.run(create_app(store, key, check_host=loopback(host)), host=host, port=port, log_level="warning")


def export_static(store: TraceStore, out_dir: Path) -> Path:
    """Write the page, its assets and every episode's data to ``out_dir``; returns index.html.

    Each file is written in a temporary folder beside ``out_dir`` and renamed into it (a damaged
    database halfway leaves no partial file); the bundle is owner-only (0o700 folders, 0o600
    files), since it holds every prompt."""
    out_dir = Path(out_dir)
    page = (static_dir() / "index.html").read_text(encoding="utf-8")
    if DATA_PLACEHOLDER not in page:
        raise TraceError("viewer index.html lacks its data placeholder")
    payload = orjson.dumps(data.bundle(store, limit=EXPORT_LIMIT), default=str)  # read before anything is written
    try:
        with atomic_files(out_dir, "--export") as staging:
            _write_bundle(staging, page, payload)
    except OSError as exc:
        raise TraceError(f"cannot write the viewer bundle to {out_dir}: {exc}") from None
    return out_dir / "index.html"


def _write_bundle(folder: Path, page: str, payload: bytes) -> None:
    """The page, its assets and ``data.js`` in ``folder``."""
    src = static_dir()
    shutil.copytree(src / "vendor", folder / "vendor", copy_function=shutil.copyfile,
                    ignore=shutil.ignore_patterns("swagger-ui*"))  # serve's /docs, not the viewer's
    for name in ASSETS:
        shutil.copyfile(src / name, folder / name)
    (folder / "data.js").write_bytes(b"window.ORCHESTRION_DATA = " + payload + b";\n")
    (folder / "index.html").write_text(page.replace(DATA_PLACEHOLDER, '<script src="data.js"></script>'),
                                       encoding="utf-8")
