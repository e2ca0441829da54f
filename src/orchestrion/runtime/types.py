"""The core value types every layer above the runtime shares: what a user asks (:class:`Task`),
what a strategy returns (:class:`Answer`) and how an episode or span ended (:class:`EpisodeStatus`).

This module imports nothing of orchestrion but the status leaf, so eval, train, serve and the API can use these
types without loading strategies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from ..status import EpisodeStatus

__all__ = ["Answer", "EpisodeStatus", "Task"]


class Task(BaseModel):
    """What a user asks: a prompt, optional reference answer and metadata."""

    prompt: str = Field(min_length=1)
    id: str | None = None
    answer: str | None = None
    choices: list[str] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


@dataclass
class Answer:
    """What a strategy returns. ``status`` is ``ok`` or why the answer is partial."""

    text: str
    status: EpisodeStatus = EpisodeStatus.OK
    meta: dict[str, Any] = field(default_factory=dict)
