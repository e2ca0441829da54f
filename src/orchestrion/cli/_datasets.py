"""`orchestrion datasets`: what evaluation data is available, and `datasets fetch NAME` to get it."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ._common import err, friendly, out


def _table() -> Table:
    from ..eval.datasets import NAMED_TASKS, list_datasets

    table = Table("dataset")
    table.add_column("location", overflow="fold")
    for column in ("available", "how to get it / contents", "use as"):
        table.add_column(column)
    uses = {
        "bigbench": "bigbench:TASK[/SUBTASK] or bigbench:PATH/task.json",
        "humaneval": "humaneval",
        "reasoning-gym": "reasoning-gym:FAMILY (e.g. reasoning-gym:gcd)",
        "jsonl": "jsonl:PATH or PATH.jsonl",
    }
    for info in list_datasets():
        mark = "[green]yes[/green]" if info.available else "[red]no[/red]"
        cells = (info.name, info.source, info.detail, uses.get(info.name, info.name))
        name, source, detail, use = (escape(c) for c in cells)
        table.add_row(name, source, mark, detail, use)
    table.caption = "named BIG-bench tasks: " + ", ".join(NAMED_TASKS) + " (any JSON task works)"
    return table


def _fetch(name: str, force: bool) -> None:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from ..eval.datasets import fetch_dataset

    with Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=err,
        transient=True
    ) as bar:
        job = bar.add_task(f"{name}: starting", total=None)

        def on_stage(stage: str) -> None:
            bar.update(job, description=f"{name}: {stage}", completed=0, total=None)

        def progress(done: int, total: int) -> None:
            bar.update(job, completed=done, total=total)

        path = fetch_dataset(name, progress=progress, force=force, on_stage=on_stage)
    out.print(f"{name}: ready in {path}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add `datasets` (list) and `datasets fetch NAME` to ``app``."""
    datasets_app = typer.Typer(help="Evaluation datasets: list them, fetch BIG-bench.")
    app.add_typer(datasets_app, name="datasets")

    @datasets_app.callback(invoke_without_command=True)
    @friendly
    def datasets(ctx: typer.Context) -> None:
        """List the evaluation datasets, where they are, and what still needs fetching."""
        if ctx.invoked_subcommand is None:
            out.print(_table())

    @datasets_app.command("fetch")
    @friendly
    def fetch(
        name: Annotated[str, typer.Argument(help="dataset to download: bigbench")],
        force: Annotated[bool, typer.Option("--force", help="download again even if already fetched")] = False,
    ) -> None:
        """Download a dataset's files into the cache (BIG-bench: ~360 MB download, ~1.7 GB of task files)."""
        _fetch(name, force)
