"""The Python API: build a pool, pick a strategy, solve a task, get answer, usage, cost and trace id.

A thin wrapper: :func:`solve` resolves the strategy by name and hands the episode to
:func:`orchestrion.runtime.episode.run_episode`, with eval's scoring step when a scorer is given.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Unpack

from .runtime.episode import EpisodeArgs, EpisodeResult, run_episode
from .runtime.types import Task
from .strategies.base import Strategy
from .strategies.registry import as_strategy

if TYPE_CHECKING:
    from .eval.scoring import EpisodeScorer

__all__ = ["EpisodeResult", "solve", "solve_sync"]


async def solve(
    task: str | Task,
    *,
    strategy: str | Strategy = "para",
    scorer: EpisodeScorer | None = None,
    **args: Unpack[EpisodeArgs],
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
    ``answer`` streams the final answer and sets its format (see
    :class:`~orchestrion.runtime.answer.AnswerChannel`). The other keywords (``pool``, ``tools``,
    ``store``, ``budget``, ``options``, ``run_id``, ``epoch``) are :class:`EpisodeArgs`.
    """
    if scorer is not None:
        from .eval.scoring import scoring  # here: ``import orchestrion`` loads no eval

        args["review"] = scoring(scorer)
    return await run_episode(task, as_strategy(strategy), **args)


def solve_sync(task: str | Task, **kwargs: Any) -> EpisodeResult:
    """:func:`solve` for scripts: runs its own event loop."""
    return asyncio.run(solve(task, **kwargs))
