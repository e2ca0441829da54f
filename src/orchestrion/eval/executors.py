"""Executors: where the episodes of an evaluation run.

Both executors call the same :func:`run_episode` (one runtime episode, reviewed by
:func:`~orchestrion.eval.scoring.scoring` with the dataset's scorer), so the rows they leave in
the trace store have the same shape.

- ``local``: asyncio in this process; at most ``concurrency`` episodes in flight,
  one pool shared by all of them (so per-model concurrency limits hold).
- ``ray``: every episode is a Ray task. The worker runs it against a throw-away
  trace store and returns the episode's rows, which the driver imports into the
  user's store in one transaction: workers on other machines never need the
  driver's SQLite file. Ray is an optional extra (``orchestrion[ray]``).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .._errors import ConfigError
from ..models.pool import Pool, PoolConfig
from ..runtime.budget import Budget
from ..runtime.episode import run_episode as episode
from ..runtime.options import options_for
from ..runtime.types import Task
from ..strategies.registry import get_strategy
from ..tools.defaults import default_tools
from ..tools.registry import ToolRegistry
from ..trace.store import TraceStore
from .scoring import scoring

PoolFactory = Callable[[], Pool]
ToolsFactory = Callable[[], ToolRegistry]
# await scorer(task, output) -> Score (with .to_meta()) or a plain dict of meta fields
ScorerFn = Callable[[Task, str], Any]
Rows = dict[str, list[dict[str, Any]]]


@dataclass(frozen=True)
class WorkItem:
    """One episode to run: a task, a strategy and an epoch."""

    task: Task
    strategy: str
    epoch: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.task.id or "", self.strategy, self.epoch)


@dataclass
class Outcome:
    """What the runner learns when an episode is done (the full record is in the store)."""

    key: tuple[str, str, int]
    episode_id: str | None
    status: str
    score: float | None = None
    correct: bool | None = None
    cost_usd: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    error: str | None = None


class PoolSource:
    """A picklable recipe for a pool: the parsed pool.yaml (or the embedded default).

    The file is read once, on the driver; a Ray worker rebuilds the pool from the
    parsed config, so it needs no access to the driver's files.
    """

    def __init__(self, path: str | Path | None = None, *, adapter: str | None = None) -> None:
        # the orchestrator's LoRA adapter is a path: on a cluster it must be on shared storage
        if adapter is not None and not Path(adapter).exists():
            raise ConfigError(f"--orchestrator-adapter {adapter}: not found; give the folder `train sft` wrote")
        self.adapter = adapter
        pool = Pool.resolve(path)  # validates now, with a clear error
        self.config: PoolConfig = pool.config
        self.source = pool.source

    def __call__(self) -> Pool:
        pool = Pool(self.config, source=self.source)
        return pool if self.adapter is None else pool.with_orchestrator_adapter(self.adapter)


@dataclass
class EpisodeJob:
    """Everything an episode needs besides its work item; picklable for Ray."""

    run_id: str
    pool: PoolFactory
    scorer: ScorerFn | None = None
    budget: Budget = field(default_factory=Budget)
    options: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    tools: ToolsFactory = default_tools


async def run_episode(item: WorkItem, job: EpisodeJob, pool: Pool, store: TraceStore, tools: ToolRegistry) -> Outcome:
    """Solve and score one work item; the episode (with its score) is committed on return."""
    scored: dict[str, Any] = {}

    async def score(task: Task, output: str) -> dict[str, Any]:
        assert job.scorer is not None
        try:
            result = await job.scorer(task, output)
            fields = result.to_meta() if hasattr(result, "to_meta") else dict(result)
        except Exception as exc:  # noqa: BLE001 - a scorer bug scores 0, the episode is kept
            fields = {"score": 0.0, "correct": False, "score_error": f"{type(exc).__name__}: {exc}"}
        scored.update(fields)
        return dict(fields)

    strategy = get_strategy(item.strategy)
    options = options_for(type(strategy).Options, job.options)  # each strategy takes its own
    if job.seed is not None:
        options["seed"] = job.seed + item.epoch
    try:
        res = await episode(item.task, strategy, pool=pool, tools=tools, store=store, budget=job.budget,
                            options=options, run_id=job.run_id, epoch=item.epoch,
                            review=scoring(score) if job.scorer is not None else None)
    except Exception as exc:  # noqa: BLE001 - the episode has recorded it as an error episode; keep going
        return Outcome(item.key, None, "error", _float(scored.get("score")), _bool(scored.get("correct")),
                       error=f"{type(exc).__name__}: {exc}")
    return Outcome(item.key, res.trace_id, res.status, _float(scored.get("score")), _bool(scored.get("correct")),
                   res.usage.cost_usd, res.usage.input_tokens, res.usage.output_tokens, res.wall_s, res.error)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


class Executor(Protocol):
    name: str
    stop: StopSwitch

    async def run(self, items: Iterable[WorkItem], job: EpisodeJob, store: TraceStore,
                  on_done: Callable[[Outcome], None]) -> None:
        """Run every item; call ``on_done`` once each episode is committed to ``store``."""


class StopSwitch:
    """Set by a Ctrl-C handler: no new episode starts once it is on, even if the
    cancellation that comes with it is lost on the way (it can be, in a TaskGroup)."""

    def __init__(self) -> None:
        self.on = False


async def _pump(items: Iterable[WorkItem], concurrency: int, one: Callable[[WorkItem], Any],
                stop: StopSwitch | None = None) -> None:
    """Run ``one(item)`` for every item with at most ``concurrency`` in flight."""
    source: Iterator[WorkItem] = iter(items)

    async def worker() -> None:
        for item in source:  # workers share one iterator: each item is taken once
            if stop is not None and stop.on:
                return
            await one(item)

    async with asyncio.TaskGroup() as group:
        for _ in range(max(1, concurrency)):
            group.create_task(worker())


class LocalExecutor:
    """Episodes as asyncio tasks in this process."""

    name = "local"

    def __init__(self, concurrency: int = 8) -> None:
        self.concurrency = concurrency
        self.stop = StopSwitch()

    async def run(self, items: Iterable[WorkItem], job: EpisodeJob, store: TraceStore,
                  on_done: Callable[[Outcome], None]) -> None:
        pool, tools = job.pool(), job.tools()

        async def one(item: WorkItem) -> None:
            on_done(await run_episode(item, job, pool, store, tools))

        try:
            await _pump(items, self.concurrency, one, self.stop)
        finally:
            await asyncio.shield(pool.aclose())


class RayExecutor:
    """Episodes as Ray tasks; each returns its rows for the driver's store."""

    name = "ray"

    def __init__(self, concurrency: int = 8, address: str | None = None, num_cpus: float = 1.0) -> None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError(
                "--executor ray needs Ray, which is not installed: pip install 'orchestrion[ray]'"
            ) from None
        self.concurrency = concurrency
        self.address = address
        self.num_cpus = num_cpus
        self.stop = StopSwitch()

    async def run(self, items: Iterable[WorkItem], job: EpisodeJob, store: TraceStore,
                  on_done: Callable[[Outcome], None]) -> None:
        import ray

        started_here = not ray.is_initialized()
        if started_here:
            try:
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                where = self.address or "a new local instance"
                raise ConfigError(
                    f"--executor ray: cannot start or reach Ray at {where} ({exc}); check --ray-address"
                ) from None
        remote = ray.remote(num_cpus=self.num_cpus, max_retries=0)(_ray_episode)
        job_ref = ray.put(job)

        async def one(item: WorkItem) -> None:
            ref = remote.remote(item, job_ref)
            try:
                outcome, rows = await ref
            except asyncio.CancelledError:
                ray.cancel(ref, force=True)
                raise
            except ray.exceptions.RayError as exc:  # the worker died: count it, keep going
                outcome, rows = Outcome(item.key, None, "error", error=f"ray: {exc}".splitlines()[0]), {}
            if rows:
                store.import_rows(rows)
                await store.aflush()
            on_done(outcome)

        try:
            await _pump(items, self.concurrency, one, self.stop)
        finally:
            if started_here:
                ray.shutdown()


# -- the Ray worker side ------------------------------------------------------------
# One event loop, pool and tool registry per worker process and run: models (an
# aiohttp session, a loaded GGUF) and pool semaphores stay bound to that loop.
_WORKER: dict[str, tuple[asyncio.AbstractEventLoop, Pool, ToolRegistry]] = {}


def _ray_episode(item: WorkItem, job: EpisodeJob) -> tuple[Outcome, Rows]:
    if job.run_id not in _WORKER:
        for loop, pool, _ in _WORKER.values():  # a new run: drop the previous one's models
            loop.run_until_complete(pool.aclose())
            loop.close()
        _WORKER.clear()
        _WORKER[job.run_id] = (asyncio.new_event_loop(), job.pool(), job.tools())
    loop, pool, tools = _WORKER[job.run_id]
    with tempfile.TemporaryDirectory(prefix="orchestrion-episode-") as tmp:
        store = TraceStore(Path(tmp) / "episode.db")
        try:
            outcome = loop.run_until_complete(run_episode(item, job, pool, store, tools))
            store.flush()
            rows = store.export_episode_rows(outcome.episode_id) if outcome.episode_id else _rows_of_run(store)
        finally:
            store.close()
    return outcome, rows


def _rows_of_run(store: TraceStore) -> Rows:
    """The rows of the one episode in a worker's store, when solve raised before returning its id."""
    found = store.episode_ids(limit=1)
    return store.export_episode_rows(found[0]) if found else {}


def make_executor(name: str, *, concurrency: int, ray_address: str | None = None) -> Executor:
    """``local`` or ``ray``; anything else is a ConfigError."""
    if name == "local":
        return LocalExecutor(concurrency)
    if name == "ray":
        return RayExecutor(concurrency, ray_address)
    raise ConfigError(f"--executor '{name}': choose local or ray")
