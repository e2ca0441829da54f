"""Every status vocabulary in one place: how an episode or span ended (:class:`EpisodeStatus`),
a run (:class:`RunStatus`), a tool call (:class:`ToolStatus`) and a scheduled node
(:class:`NodeStatus`).

A leaf module (it imports nothing of orchestrion), so the trace layer below the runtime writes the
same values that strategies return and scorers read.
"""

from __future__ import annotations

from enum import Enum, StrEnum


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
    RETRIED = "retried"  # an error a later episode retried (``eval --resume --retry-errors``)
    RUNNING = "running"  # an episode or span not closed yet
    # strategy-specific endings
    NO_ANSWER = "no_answer"
    INVALID_SPEC = "invalid_spec"
    NO_ADMISSIBLE_PAIR = "no_admissible_pair"


def ended_badly(status: str | None) -> bool:
    """Whether a span or episode status says it failed: closed, and not ``ok``."""
    return status not in (EpisodeStatus.OK, EpisodeStatus.RUNNING)


class RunStatus(StrEnum):
    """How a run (an eval, a training run, a server's session) stands, in the ``runs`` table."""

    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    STOPPED = "stopped"  # a server shut down cleanly


class ToolStatus(str, Enum):  # noqa: UP042 - StrEnum changes str() of a member ("ok", not "ToolStatus.OK")
    """A tool call's structured feedback (ParaManager's OK, EXEC_ERR, TIMEOUT, ...)."""

    OK = "ok"
    EXEC_ERROR = "exec_error"
    TIMEOUT = "timeout"
    INVALID_ARGS = "invalid_args"
    BUDGET_EXCEEDED = "budget_exceeded"
    CANCELLED = "cancelled"
    NOT_FOUND = "not_found"


class NodeStatus(StrEnum):
    """How one node of a DAG run by the scheduler ended."""

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # a dependency did not end ok


SpanStatus = EpisodeStatus | ToolStatus  # a tool or agent span ends with its call's status
