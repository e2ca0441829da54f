"""Strategies: orchestration policies over the runtime, registered by name."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from ..models.pool import Pool
from ..runtime.context import RunContext
from ..runtime.options import StrategyOptions, check_pool_models
from ..runtime.types import Answer, EpisodeStatus, Task

# Task, Answer and EpisodeStatus live in runtime.types; re-exported here for existing imports
__all__ = ["Answer", "EpisodeStatus", "Strategy", "Task", "model_lines", "register", "tool_lines"]


def model_lines(ctx: RunContext) -> str:
    """The pool's models as a prompt lists them: one ``- name (tier N): description`` line each."""
    return "\n".join(f"- {r['name']} (tier {r['tier']}): {r['description']}" for r in ctx.pool.describe())


def tool_lines(ctx: RunContext) -> str:
    """The episode's tools as a prompt lists them: one ``- signature`` line each ("" when none)."""
    return "\n".join(f"- {t.signature()}" for t in ctx.tools.tools())


class Strategy(ABC):
    """An orchestration policy. Subclasses set ``name``, ``summary`` and ``paper``, and declare
    their options as ``Options``, a :class:`StrategyOptions` subclass (``extra="forbid"``, a
    default and a ``description`` on every field); ``solve`` reads them with
    ``ctx.options_as(self.Options)``. Limits go in each option's ``Field`` (``ge=``, ``le=``) and
    checks that need the pool in :meth:`check_options`; ``solve`` never clamps an option."""

    name: ClassVar[str]
    summary: ClassVar[str]
    paper: ClassVar[str] = "baseline"
    Options: ClassVar[type[StrategyOptions]] = StrategyOptions
    # True for the direct baseline: its answer is the one an out-of-format answer falls back to
    answers_directly: ClassVar[bool] = False

    @classmethod
    def check_options(cls, options: StrategyOptions, pool: Pool) -> None:
        """Check the episode's options (already valid ``Options``) against the pool, once, before the
        episode starts: what a ``Field`` cannot tell is a :class:`ConfigError` here, not an episode
        that starts and then fails. By default every option that names a pool model
        (``json_schema_extra=POOL_MODEL``) must name one; a subclass that checks more calls this too."""
        check_pool_models(options, pool, where=f"strategy '{cls.name}'")

    @abstractmethod
    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        """Solve ``task`` using only the run context's models and tools."""


_REGISTRY: dict[str, type[Strategy]] = {}  # filled by ``register``; read through :mod:`.registry`


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: make a strategy available by its ``name``."""
    _REGISTRY[cls.name] = cls
    return cls
