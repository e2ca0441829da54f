"""`orchestrion run TASK`: solve one task and print the answer, tokens, cost, wall time and trace id.

Each call is a run of its own (a ``runs`` row of kind ``run``) whose lock it holds from before
the row exists, as ``serve`` does. SIGTERM and Ctrl-C cancel the episode, which is recorded
``cancelled`` before the command exits (143 or 130). A process that dies without closing its
episode (kill -9, a full disk that keeps the last update from being written) leaves its run
``running`` with the lock free: the next ``run`` or ``eval`` marks that episode ``interrupted``
(:func:`orchestrion.eval.recover_dead_runs`, which ``serve`` uses at start).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.markup import escape

from .._errors import TraceError
from ..api import EpisodeResult, solve
from ..eval import recover_dead_runs, run_lock
from ..models.pool import Pool, load_pool
from ..runtime.budget import Budget
from ..runtime.options import episode_options
from ..status import EpisodeStatus, RunStatus
from ..strategies.base import Strategy
from ..strategies.registry import get_strategy
from ..tools.defaults import default_tools
from ..trace import new_id
from ..trace.store import TraceStore
from ._common import DbOpt, PoolOpt, err, friendly, parse_settings, task_text
from ._otel import OtlpOpt, finish_sender, pool_providers, start_sender

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def register(app: typer.Typer) -> None:
    """Add ``run`` to ``app``."""
    app.command("run")(run)


@friendly
def run(
    task: Annotated[str, typer.Argument(help="the task, in quotes")],
    strategy: Annotated[str, typer.Option(
        "--strategy", "-s", help="strategy name (see `orchestrion strategies`)")] = "para",
    pool: PoolOpt = None,
    db: DbOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    budget: Annotated[list[str], typer.Option(
        "--budget", help="limit, e.g. tokens=4000 or wall_s=60 (repeatable)")] = [],  # noqa: B006
    max_parallel: Annotated[int | None, typer.Option("--max-parallel", min=1, help="1 = serial variant")] = None,
    max_active: Annotated[int | None, typer.Option(
        "--max-active", min=1, help="proactive: sub-agents running at once")] = None,
    corpus: Annotated[Path | None, typer.Option("--corpus", help="folder or JSONL for the retrieve tool")] = None,
    settings: Annotated[list[str], typer.Option("--set", help="strategy option KEY=VALUE (repeatable)")] = [],  # noqa: B006
    orchestrator_adapter: Annotated[Path | None, typer.Option(
        "--orchestrator-adapter",
        help="LoRA adapter for the orchestrator (dir from `train sft`, or adapter.gguf)")] = None,
    otlp_endpoint: OtlpOpt = None,
) -> None:
    """Solve one task and print the answer, tokens, cost, wall time and trace id."""
    task = task_text(task)
    limits = Budget.parse_cli(budget)
    options = parse_settings(settings)
    if max_parallel is not None:
        options["max_parallel"] = max_parallel
    if max_active is not None:
        options["max_active"] = max_active
    the_pool = load_pool(pool)
    if orchestrator_adapter is not None:
        the_pool = the_pool.with_orchestrator_adapter(orchestrator_adapter)
    chosen = _checked(strategy, the_pool, options)
    store = TraceStore(db)
    note_recovered(store)
    sender = start_sender(otlp_endpoint, store, providers=pool_providers(the_pool))
    run_id, episode_id = new_id(), new_id()

    async def solve_and_close() -> EpisodeResult:
        try:
            return await solve(task, strategy=chosen, pool=the_pool, tools=default_tools(corpus), store=store,
                               budget=limits, options=options, run_id=run_id, episode_id=episode_id)
        finally:
            await the_pool.aclose()  # HTTP sessions closed on every path, failures included

    try:
        result = solve_in_run(store, run_id, {"strategy": strategy, "pool": the_pool.source}, solve_and_close)
        if sender is not None:
            sender.add(result.trace_id)
    except _Stopped as stop:
        ended = store.episode(episode_id)
        what = f"episode {episode_id} is recorded {ended.status}" if ended else "no episode was started"
        err.print(f"{stop.reason}; {what}", markup=False, highlight=False)
        raise typer.Exit(EXIT_CODES[stop.signum]) from None
    finally:
        finish_sender(sender)
    _print_result(result, as_json)
    if result.status != EpisodeStatus.OK:
        raise typer.Exit(1)


def _checked(name: str, pool: Pool, options: dict[str, Any]) -> Strategy:
    """The strategy, once its options pass the checks its episode makes before it starts (the
    same calls), so that a bad name or option is one line and leaves no run behind."""
    chosen = get_strategy(name)
    settings = episode_options(chosen.Options, chosen.name, pool.config.strategies.get(chosen.name, {}), pool.source,
                               options)
    chosen.check_options(settings, pool)
    return chosen


def note_recovered(store: TraceStore) -> None:
    """Mark what dead ``run`` and ``serve`` processes left ``running`` as ``interrupted``, in one line."""
    recovered = recover_dead_runs(store)
    if recovered:
        err.print(f"note: marked the unfinished episodes of {len(recovered)} stopped run(s) interrupted "
                  f"({', '.join(recovered)})", markup=False, highlight=False)


class _Stopped(Exception):
    """SIGTERM or Ctrl-C stopped the command; the episode was cancelled."""

    def __init__(self, signum: signal.Signals) -> None:
        super().__init__(signum.name)
        self.signum = signum
        self.reason = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"


def solve_in_run(store: TraceStore, run_id: str, config: dict[str, str],
                 solve_one: Callable[[], Awaitable[EpisodeResult]]) -> EpisodeResult:
    """``solve_one()`` inside a run of kind ``run`` whose lock this process holds; SIGTERM and
    SIGINT cancel it (:class:`_Stopped` once the cancelled episode is committed)."""
    with run_lock(store.path, run_id):  # before the row exists: a later command never takes it for a dead run
        store.create_run(run_id, "run", config)
        caught: list[signal.Signals] = []
        try:
            result = asyncio.run(_cancelled_by_signals(solve_one, caught))
        except BaseException as exc:
            store.set_run_status(run_id, RunStatus.INTERRUPTED if caught else RunStatus.FINISHED)
            with contextlib.suppress(TraceError):  # a full disk: the next command marks it instead
                store.flush()
            if caught and isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
                raise _Stopped(caught[0]) from None
            if isinstance(exc, TraceError) and store.failing is not None:
                raise TraceError(f"trace store {store.path}: writes are failing ({store.failing}), so the episode "
                                 "could not be closed; once they succeed again, the next `orchestrion run` or "
                                 "`eval` marks it interrupted") from None
            raise
        store.set_run_status(run_id, RunStatus.FINISHED)
        store.flush()
        return result


async def _cancelled_by_signals(solve_one: Callable[[], Awaitable[EpisodeResult]],
                                caught: list[signal.Signals]) -> EpisodeResult:
    loop, task = asyncio.get_running_loop(), asyncio.current_task()

    def on_signal(signum: signal.Signals) -> None:
        caught.append(signum)
        if task is not None:
            task.cancel()

    for signum in EXIT_CODES:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return await solve_one()
    finally:
        for signum in EXIT_CODES:
            loop.remove_signal_handler(signum)


def _print_result(result: EpisodeResult, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(orjson.dumps(result.to_dict()).decode() + "\n")
        return
    sys.stdout.write((result.answer or "(no answer)") + "\n")  # plain: a 10 MB answer is not laid out by Rich
    sys.stdout.flush()
    cost = "unknown" if result.cost_usd is None else f"${result.cost_usd:.6f}"
    err.print(
        f"[dim]status={result.status} tokens={result.usage.input_tokens}+{result.usage.output_tokens} "
        f"cost={cost} wall={result.wall_s:.2f}s trace_id={result.trace_id}[/dim]",
        highlight=False,
    )
    if result.error:
        err.print(f"[yellow]{escape(result.error)}[/yellow]", highlight=False)
    if result.status == EpisodeStatus.BUDGET_EXCEEDED and result.error and "budget exceeded: " in result.error:
        limit = result.error.split("budget exceeded: ", 1)[1].split()[0]
        err.print(f"raise it with --budget {limit}=N", markup=False, highlight=False)
