"""`orchestrion report RUN_ID`: write an eval run's markdown report and plots."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import DbOpt, friendly, note_opened, out, out_folder, utf8_text


def register(app: typer.Typer) -> None:
    """Add the ``report`` command to ``app``."""

    @app.command("report")
    @friendly
    def report(
        run_id: Annotated[str, typer.Argument(help="eval run id (or a unique prefix of one)",
                                              callback=utf8_text("RUN_ID"))],
        out_dir: Annotated[Path | None, typer.Option(
            "--out", callback=out_folder("--out"), help="folder to write into; default report-<run id prefix>")] = None,
        db: DbOpt = None,
    ) -> None:
        """Write report.md (config, per-strategy table, Pareto-optimal strategies) and PNG plots for an eval run."""
        from ..eval.report import resolve_run, write_report
        from ..trace import atomic_files
        from ..trace.store import default_db_path, open_for_reading

        path = db if db is not None else default_db_path()
        note_opened(path)
        store = open_for_reading(path)  # a reading command: it never creates a database
        full_id = resolve_run(store, run_id)
        folder = out_dir if out_dir is not None else Path(f"report-{full_id[:8]}")
        with atomic_files(folder) as staging:  # each file whole, or none: a failure leaves no partial report
            result = write_report(store, full_id, staging)
        out.print(f"report for run {result.run_id}:", highlight=False)
        for path in result.paths:
            out.print(f"  {folder / path.name}", highlight=False, markup=False)
        if result.pareto:
            out.print(f"Pareto-optimal: {', '.join(result.pareto)}", highlight=False, markup=False)
        if result.failed:
            out.print(f"failed entirely: {', '.join(result.failed)}", highlight=False, markup=False)
