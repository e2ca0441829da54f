"""In-process trace events: what serve, the viewer and live exporters subscribe to instead of
polling the database.

The store publishes a :class:`TraceEvent` for every episode start and finish, span start and end,
event and decision, *after* the writer thread has committed the rows behind it. A subscriber that
reacts to an event by reading the store therefore always finds what the event announces.

Subscribers live on an asyncio loop; the writer thread hands events over with
``call_soon_threadsafe``. A subscriber that falls behind loses its oldest events (counted in
:attr:`Subscription.dropped`) rather than growing without bound or slowing the writer.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    EPISODE_STARTED = "episode_started"
    EPISODE_FINISHED = "episode_finished"
    SPAN_STARTED = "span_started"
    SPAN_ENDED = "span_ended"
    EVENT = "event"
    DECISION = "decision"


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One thing that happened in an episode, as committed to the store.

    ``kind`` is the span kind (``round``, ``call``, …) for span events and the event kind for
    ``event``; ``data`` holds the span's attributes at start, its changed attributes and usage at
    end, the event's payload, or the decision's action and validity.
    """

    type: EventType
    episode_id: str
    ts: float
    span_id: str | None = None
    parent_id: str | None = None
    kind: str | None = None
    name: str | None = None
    status: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


class Subscription:
    """Events of one episode (or of all) delivered to one asyncio loop; iterate with ``async for``."""

    def __init__(self, bus: TraceBus, episode_id: str | None, loop: asyncio.AbstractEventLoop,
                 maxsize: int) -> None:
        self._bus = bus
        self.episode_id = episode_id
        self._loop = loop
        self._items: deque[TraceEvent] = deque()
        self._maxsize = maxsize
        self._ready = asyncio.Event()
        self.dropped = 0
        self.closed = False

    def wants(self, event: TraceEvent) -> bool:
        return self.episode_id is None or event.episode_id == self.episode_id

    def _deliver(self, events: list[TraceEvent]) -> None:  # runs on the subscriber's loop
        for event in events:
            if len(self._items) >= self._maxsize:
                self._items.popleft()
                self.dropped += 1
            self._items.append(event)
        self._ready.set()

    async def get(self, timeout: float | None = None) -> TraceEvent | None:
        """The next event, or None after ``timeout`` seconds without one (or once closed)."""
        while not self._items:
            if self.closed:
                return None
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return None
        return self._items.popleft()

    def drain(self) -> list[TraceEvent]:
        """Every event already delivered, without waiting."""
        items = list(self._items)
        self._items.clear()
        return items

    def close(self) -> None:
        self.closed = True
        self._bus._remove(self)
        self._ready.set()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> TraceEvent:
        event = await self.get()
        if event is None:
            raise StopAsyncIteration
        return event


class TraceBus:
    """Fan-out of committed trace events to the subscriptions of this process."""

    def __init__(self) -> None:
        self._subs: list[Subscription] = []
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """Whether anyone listens (publishers skip building events when nobody does)."""
        return bool(self._subs)

    def subscribe(self, episode_id: str | None = None, *, maxsize: int = 10_000) -> Subscription:
        """Listen to one episode's events (or every episode's, with None) on the running loop."""
        sub = Subscription(self, episode_id, asyncio.get_running_loop(), maxsize)
        with self._lock:
            self._subs = [*self._subs, sub]
        return sub

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            self._subs = [s for s in self._subs if s is not sub]

    def publish(self, events: Iterable[TraceEvent]) -> None:
        """Deliver ``events`` to every interested subscription (thread-safe, never blocks)."""
        batch = list(events)
        for sub in self._subs:  # a snapshot: the list is replaced, never mutated
            mine = [e for e in batch if sub.wants(e)]
            if not mine:
                continue
            try:
                sub._loop.call_soon_threadsafe(sub._deliver, mine)
            except RuntimeError:  # the subscriber's loop is closed: it is gone
                self._remove(sub)
