"""Scoring an episode once its answer is known: the step eval (and training's rollouts) add after
the episode, as its :data:`~orchestrion.runtime.episode.Review`.

The scorer's fields (``score``, ``correct``, ...) go to the top level of the episode meta, with
``evidence_correct`` (the grounding rate's condition: some tool or agent result of the episode,
scored as if it were the answer, is correct), in the update that marks the episode finished.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..runtime.episode import Review
from ..runtime.types import Task

EpisodeScorer = Callable[[Task, str], Awaitable[dict[str, Any]]]


def scoring(scorer: EpisodeScorer) -> Review:
    """The review that scores the answer and the episode's evidence with ``scorer``."""

    async def review(task: Task, answer: str, results: list[str]) -> dict[str, Any]:
        grounding = await _score_results(scorer, task, results)  # before the answer's score
        return {**await _score(scorer, task, answer), **grounding}

    return review


async def _score(scorer: EpisodeScorer, task: Task, answer: str) -> dict[str, Any]:
    """The scorer's fields for the episode meta; a failing scorer scores 0 and says why."""
    try:
        return dict(await scorer(task, answer))
    except Exception as exc:  # noqa: BLE001 - a scorer bug must not lose the episode
        return {"score": 0.0, "correct": False, "score_error": f"{type(exc).__name__}: {exc}"}


async def _score_results(scorer: EpisodeScorer, task: Task, results: list[str]) -> dict[str, Any]:
    """``evidence_correct`` for the episode's tool and agent results. Not computed for code
    tasks, whose scorer runs every candidate."""
    if not results or "entry_point" in task.metadata:
        return {}
    for text in results:
        if (await _score(scorer, task, text)).get("correct"):
            return {"evidence_correct": True}
    return {"evidence_correct": False}
