"""Time a model call spends queued for its model's concurrency slot does not count against an
enclosing tool's time limit.

A local model takes one call at a time; with several episodes in flight, an agent tool's model
call can wait behind other episodes' calls for longer than the tool's whole limit, and the tool
then timed out having done nothing. The tool registry runs each tool inside :func:`pausable`; the
pool wraps the wait for a slot in :func:`queued`, which stops the enclosing tools' clocks until
the slot is taken (while any of a tool's calls is queued, its clock stands still).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class _Clock:
    """A tool's deadline that stands still while one of its model calls is queued."""

    def __init__(self, deadline: asyncio.Timeout, outer: _Clock | None) -> None:
        self.deadline, self.outer = deadline, outer
        self.queued = 0
        self.left: float | None = None

    def pause(self) -> None:
        self.queued += 1
        if self.queued == 1 and not self.deadline.expired() and (when := self.deadline.when()) is not None:
            self.left = when - asyncio.get_running_loop().time()
            self.deadline.reschedule(None)
        if self.outer is not None:
            self.outer.pause()

    def resume(self) -> None:
        self.queued -= 1
        if self.queued == 0 and self.left is not None and not self.deadline.expired():
            self.deadline.reschedule(asyncio.get_running_loop().time() + self.left)
            self.left = None
        if self.outer is not None:
            self.outer.resume()


_CLOCK: ContextVar[_Clock | None] = ContextVar("orchestrion_tool_clock", default=None)


@contextmanager
def pausable(deadline: asyncio.Timeout) -> Iterator[None]:
    """Inside, model calls queued for a slot stop ``deadline`` (and enclosing tools' deadlines)."""
    token = _CLOCK.set(_Clock(deadline, _CLOCK.get()))
    try:
        yield
    finally:
        _CLOCK.reset(token)


@contextmanager
def queued(waiting: bool) -> Iterator[None]:
    """Around the wait for a model's slot: the enclosing tools' clocks stand still while ``waiting``."""
    clock = _CLOCK.get() if waiting else None
    if clock is not None:
        clock.pause()
    try:
        yield
    finally:
        if clock is not None:
            clock.resume()
