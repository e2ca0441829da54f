"""The trace viewer: a web page over the trace store, served or exported as static files.

``orchestrion view`` serves the page and a small JSON API with FastAPI + uvicorn:

- ``GET /api/facets``: the filters' choices (strategies, datasets) and one line per run;
- ``GET /api/episodes?strategy=&run=&dataset=&correct=&limit=``: episode summaries, newest first
  (``run=-`` selects episodes recorded outside any run; ``correct`` is yes, no or unknown);
- ``GET /api/episodes/{id}``: one episode (an id prefix works) with its spans, plan DAG or span
  graph, decisions and events.

``orchestrion view --export DIR`` writes the same page with the data embedded in ``data.js``
(``window.ORCHESTRION_DATA``), because browsers refuse ``fetch()`` of ``file://`` URLs; the
bundle opens from disk with no server. The graph and timeline are drawn by vis-network and
vis-timeline, vendored under ``static/vendor/``.
"""

from __future__ import annotations

import shutil
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from .._errors import TraceError
from ..trace.store import TraceStore
from . import _viewer_data as data

DATA_PLACEHOLDER = "<!-- orchestrion:data -->"
EXPORT_LIMIT = 2000  # newest episodes embedded in a static bundle


def static_dir() -> Path:
    """The folder holding index.html, app.js, app.css and vendor/."""
    return Path(str(resources.files("orchestrion.serve").joinpath("static")))


def _json(value: Any, status: int = 200) -> Any:
    from fastapi import Response

    return Response(orjson.dumps(value, default=str), status_code=status, media_type="application/json")


def create_app(store: TraceStore) -> Any:
    """The viewer as a FastAPI application (API routes, then the static page at /)."""
    from fastapi import FastAPI, HTTPException
    from fastapi.staticfiles import StaticFiles

    app = FastAPI(title="Orchestrion trace viewer", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/api/facets")
    def get_facets() -> Any:
        return _json(data.facets(store))

    @app.get("/api/episodes")
    def get_episodes(strategy: str = "", run: str = "", dataset: str = "", correct: str = "",
                     limit: int = 500) -> Any:
        try:
            found = data.episode_summaries(store, strategy=strategy or None, run=run or None,
                                           dataset=dataset or None, correct=correct or None, limit=max(1, limit))
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        return _json({"episodes": found, "count": len(found)})

    @app.get("/api/episodes/{episode_id}")
    def get_episode(episode_id: str) -> Any:
        try:
            found = data.episode_detail(store, episode_id)
        except TraceError as exc:
            raise HTTPException(400, str(exc)) from None
        if found is None:
            raise HTTPException(404, f"no episode with trace id '{episode_id}'")
        return _json(found)

    app.mount("/", StaticFiles(directory=static_dir(), html=True), name="static")
    return app


def run_viewer(store: TraceStore, *, host: str, port: int) -> None:
    """Serve the viewer until interrupted."""
    import uvicorn

    shown = f"[{host}]" if ":" in host else host
    sys.stderr.write(f"trace viewer for {store.path} at http://{shown}:{port}/ (Ctrl-C stops)\n")
    uvicorn.run(create_app(store), host=host, port=port, log_level="warning")


def export_static(store: TraceStore, out_dir: Path) -> Path:
    """Write the page, its assets and every episode's data to ``out_dir``; returns index.html."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        src = static_dir()
        for name in ("app.js", "app.css"):
            shutil.copyfile(src / name, out_dir / name)
        shutil.copytree(src / "vendor", out_dir / "vendor", dirs_exist_ok=True)
        payload = orjson.dumps(data.bundle(store, limit=EXPORT_LIMIT), default=str)
        (out_dir / "data.js").write_bytes(b"window.ORCHESTRION_DATA = " + payload + b";\n")
        page = (src / "index.html").read_text(encoding="utf-8")
        if DATA_PLACEHOLDER not in page:
            raise TraceError("viewer index.html lacks its data placeholder")
        index = out_dir / "index.html"
        index.write_text(page.replace(DATA_PLACEHOLDER, '<script src="data.js"></script>'), encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"cannot write the viewer bundle to {out_dir}: {exc}") from None
    return index
