"""`orchestrion eval`: run strategies over a dataset, with epochs, progress, resume and a summary table."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .._errors import ConfigError
from ..eval.executors import Outcome, make_executor
from ..eval.runner import EvalConfig, EvalRun, Observer, Tally, resume_command, resume_config, run_eval
from ..eval.summary import counted_episodes, summarize, summary_table
from ..models.pool import default_pool_ref
from ..models.presets import is_preset
from ..runtime.budget import Budget
from ..status import EpisodeStatus
from ..trace.store import TraceStore
from ._common import DbOpt, PoolOpt, at_most, err, fail, friendly, out, parse_settings, utf8_text
from ._otel import OtlpOpt, finish_sender, start_sender
from ._render import rich_table
from ._run import note_recovered

if TYPE_CHECKING:
    from ..trace.otel import OtlpSender


class _ProgressObserver(Observer):
    """A progress bar on stderr: episodes done/total, accuracy and cost so far."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task_id: Any = None
        self.run_id: str | None = None
        self.tally: Tally | None = None
        self.sender: OtlpSender | None = None

    def started(self, run_id: str, tally: Tally, resumed: bool) -> None:
        self.run_id, self.tally = run_id, tally
        verb = "resuming" if resumed else "started"
        before = f", {tally.done} finished before" if resumed else ""
        err.print(f"run {run_id} {verb}: {tally.total} episodes{before}", highlight=False)
        self.task_id = self.progress.add_task("episodes", total=tally.total, completed=tally.done, stats=_stats(tally))
        self.progress.start()

    def episode(self, outcome: Outcome, tally: Tally) -> None:
        self.tally = tally
        self.progress.update(self.task_id, completed=tally.done, stats=_stats(tally))
        if self.sender is not None and outcome.episode_id:
            self.sender.add(outcome.episode_id)  # committed: its spans go out as OTel now


def _stop(progress: Progress) -> None:
    """Stop the bar if it ever started (stopping an unstarted one prints a stray blank line)."""
    if progress.live.is_started:
        progress.stop()


def _stats(tally: Tally) -> str:
    acc = "-" if tally.accuracy is None else f"{tally.accuracy:.3f}"
    cost = "unknown" if tally.cost is None else f"${tally.cost:.6f}"
    errors = f" errors {tally.errors}" if tally.errors else ""
    return f"acc {acc}  cost {cost}{errors}"


def register(app: typer.Typer) -> None:
    """Add `eval` to ``app``."""

    @app.command("eval")
    @friendly
    def eval_cmd(
        dataset: Annotated[str | None, typer.Option(
            "--dataset", "-d",
            help="e.g. bigbench:arithmetic/2_digit_multiplication, humaneval, reasoning-gym:gcd, jsonl:PATH")] = None,
        strategies: Annotated[str | None, typer.Option(
            "--strategies", "-s", help="comma-separated strategy names [default: direct]")] = None,
        limit: Annotated[int | None, typer.Option(
            "--limit", min=1,
            help="first N tasks (after shuffling with --seed); with --resume, a larger N extends the run")] = None,
        epochs: Annotated[int | None, typer.Option(
            "--epochs", min=1, help="runs per task and strategy [default: 1]")] = None,
        concurrency: Annotated[int | None, typer.Option(
            "--concurrency", min=1, help="episodes in flight [default: 8]")] = None,
        pool: PoolOpt = None,
        adapter: Annotated[Path | None, typer.Option(
            "--orchestrator-adapter", help="LoRA adapter for the orchestrator (from `train sft|grpo|opod`)")] = None,
        seed: Annotated[int | None, typer.Option(
            "--seed", help="dataset sampling seed; episodes get option seed = N + epoch")] = None,
        db: DbOpt = None,
        budget: Annotated[list[str], typer.Option(
            "--budget", help="per-episode limit, e.g. tokens=4000 (repeatable)")] = [],  # noqa: B006
        settings: Annotated[list[str], typer.Option("--set", help="strategy option KEY=VALUE (repeatable)")] = [],  # noqa: B006
        executor: Annotated[str | None, typer.Option(
            "--executor", help="local (asyncio) or ray [default: local]")] = None,
        ray_address: Annotated[str | None, typer.Option(
            "--ray-address", help="Ray cluster address; default: a local instance")] = None,
        resume: Annotated[str | None, typer.Option("--resume", callback=utf8_text("--resume"),
                                                   help="RUN_ID of an interrupted run to finish")] = None,
        retry_errors: Annotated[bool, typer.Option(
            "--retry-errors", help="with --resume: run again the episodes that ended in error")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="print the summaries as JSON")] = False,
        otlp_endpoint: OtlpOpt = None,
    ) -> None:
        """Evaluate strategies on a dataset: tasks x strategies x epochs, scored and traced, resumable."""
        if retry_errors and resume is None:  # the library names its parameter; the flags are named here
            raise ConfigError(
                "--retry-errors re-runs the failed episodes of an earlier run: use it with --resume RUN_ID")
        store = TraceStore(db)
        note_recovered(store)
        if resume is not None:
            fixed = {"--dataset": dataset, "--strategies": strategies, "--epochs": epochs,
                     "--pool": pool, "--orchestrator-adapter": adapter, "--seed": seed, "--budget": budget,
                     "--set": settings}
            ignored = [name for name, value in fixed.items() if value not in (None, [])]
            if ignored:
                err.print(f"[yellow]--resume uses the run's saved settings; ignoring {', '.join(ignored)}[/yellow]")
            _, config = resume_config(store, resume)
        else:
            if dataset is None:
                raise ConfigError(
                    "--dataset is required (or --resume RUN_ID); e.g. --dataset bigbench:arithmetic/1_digit_addition"
                )
            names = strategy_names(strategies)
            config = EvalConfig(
                dataset=dataset, strategies=names, limit=limit, epochs=epochs or 1, seed=seed,
                pool=pool_ref(default_pool_ref() if pool is None else str(pool)),  # a resume uses the same pool
                orchestrator_adapter=None if adapter is None else str(adapter.resolve()),
                budget=Budget.parse_cli(budget).model_dump(exclude_none=True),
                options=parse_settings(settings),
            )
        chosen = executor or config.executor
        address = ray_address or config.ray_address
        n = concurrency or config.concurrency
        at_most("--concurrency", n, 100_000)
        if resume is None:
            if chosen not in ("local", "ray"):
                raise ConfigError(f"--executor '{chosen}': choose local or ray")
            config = config.model_copy(update={"executor": chosen, "ray_address": address, "concurrency": n})
        runner = make_executor(chosen, concurrency=n, ray_address=address)
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), console=err, transient=True)
        observer = _ProgressObserver(progress)
        observer.sender = start_sender(otlp_endpoint, store)
        async def main() -> EvalRun:
            # Ctrl-C: stop starting episodes and cancel those in flight; the run is marked interrupted
            loop, task = asyncio.get_running_loop(), asyncio.current_task()

            def on_sigint() -> None:
                runner.stop.on = True
                if task is not None:
                    task.cancel()

            loop.add_signal_handler(signal.SIGINT, on_sigint)
            try:
                return await run_eval(config, store, resume=resume, executor=runner, observer=observer,
                                      retry_errors=retry_errors, extend_to=limit if resume is not None else None)
            finally:
                loop.remove_signal_handler(signal.SIGINT)

        try:
            run = asyncio.run(main())
        except (KeyboardInterrupt, asyncio.CancelledError):
            _stop(progress)
            err.print(interrupted_line(observer.run_id, observer.tally, db), markup=False, highlight=False)
            raise typer.Exit(130) from None
        finally:
            _stop(progress)
            finish_sender(observer.sender)
        summaries = summarize(store, run.run_id)
        if as_json:
            body = {"run_id": run.run_id, "summaries": [dataclasses.asdict(s) for s in summaries]}
            sys.stdout.write(orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")
        else:
            title = f"{run.config.dataset} — run {run.run_id}"
            out.print(rich_table(summary_table(summaries, title=title)))
        err.print(f"run {run.run_id} finished: {run.ran} episodes ran, {run.skipped} were done before", highlight=False)
        _fail_if_nothing_succeeded(store, run.run_id)
        _fail_if_errors(store, run.run_id, db)


def strategy_names(given: str | None) -> list[str]:
    """The ``--strategies`` list (default ``direct``): each name once, none blank; else one line."""
    if given is None:
        return ["direct"]
    names = [s.strip() for s in given.split(",")]
    if not any(names):
        raise ConfigError(f"--strategies {given!r}: give at least one strategy name, e.g. --strategies direct,cot")
    if not all(names):
        raise ConfigError(f"--strategies {given!r}: a blank name between commas; e.g. --strategies direct,cot")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"--strategies {given!r}: {', '.join(twice)} given more than once; give each strategy "
                          "once (--epochs runs each more times)")
    return names


def interrupted_line(run_id: str | None, tally: Tally | None, db: Path | None) -> str:
    """The one line a Ctrl-C'd eval ends with: how many episodes are finished, and how to go on."""
    if run_id is None or tally is None:
        return "interrupted before the run started; nothing ran"
    return (f"interrupted: {tally.done} of {tally.total} episodes finished and kept; "
            f"continue with: {resume_command(run_id, db)}")


def pool_ref(ref: str) -> str:
    """What a run stores as its pool: a preset name as is, a file as its absolute path, so that
    ``--resume`` finds it from any folder."""
    if is_preset(ref) and not Path(ref).is_file():
        return ref
    return str(Path(ref).expanduser().resolve())


def _fail_if_errors(store: TraceStore, run_id: str, db: Path | None) -> None:
    """Exit 1 with one line when some counted episodes ended in error: the run is not complete."""
    errors = [ep for ep in counted_episodes(store, run_id) if ep.status == EpisodeStatus.ERROR]
    if errors:
        fail(f"run {run_id}: {len(errors)} episode(s) ended in error; once the cause is fixed, run them again "
             f"with: {resume_command(run_id, db)} --retry-errors", code=1)


def _fail_if_nothing_succeeded(store: TraceStore, run_id: str) -> None:
    """Exit 1 with one line when no counted episode of the run ended ok (every one errored, say)."""
    episodes = counted_episodes(store, run_id)
    if any(ep.status == EpisodeStatus.OK for ep in episodes):
        return
    statuses = Counter(str(ep.status) for ep in episodes)
    seen = ", ".join(f"{n} {status}" for status, n in statuses.most_common()) or "no episodes"
    errors = [str(ep.error or "") for ep in episodes if ep.error]
    first = f"; first error: {errors[0].splitlines()[0][:200]}" if errors else ""
    fail(f"run {run_id}: no episode succeeded ({seen}){first}", code=1)

