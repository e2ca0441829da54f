"""Strategies: orchestration policies over the runtime, registered by name."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from ..runtime.context import RunContext
from ..runtime.options import StrategyOptions
from ..runtime.types import Answer, EpisodeStatus, Task

# Task, Answer and EpisodeStatus live in runtime.types; re-exported here for existing imports
__all__ = ["Answer", "EpisodeStatus", "Strategy", "Task", "register"]


class Strategy(ABC):
    """An orchestration policy. Subclasses set ``name``, ``summary`` and ``paper``, and declare
    their options as ``Options``, a :class:`StrategyOptions` subclass (``extra="forbid"``, a
    default and a ``description`` on every field); ``solve`` reads them with
    ``ctx.options_as(self.Options)``."""

    name: ClassVar[str]
    summary: ClassVar[str]
    paper: ClassVar[str] = "baseline"
    Options: ClassVar[type[StrategyOptions]] = StrategyOptions

    @abstractmethod
    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        """Solve ``task`` using only the run context's models and tools."""


_REGISTRY: dict[str, type[Strategy]] = {}  # filled by ``register``; read through :mod:`.registry`


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: make a strategy available by its ``name``."""
    _REGISTRY[cls.name] = cls
    return cls
