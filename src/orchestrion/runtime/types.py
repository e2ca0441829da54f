"""The core value types every layer above the runtime shares: what a user asks (:class:`Task`),
what a strategy returns (:class:`Answer`) and how an episode or span ended (:class:`EpisodeStatus`).

This module imports nothing of orchestrion, so eval, train, serve and the API can use these
types without loading strategies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class EpisodeStatus(StrEnum):
    """How an episode (``Answer.status``, ``EpisodeResult.status``) or a span ended.

    A ``StrEnum`` (a ``str``, ``Enum`` whose ``str()`` is the value) of today's strings:
    ``EpisodeStatus.OK == "ok"``, and JSON, SQLite and f-strings see the plain value. The trace
    layer (below the runtime) writes the same strings for the spans it closes itself
    (``running``, ``ok``, ``error``, ``cancelled``, ``budget_exceeded``, ``timeout``).
    """

    OK = "ok"
    ERROR = "error"
    CANCELLED = "cancelled"
    BUDGET_EXCEEDED = "budget_exceeded"
    TIMEOUT = "timeout"
    INVALID = "invalid"  # a decision whose output never validated (span status)
    INTERRUPTED = "interrupted"  # an episode of an interrupted run, marked on resume
    RUNNING = "running"  # an episode or span not closed yet
    # strategy-specific endings
    NO_ANSWER = "no_answer"
    INVALID_SPEC = "invalid_spec"
    NO_ADMISSIBLE_PAIR = "no_admissible_pair"


class Task(BaseModel):
    """What a user asks: a prompt, optional reference answer and metadata."""

    prompt: str = Field(min_length=1)
    id: str | None = None
    answer: str | None = None
    choices: list[str] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


@dataclass
class Answer:
    """What a strategy returns. ``status`` is ``ok`` or why the answer is partial
    (an :class:`EpisodeStatus`; a plain string is accepted too)."""

    text: str
    status: EpisodeStatus | str = EpisodeStatus.OK
    meta: dict[str, Any] = field(default_factory=dict)
