"""`orchestrion auto learn`: build auto's history on a dataset's @train side and print the arm table."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.table import Table

from ..eval.learn import ArmRow, learn_arms
from ..eval.runner import Observer, Tally
from ..models.pool import default_pool_ref
from ..trace.store import TraceStore
from ._common import DbOpt, PoolOpt, err, friendly, out
from ._eval import pool_ref


class _ArmProgress(Observer):
    """One line per arm as its run starts, then one per finished episode count of ten."""

    def __init__(self, arm: str) -> None:
        self.arm = arm

    def started(self, run_id: str, tally: Tally, resumed: bool) -> None:
        verb = f"resuming ({tally.done} of {tally.total} done)" if resumed else f"{tally.total} episodes"
        err.print(f"[{self.arm}] run {run_id}: {verb}", highlight=False, markup=False)

    def episode(self, outcome: object, tally: Tally) -> None:
        if tally.done % 5 == 0 or tally.done == tally.total:
            acc = "-" if tally.accuracy is None else f"{tally.accuracy:.2f}"
            line = f"[{self.arm}] {tally.done}/{tally.total} episodes, accuracy {acc}"
            err.print(line, highlight=False, markup=False)


def arm_table(rows: list[ArmRow], title: str) -> Table:
    table = Table(title=title)
    for column in ("arm", "episodes", "accuracy ± se", "compute units/ep", "s/ep", "run"):
        table.add_column(column)
    for r in sorted(rows, key=lambda r: -r.accuracy):
        table.add_row(r.arm, str(r.episodes), f"{r.accuracy:.2f} ± {r.stderr:.2f}", f"{r.cost_units:.2f}",
                      f"{r.wall_s:.1f}", r.run_id)
    return table


def register(app: typer.Typer) -> None:
    """Add `auto learn` to ``app``."""
    auto_app = typer.Typer(no_args_is_help=True, help="The auto strategy's history: learn it on your own data.")
    app.add_typer(auto_app, name="auto")

    @auto_app.command("learn")
    @friendly
    def learn(
        dataset: Annotated[str, typer.Option(
            "--dataset", "-d", help="the @train side of a dataset, e.g. jsonl:mine.jsonl@train")],
        pool: PoolOpt = None,
        arms: Annotated[str | None, typer.Option(
            "--arms", help="comma-separated arms, 'strategy' or 'strategy:model' [default: auto's own for the pool]")
        ] = None,
        limit: Annotated[int, typer.Option("--limit", min=1, help="examples per arm")] = 20,
        seed: Annotated[int, typer.Option("--seed", help="dataset sampling seed")] = 7,
        db: DbOpt = None,
    ) -> None:
        """Run every arm auto chooses among on a dataset's @train side (resumable: runs already in the
        database are finished or reused), then print the arm table it learned."""
        store = TraceStore(db)
        ref = pool_ref(default_pool_ref() if pool is None else str(pool))
        names = None if arms is None else [a.strip() for a in arms.split(",") if a.strip()]
        try:
            rows = asyncio.run(learn_arms(dataset, store, pool=ref, arms=names, limit=limit, seed=seed,
                                          observer=_ArmProgress))
        except KeyboardInterrupt:
            err.print("interrupted; finished episodes are kept: the same command resumes.")
            raise typer.Exit(130) from None
        finally:
            store.close()
        out.print(arm_table(rows, f"auto's arms on {dataset} ({limit} examples each)"))
        err.print("auto reads these episodes as its history: orchestrion eval -d <the @test side> -s auto "
                  "(with --set arms=... when --arms was given)", highlight=False, markup=False)
