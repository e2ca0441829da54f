"""How an episode or a span ended: one enum of today's strings, shared by every layer.

A leaf module (it imports nothing of orchestrion), so the trace layer below the runtime writes the
same values that strategies return and scorers read.
"""

from __future__ import annotations

from enum import StrEnum


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
