"""`orchestrion report RUN_ID`: write an eval run's markdown report and plots."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .._cli_common import DbOpt, friendly, out


def register(app: typer.Typer) -> None:
    """Add the ``report`` command to ``app``."""

    @app.command("report")
    @friendly
    def report(
        run_id: Annotated[str, typer.Argument(help="eval run id (or a unique prefix of one)")],
        out_dir: Annotated[Path | None, typer.Option(
            "--out", help="folder to write into; default report-<run id prefix>")] = None,
        db: DbOpt = None,
    ) -> None:
        """Write report.md (config, per-strategy table, Pareto-optimal strategies) and PNG plots for an eval run."""
        from ..trace.store import TraceStore
        from .report import write_report

        result = write_report(TraceStore(db), run_id, out_dir)
        out.print(f"report for run {result.run_id}:", highlight=False)
        for path in result.paths:
            out.print(f"  {path}", highlight=False, markup=False)
        if result.pareto:
            out.print(f"Pareto-optimal: {', '.join(result.pareto)}", highlight=False, markup=False)
        if result.failed:
            out.print(f"failed entirely: {', '.join(result.failed)}", highlight=False, markup=False)
