"""The Python API: build a pool, pick a strategy, solve a task, get answer, usage, cost and trace id.

``solve`` is the one place an episode is opened and closed: the episode row is
written first (status ``running``), the strategy runs inside the root span, and
the closing update (with ``finished = 1``) is committed before ``solve`` returns,
whatever happened: an answer, a budget stop, an error or a cancellation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._errors import BudgetExceededError, OrchestrionError
from .models.pool import Pool, load_pool
from .models.types import Usage
from .runtime.budget import Budget, BudgetTracker
from .runtime.context import RunContext
from .runtime.options import episode_options
from .runtime.synthesis import conform_answer
from .runtime.types import EpisodeStatus, Task
from .strategies.base import Strategy
from .strategies.registry import get_strategy
from .tools.defaults import default_tools
from .tools.registry import ToolRegistry
from .trace.store import TraceStore
from .trace.tracer import Tracer, new_id, reset_current, set_current


@dataclass
class EpisodeResult:
    """The outcome of one episode."""

    answer: str
    status: EpisodeStatus
    strategy: str
    usage: Usage
    wall_s: float
    trace_id: str
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def cost_usd(self) -> float | None:
        return self.usage.cost_usd

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "status": self.status,
            "strategy": self.strategy,
            "usage": {"input_tokens": self.usage.input_tokens, "output_tokens": self.usage.output_tokens},
            "cost": self.usage.cost_usd,
            "cost_units": self.usage.cost_units,
            "wall_s": round(self.wall_s, 3),
            "trace_id": self.trace_id,
            "error": self.error,
            "meta": self.meta,
        }


EpisodeScorer = Callable[[Task, str], Awaitable[dict[str, Any]]]


async def _score(scorer: EpisodeScorer, task: Task, answer: str) -> dict[str, Any]:
    """The scorer's fields for the episode meta; a failing scorer scores 0 and says why."""
    try:
        return dict(await scorer(task, answer))
    except Exception as exc:  # noqa: BLE001 - a scorer bug must not lose the episode
        return {"score": 0.0, "correct": False, "score_error": f"{type(exc).__name__}: {exc}"}


async def _score_results(scorer: EpisodeScorer, task: Task, results: list[str]) -> dict[str, Any]:
    """``evidence_correct``: whether some tool or agent result of the episode, scored as if it were
    the answer, is correct (the grounding rate's condition). Not computed for code tasks,
    whose scorer runs every candidate."""
    if not results or "entry_point" in task.metadata:
        return {}
    for text in results:
        if (await _score(scorer, task, text)).get("correct"):
            return {"evidence_correct": True}
    return {"evidence_correct": False}


async def solve(
    task: str | Task,
    *,
    strategy: str | Strategy = "para",
    pool: Pool | str | Path | None = None,
    tools: ToolRegistry | None = None,
    store: TraceStore | str | Path | None = None,
    budget: Budget | None = None,
    options: dict[str, Any] | None = None,
    run_id: str | None = None,
    epoch: int = 0,
    scorer: EpisodeScorer | None = None,
    episode_id: str | None = None,
) -> EpisodeResult:
    """Solve one task with one strategy; the episode is fully traced.

    ``scorer`` (optional) is awaited on the answer once the strategy is done; the
    dict it returns is merged into the top level of the episode meta by the same
    update that marks the episode finished, so a scored episode is never half-written.
    A scorer that raises gives ``score`` 0 and ``score_error``. Cancelled episodes
    are not scored. A pool or store given by name (or left to the default) is opened here and
    closed before returning; pass :class:`Pool` / :class:`TraceStore` objects to reuse them.
    ``episode_id`` (default: a new id) lets a caller subscribe to the
    episode's trace events (``store.bus.subscribe(episode_id)``) before it starts.
    """
    the_task = task if isinstance(task, Task) else Task(prompt=task)
    the_strategy = get_strategy(strategy) if isinstance(strategy, str) else strategy
    the_pool = load_pool(pool)
    # validated before the episode starts: a bad option is a ConfigError, not a half-written episode
    settings = episode_options(the_strategy.Options, the_strategy.name,
                               the_pool.config.strategies.get(the_strategy.name, {}),
                               the_pool.source, options)
    opts = settings.model_dump(mode="json", exclude_unset=True)
    the_store = store if isinstance(store, TraceStore) else TraceStore(store)
    episode_id = episode_id or new_id()
    tracer = Tracer(the_store, episode_id)
    tracker = BudgetTracker(budget)
    ctx = RunContext(the_pool, tools or default_tools(), tracer, tracker, settings)
    started = time.time()
    the_store.start_episode(
        episode_id, run_id=run_id, task_id=the_task.id, epoch=epoch, strategy=the_strategy.name,
        task=the_task.model_dump(), started=started,
        meta={"pool": the_pool.source, "options": opts, "budget": tracker.budget.model_dump()},
    )
    answer, error, meta = "", None, {}
    status: EpisodeStatus = EpisodeStatus.OK
    root = tracer.start("episode", the_strategy.name, task=the_task.prompt)
    token = set_current(root)
    try:
        async with asyncio.timeout(tracker.budget.wall_s):
            result = await the_strategy.solve(the_task, ctx)
            answer, status, meta = result.text, result.status, result.meta
            answer = await conform_answer(the_task.prompt, answer, ctx)  # the format a caller's AnswerChannel asks
    except BudgetExceededError as exc:
        status, error = EpisodeStatus.BUDGET_EXCEEDED, str(exc)
    except TimeoutError:
        status, error = EpisodeStatus.BUDGET_EXCEEDED, f"budget exceeded: wall_s {tracker.budget.wall_s:g}s reached"
    except OrchestrionError as exc:
        status, error = EpisodeStatus.ERROR, str(exc)
    except asyncio.CancelledError:
        status, error = EpisodeStatus.CANCELLED, "cancelled"
        raise
    except Exception as exc:
        status, error = EpisodeStatus.ERROR, f"{type(exc).__name__}: {exc}"
        raise
    finally:
        reset_current(token)
        root.set(answer=answer, error=error)
        root.end(status)
        ended = time.time()
        usage = tracker.usage
        scored: dict[str, Any] = {}
        if scorer is not None and status != EpisodeStatus.CANCELLED:
            grounding = await _score_results(scorer, the_task, ctx.results)  # before the answer's score
            scored = {**await _score(scorer, the_task, answer), **grounding}
        the_store.finish_episode(episode_id, status=status, answer=answer, error=error, ended=ended, usage=usage,
                                 meta_patch={**scored, "result": meta})
        await asyncio.shield(the_store.aflush())
        if not isinstance(pool, Pool):  # solve built this pool: it closes it (HTTP sessions, model handles)
            await the_pool.aclose()
        if not isinstance(store, TraceStore):  # and this store (everything is committed above)
            await asyncio.to_thread(the_store.close)
    return EpisodeResult(answer, status, the_strategy.name, usage, ended - started, episode_id, error, meta)


def solve_sync(task: str | Task, **kwargs: Any) -> EpisodeResult:
    """:func:`solve` for scripts: runs its own event loop."""
    return asyncio.run(solve(task, **kwargs))
