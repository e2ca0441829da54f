"""Strategies: orchestration policies over the runtime, registered by name."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from .._errors import StrategyNotFoundError
from ..runtime.context import RunContext
from ..runtime.options import StrategyOptions
from ..runtime.types import Answer, EpisodeStatus, Task

# Task, Answer and EpisodeStatus live in runtime.types; re-exported here for existing imports
__all__ = ["Answer", "EpisodeStatus", "Strategy", "Task", "get_strategy", "register", "strategies"]


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


_REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: make a strategy available by its ``name``."""
    _REGISTRY[cls.name] = cls
    return cls


def strategies() -> dict[str, type[Strategy]]:
    from . import _builtin  # noqa: F401  (registers the built-in strategies)

    return dict(_REGISTRY)


def get_strategy(name: str) -> Strategy:
    found = strategies().get(name)
    if found is None:
        raise StrategyNotFoundError(
            f"unknown strategy '{name}'; choose one of: {', '.join(sorted(strategies()))}"
        )
    return found()
