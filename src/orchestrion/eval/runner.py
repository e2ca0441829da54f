"""The evaluation runner: tasks x strategies x epochs, scored, resumable.

A run is a ``runs`` row (kind ``eval``) whose config holds everything needed to
run it again; its episodes carry its id, their task id, strategy and epoch.
Each episode is scored inside :func:`orchestrion.api.solve`, by the same update
that marks it finished, so an episode is either absent, unfinished, or finished
and scored. Resuming runs exactly the (task, strategy, epoch) triples that have
no counted episode yet and marks the unfinished leftovers ``interrupted``. One
process at a time runs a given run (:mod:`._lock`); a second one is refused with
the holder's pid, host and start time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .._errors import ConfigError
from ..runtime.budget import Budget
from ..runtime.episode import checked_options
from ..runtime.options import check_run_options, options_for
from ..runtime.types import Task
from ..status import EpisodeStatus, RunStatus
from ..strategies.registry import get_strategy
from ..trace.store import TraceStore
from ..trace.tracer import new_id
from ._lock import run_lock
from .executors import EpisodeJob, Executor, Outcome, PoolFactory, PoolSource, WorkItem, make_executor
from .summary import counted_episodes, run_info


class EvalConfig(BaseModel):
    """What an evaluation run is; stored as the ``runs.config`` JSON."""

    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(min_length=1)
    strategies: list[str] = Field(min_length=1)
    limit: int | None = Field(default=None, ge=1, lt=2**63)  # stored as JSON: 64-bit at most
    epochs: int = Field(default=1, ge=1, le=100_000)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    concurrency: int = Field(default=8, ge=1, le=100_000)
    pool: str | None = None
    orchestrator_adapter: str | None = None
    budget: dict[str, Any] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    # filled in when the run starts
    dataset_kind: str | None = None
    task_ids: list[str] = Field(default_factory=list)

    @field_validator("strategies")
    @classmethod
    def _each_once(cls, names: list[str]) -> list[str]:
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:  # the same (task, strategy, epoch) twice: duplicate rows, and resume could not tell them apart
            raise ValueError(f"each strategy once: {', '.join(twice)} is listed more than once")
        if not all(n.strip() for n in names):
            raise ValueError("a strategy name is blank")
        return names


@dataclass
class Tally:
    """Running totals for a progress display."""

    total: int
    done: int = 0
    scored: int = 0
    score_sum: float = 0.0
    cost_usd: float = 0.0
    cost_unknown: bool = False
    errors: int = 0

    @property
    def accuracy(self) -> float | None:
        return self.score_sum / self.scored if self.scored else None

    @property
    def cost(self) -> float | None:
        return None if self.cost_unknown else self.cost_usd

    def add(self, score: float | None, cost_usd: float | None, status: str) -> None:
        self.done += 1
        if score is not None:
            self.scored += 1
            self.score_sum += score
        if cost_usd is None:
            self.cost_unknown = True
        else:
            self.cost_usd += cost_usd
        self.errors += status == EpisodeStatus.ERROR


@dataclass
class EvalRun:
    """A finished (or fully resumed) run."""

    run_id: str
    config: EvalConfig
    total: int
    skipped: int
    ran: int


class Observer:
    """Hooks the CLI uses for progress; the defaults do nothing."""

    def started(self, run_id: str, tally: Tally, resumed: bool) -> None:
        """The run row exists; ``tally`` counts what was finished before (on resume)."""

    def episode(self, outcome: Outcome, tally: Tally) -> None:
        """One episode is committed; ``tally`` includes it."""


def check_strategies(names: list[str], options: dict[str, Any] | None = None) -> None:
    """Every strategy exists, and every option belongs to (and is valid for) one of them."""
    classes = {name: type(get_strategy(name)).Options for name in names}  # StrategyNotFoundError names the known ones
    check_run_options(classes, options or {})


def unique_ids(tasks: list[Task]) -> list[Task]:
    """Every task with an id, unique within the dataset (position for a missing id, ``#n`` for repeats)."""
    seen: dict[str, int] = {}
    out = []
    for i, task in enumerate(tasks):
        base = task.id or f"task-{i}"
        n = seen.get(base, 0)
        seen[base] = n + 1
        tid = base if n == 0 else f"{base}#{n + 1}"
        out.append(task if tid == task.id else task.model_copy(update={"id": tid}))
    return out


def load_tasks(config: EvalConfig) -> tuple[list[Task], Any, str | None]:
    """The dataset's tasks (with unique ids), its scorer and its kind."""
    from .datasets import load_dataset

    dataset = load_dataset(config.dataset, limit=config.limit, seed=config.seed)
    if not dataset.tasks:
        raise ConfigError(f"dataset {config.dataset}: no tasks to run")
    return unique_ids(list(dataset.tasks)), dataset.scorer, getattr(dataset, "kind", None)


def resume_config(store: TraceStore, run_id: str) -> tuple[str, EvalConfig]:
    """The full run id and the stored config of an eval run."""
    info = run_info(store, run_id)
    if info["kind"] != "eval":
        raise ConfigError(f"run {info['id']} is a '{info['kind']}' run, not an eval run; it cannot be resumed here")
    try:
        return info["id"], EvalConfig.model_validate(info["config"])
    except ValueError as exc:
        raise ConfigError(f"run {info['id']}: its stored config is not readable ({str(exc).splitlines()[0]})") from None


def _extended(config: EvalConfig, limit: int, run_id: str) -> EvalConfig:
    """The run's config with a larger ``limit`` (checked against the tasks when the run starts)."""
    if config.limit is None or limit <= config.limit:
        has = "every example" if config.limit is None else f"{config.limit} examples"
        raise ConfigError(f"run {run_id} already has {has}; a larger limit is needed to extend it")
    return config.model_copy(update={"limit": limit})


def _store_extension(store: TraceStore, run_id: str, config: EvalConfig, ids: list[str]) -> EvalConfig:
    """Record the larger sample on the run, once its old examples are checked to be the sample's head."""
    old = config.task_ids
    if old and ids[:len(old)] != old:
        raise ConfigError(f"run {run_id}: its {len(old)} examples are not the first {len(old)} of the "
                          f"{len(ids)} that limit {config.limit} gives now (dataset {config.dataset} changed?); "
                          f"start a new run instead")
    config = config.model_copy(update={"task_ids": ids})
    store.set_run_config(run_id, config.model_dump())
    return config


def _mark_interrupted(store: TraceStore, run_id: str) -> None:
    """Unfinished or cancelled episodes of the run become ``interrupted`` (kept, never counted)."""
    store.mark_interrupted(run_id)


def _set_status(store: TraceStore, run_id: str, status: RunStatus) -> None:
    store.set_run_status(run_id, status)


def _prior(store: TraceStore, run_id: str, total: int) -> tuple[set[tuple[str | None, str, int]], Tally]:
    """The triples already done, and a tally over them."""
    tally = Tally(total)
    done: set[tuple[str | None, str, int]] = set()
    for ep in counted_episodes(store, run_id):
        done.add((ep.task_id, ep.strategy, ep.epoch))
        score = ep.meta_value().get("score")
        tally.add(float(score) if isinstance(score, (int, float)) else None, ep.cost_usd, ep.status)
    return done, tally


def work_items(tasks: list[Task], strategies: list[str], epochs: int,
               done: set[tuple[str | None, str, int]]) -> list[WorkItem]:
    """Epoch by epoch, task by task, every strategy: early results cover all strategies."""
    items = (WorkItem(t, s, e) for e in range(epochs) for t in tasks for s in strategies)
    return [it for it in items if it.key not in done]


async def _check_against_pool(config: EvalConfig, pool_factory: PoolFactory) -> None:
    """Each strategy's options checked against the run's pool once, before any episode: an option
    the pool cannot honour is a ConfigError here, not an episode refused before it is recorded."""
    probe = pool_factory()
    try:
        for name in config.strategies:
            strategy = get_strategy(name)
            checked_options(strategy, probe, options_for(type(strategy).Options, config.options))
    finally:
        await probe.aclose()


async def run_eval(
    config: EvalConfig,
    store: TraceStore,
    *,
    resume: str | None = None,
    pool: PoolFactory | None = None,
    executor: Executor | None = None,
    observer: Observer | None = None,
    retry_errors: bool = False,
    extend_to: int | None = None,
) -> EvalRun:
    """Run (or, with ``resume`` = a run id, finish) an evaluation; every episode goes to ``store``.

    ``config`` is ignored when resuming (the run's stored config is used). ``pool``
    overrides the pool the config names (tests pass a scripted one); ``executor``
    overrides ``config.executor``. ``retry_errors`` (with ``resume``): episodes that ended in
    ``error`` are marked ``retried`` (kept, no longer counted) and run again. ``extend_to`` (with
    ``resume``): a larger ``limit`` for the run, finished or not; the examples it already has must
    be the first ones of the larger sample (same dataset and seed), and only the new ones run.
    """
    if retry_errors and resume is None:
        raise ConfigError("retry_errors re-runs the failed episodes of an earlier run: it needs resume (that run's id)")
    watcher = observer or Observer()
    if extend_to is not None and resume is None:
        raise ConfigError("extend_to makes an earlier run larger: it needs resume (that run's id)")
    if resume is not None:
        run_id, config = resume_config(store, resume)
        if extend_to is not None:
            config = _extended(config, extend_to, run_id)
    check_strategies(config.strategies, config.options)
    Budget.model_validate(config.budget)  # a bad budget fails before anything starts
    tasks, scorer, kind = load_tasks(config)
    pool_factory = pool or PoolSource(config.pool, adapter=config.orchestrator_adapter)
    await _check_against_pool(config, pool_factory)
    the_executor = executor or make_executor(config.executor, concurrency=config.concurrency,
                                             ray_address=config.ray_address)
    run_id = new_id() if resume is None else run_id
    with run_lock(store.path, run_id):  # a second process on this run stops here, naming the holder
        if extend_to is not None:
            config = _store_extension(store, run_id, config, [t.id or "" for t in tasks])
        if retry_errors:
            store.mark_retried(run_id)
        return await _run_locked(config, store, run_id, resume is not None, tasks, scorer, kind, pool_factory,
                                 the_executor, watcher)


async def _run_locked(config: EvalConfig, store: TraceStore, run_id: str, resumed: bool, tasks: list[Task],
                      scorer: Any, kind: str | None, pool_factory: PoolFactory | PoolSource, the_executor: Executor,
                      watcher: Observer) -> EvalRun:
    budget = Budget.model_validate(config.budget)
    ids = [t.id or "" for t in tasks]
    if not resumed:
        config = config.model_copy(update={"dataset_kind": kind, "task_ids": ids})
        store.create_run(run_id, "eval", config.model_dump())
    else:
        if config.task_ids and config.task_ids != ids:
            raise ConfigError(f"run {run_id}: dataset {config.dataset} no longer gives the same tasks "
                              f"(limit {config.limit}, seed {config.seed}); it cannot be resumed")
        _mark_interrupted(store, run_id)
        _set_status(store, run_id, RunStatus.RUNNING)
    await store.aflush()
    total = len(tasks) * len(config.strategies) * config.epochs
    done, tally = _prior(store, run_id, total)
    items = work_items(tasks, config.strategies, config.epochs, done)
    job = EpisodeJob(run_id=run_id, pool=pool_factory, scorer=scorer, budget=budget, options=dict(config.options),
                     seed=config.seed)
    watcher.started(run_id, tally, resumed)

    def on_done(outcome: Outcome) -> None:
        tally.add(outcome.score, outcome.cost_usd, outcome.status)
        watcher.episode(outcome, tally)

    try:
        await the_executor.run(items, job, store, on_done)
        if the_executor.stop.on:  # Ctrl-C whose cancellation did not reach us: still an interruption
            raise KeyboardInterrupt
    except BaseException:
        _mark_interrupted(store, run_id)
        _set_status(store, run_id, RunStatus.INTERRUPTED)
        store.flush()
        raise
    _set_status(store, run_id, RunStatus.FINISHED)
    await store.aflush()
    return EvalRun(run_id, config, total, len(done), len(items))


def resume_command(run_id: str, db: Path | None) -> str:
    """The shell command that resumes a run."""
    return f"orchestrion eval --resume {run_id}" + (f" --db {db}" if db is not None else "")
