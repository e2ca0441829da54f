"""Spans and events for one episode: episode -> decision -> call -> sub-agent step.

The current span travels in a context variable, so work started with
``asyncio.create_task`` inside a span nests under it, and parallel siblings
never share a parent by accident. Each span adds its usage to every ancestor
when it ends, so each span row holds the cost rolled up over its subtree.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

from ..models.types import Usage
from ..status import EpisodeStatus, SpanStatus
from ._json import dumps as dumps
from .bus import EventType, TraceEvent
from .store import TraceStore

_current: ContextVar[Span | None] = ContextVar("orchestrion_span", default=None)
# Ids come from a generator of our own, seeded from the OS: the module-level one is reseeded by
# ``random.seed`` / transformers' ``set_seed``, which made a second seeded training run repeat
# the first run's episode ids.
_ids = random.Random()


def set_current(span: Span) -> Token[Span | None]:
    """Make ``span`` the parent of spans opened from here on (in this task)."""
    return _current.set(span)


def reset_current(token: Token[Span | None]) -> None:
    _current.reset(token)


def new_id() -> str:
    """A random 128-bit hex id. Not uuid4: os.urandom releases the GIL on every call,
    which forced a thread switch to the trace writer per span (bench/scheduler.py)."""
    return f"{_ids.getrandbits(128):032x}"


class Span:
    """A timed unit of work with its own rolled-up usage."""

    def __init__(self, tracer: Tracer, kind: str, name: str, parent: Span | None, attrs: dict[str, Any]) -> None:
        self.tracer = tracer
        self.id = new_id()
        self.kind = kind
        self.name = name
        self.parent = parent
        self.attrs = attrs
        self._changed: dict[str, Any] = {}
        self.started = time.time()
        self.ended: float | None = None
        self.status: SpanStatus = EpisodeStatus.RUNNING
        self.usage = Usage()

    def set(self, **attrs: Any) -> None:
        self.attrs.update(attrs)
        self._changed.update(attrs)

    def charge(self, usage: Usage) -> None:
        """Add usage incurred directly in this span to it and all its ancestors."""
        node: Span | None = self
        while node is not None:
            node.usage.add(usage)
            node = node.parent

    def end(self, status: SpanStatus = EpisodeStatus.OK) -> None:
        if self.ended is not None:
            return
        self.ended = time.time()
        self.status = status
        store = self.tracer.store
        store.submit(
            "UPDATE spans SET ended=?, status=?, input_tokens=?, output_tokens=?, cost_usd=?, cost_units=?, "
            "attrs=json_patch(attrs, ?) WHERE id=?",
            (
                self.ended,
                status,
                self.usage.input_tokens,
                self.usage.output_tokens,
                self.usage.cost_usd,
                self.usage.cost_units,
                dumps(self._changed),  # only what changed: the prompt was written at start
                self.id,
            ),
        )
        if store.bus.active:
            store.publish(TraceEvent(
                EventType.SPAN_ENDED, self.tracer.episode_id, self.ended, self.id,
                self.parent.id if self.parent else None, self.kind, self.name, status.value,
                {"attrs": dict(self._changed), "usage": self.usage.to_dict(), "started": self.started},
            ))


class Tracer:
    """Writes one episode's spans, events and decisions to a :class:`TraceStore`."""

    def __init__(self, store: TraceStore, episode_id: str) -> None:
        self.store = store
        self.episode_id = episode_id
        self._decision_seq = 0

    @property
    def current(self) -> Span | None:
        return _current.get()

    def start(self, kind: str, name: str, parent: Span | None = None, **attrs: Any) -> Span:
        """Open a span under ``parent`` (default: the current span) without making it current."""
        span = Span(self, kind, name, parent if parent is not None else _current.get(), attrs)
        self.store.submit(
            "INSERT INTO spans (id, episode_id, parent_id, kind, name, started, status, attrs)"
            " VALUES (?,?,?,?,?,?,?,?)",
            (span.id, self.episode_id, span.parent.id if span.parent else None, kind, name, span.started,
             EpisodeStatus.RUNNING.value, dumps(attrs)),
        )
        if self.store.bus.active:
            self.store.publish(TraceEvent(
                EventType.SPAN_STARTED, self.episode_id, span.started, span.id,
                span.parent.id if span.parent else None, kind, name, EpisodeStatus.RUNNING, {"attrs": dict(attrs)},
            ))
        return span

    @contextmanager
    def span(self, kind: str, name: str, **attrs: Any) -> Iterator[Span]:
        """Open a span, make it current for the block, and close it with a status."""
        span = self.start(kind, name, **attrs)
        token = _current.set(span)
        status: SpanStatus = EpisodeStatus.OK
        try:
            yield span
        except BaseException as exc:
            status = _status_of(exc)
            span.set(error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            _current.reset(token)
            span.end(span.status if span.status != EpisodeStatus.RUNNING else status)

    def event(self, kind: str, data: dict[str, Any], span: Span | None = None) -> None:
        target = span if span is not None else _current.get()
        ts = time.time()
        self.store.submit(
            "INSERT INTO events (episode_id, span_id, ts, kind, data) VALUES (?,?,?,?,?)",
            (self.episode_id, target.id if target else None, ts, kind, dumps(data)),
        )
        if self.store.bus.active:
            self.store.publish(TraceEvent(EventType.EVENT, self.episode_id, ts, target.id if target else None,
                                          kind=kind, data=dict(data)))

    def decision(self, span: Span, record: dict[str, Any]) -> None:
        """Store one orchestrator decision attempt (the unit of training data)."""
        self._decision_seq += 1
        self.store.submit(
            "INSERT INTO decisions (id, episode_id, span_id, seq, attempt, model, schema_name, messages, "
            "prompt_token_ids, output, token_ids, logprobs, action, error, valid, ts) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                new_id(),
                self.episode_id,
                span.id,
                self._decision_seq,
                record.get("attempt", 0),
                record.get("model"),
                record.get("schema_name"),
                dumps(record.get("messages", [])),
                _maybe_json(record.get("prompt_token_ids")),
                record.get("output", ""),
                _maybe_json(record.get("token_ids")),
                _maybe_json(record.get("logprobs")),
                _maybe_json(record.get("action")),
                record.get("error"),
                1 if record.get("valid") else 0,
                time.time(),
            ),
        )
        if self.store.bus.active:
            self.store.publish(TraceEvent(
                EventType.DECISION, self.episode_id, time.time(), span.id, kind="decision",
                name=str(record.get("schema_name") or ""), data={
                    "seq": self._decision_seq, "attempt": record.get("attempt", 0), "model": record.get("model"),
                    "action": record.get("action"), "error": record.get("error"), "valid": bool(record.get("valid")),
                    "replayed": bool(record.get("replayed")),
                },
            ))


def _maybe_json(value: Any) -> str | None:
    return None if value is None else dumps(value)


def _status_of(exc: BaseException) -> EpisodeStatus:
    from .._errors import BudgetExceededError

    if isinstance(exc, BudgetExceededError):
        return EpisodeStatus.BUDGET_EXCEEDED
    if isinstance(exc, (KeyboardInterrupt,)) or type(exc).__name__ == "CancelledError":
        return EpisodeStatus.CANCELLED
    if isinstance(exc, TimeoutError):
        return EpisodeStatus.TIMEOUT
    return EpisodeStatus.ERROR
