"""Typed rows read from the trace store: frozen dataclasses whose fields are the table's columns,
so code outside :mod:`orchestrion.trace` names a column once, as an attribute, and the column
names stay known to the queries alone.

Fields hold the values as stored (JSON columns stay text); the ``*_value()`` methods decode a
JSON column. A column every writer fills is typed without None; the others may be None. The
field order is the table's column order, so ``dataclasses.asdict(row)`` is the dict ``SELECT *``
gives (the JSONL export relies on it). A column a query leaves out (``spans(attrs=False)``)
reads as None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import orjson

_Row = TypeVar("_Row")


def _of(cls: type[_Row], row: Mapping[str, Any]) -> _Row:
    """``cls`` from a query's row: every field from the column of its name (None when not selected)."""
    return cls(**{f.name: row.get(f.name) for f in fields(cls)})  # type: ignore[arg-type]


def _decoded(text: str | None, empty: Any) -> Any:
    """JSON text decoded; ``empty`` when there is none."""
    return orjson.loads(text) if text else empty


@dataclass(frozen=True)
class RunRow:
    """One row of the ``runs`` table: an eval, a training run or a server's session."""

    id: str
    created: float | None
    kind: str | None
    config: str | None  # JSON text, as stored; :meth:`config_value` decodes it
    status: str | None  # a :class:`~orchestrion.status.RunStatus` value

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> RunRow:
        return cls(str(row["id"]), row.get("created"), row.get("kind"), row.get("config"), row.get("status"))

    def config_value(self) -> Any:
        """``config`` decoded (``{}`` when empty)."""
        return _decoded(self.config, {})


@dataclass(frozen=True)
class EpisodeRow:
    """One row of the ``episodes`` table: one task solved by one strategy."""

    id: str
    run_id: str | None
    task_id: str | None
    epoch: int
    strategy: str
    task: str  # JSON text; :meth:`task_value` decodes it
    status: str  # an :class:`~orchestrion.status.EpisodeStatus` value
    answer: str | None  # None until the episode finishes
    error: str | None
    started: float
    ended: float | None  # None until the episode finishes
    input_tokens: int
    output_tokens: int
    cost_usd: float | None  # None: unknown, never 0
    cost_units: float
    finished: int  # 1 once the closing update is committed
    meta: str  # JSON text; :meth:`meta_value` decodes it

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> EpisodeRow:
        return _of(cls, row)

    def task_value(self) -> Any:
        """``task`` decoded (``{}`` when empty)."""
        return _decoded(self.task, {})

    def meta_value(self) -> Any:
        """``meta`` decoded (``{}`` when empty): options, scores, and what the strategy recorded."""
        return _decoded(self.meta, {})


@dataclass(frozen=True)
class SpanRow:
    """One row of the ``spans`` table: a timed piece of an episode (decision, call, tool, node ...)."""

    id: str
    episode_id: str
    parent_id: str | None  # None: the episode's root span
    kind: str
    name: str
    started: float
    ended: float | None  # None: never closed
    status: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None  # None: unknown, never 0
    cost_units: float
    attrs: str | None  # JSON text; :meth:`attrs_value` decodes it (None when the query left it out)

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> SpanRow:
        return _of(cls, row)

    def attrs_value(self) -> Any:
        """``attrs`` decoded (``{}`` when empty)."""
        return _decoded(self.attrs, {})


@dataclass(frozen=True)
class EventRow:
    """One row of the ``events`` table: something that happened at one moment of an episode."""

    id: int
    episode_id: str
    span_id: str | None  # None: an event of the episode itself
    ts: float
    kind: str
    data: str  # JSON text; :meth:`data_value` decodes it

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> EventRow:
        return _of(cls, row)

    def data_value(self) -> Any:
        """``data`` decoded (None when empty)."""
        return _decoded(self.data, None)


@dataclass(frozen=True)
class DecisionRow:
    """One row of the ``decisions`` table: one attempt of one orchestrator decision (model call)."""

    id: str
    episode_id: str
    span_id: str
    seq: int
    attempt: int
    model: str | None
    schema_name: str | None
    messages: str  # JSON text of the chat messages; :meth:`messages_value`
    prompt_token_ids: str | None  # JSON text of a list of ints, None when the backend gave none
    output: str
    token_ids: str | None  # JSON text of a list of ints, None when the backend gave none
    logprobs: str | None  # JSON text of a list of floats, None when the backend gave none
    action: str | None  # JSON text of the parsed action; None when it did not parse
    error: str | None
    valid: int  # 1 valid, 0 invalid
    ts: float

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> DecisionRow:
        return _of(cls, row)

    def messages_value(self) -> Any:
        """``messages`` decoded (None when empty)."""
        return _decoded(self.messages, None)

    def prompt_token_ids_value(self) -> Any:
        """``prompt_token_ids`` decoded (None when empty)."""
        return _decoded(self.prompt_token_ids, None)

    def token_ids_value(self) -> Any:
        """``token_ids`` decoded (None when empty)."""
        return _decoded(self.token_ids, None)

    def logprobs_value(self) -> Any:
        """``logprobs`` decoded (None when empty)."""
        return _decoded(self.logprobs, None)

    def action_value(self) -> Any:
        """``action`` decoded (None when empty)."""
        return _decoded(self.action, None)


@dataclass(frozen=True)
class DecisionSpanRow(DecisionRow):
    """A decision row with its decision span's ``attrs`` (``decisions(..., span_attrs=True)``)."""

    span_attrs: str | None  # JSON text of the span's attrs, as stored (not a column of decisions)

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> DecisionSpanRow:
        return _of(cls, row)

    def span_attrs_value(self) -> Any:
        """``span_attrs`` decoded (``{}`` when empty)."""
        return _decoded(self.span_attrs, {})
