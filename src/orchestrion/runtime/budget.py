"""Budgets: limits on tokens, dollars, cost units, steps, rounds, sub-agents and wall time.

The tracker lives in one episode's context. Work checks it before it starts a
model or tool call, and the call whose spend crosses a tokens, dollars or cost-unit
limit raises as soon as it is charged (its span is recorded first); either way
:class:`BudgetExceededError` becomes the episode status ``budget_exceeded`` with
the trace kept.

Wall time is the episode's own: while it waits for something that is not its work (serve's
client running its client tools, :meth:`BudgetTracker.paused`) its clock stands still, both
``elapsed_s`` and the ``wall_s`` deadline the episode runs under.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._errors import BudgetExceededError, ConfigError
from ..models.types import Usage

MOST_TOKENS = 10**12  # an upper bound far beyond any episode that still fits the JSON the budget is stored as
MOST_COUNT = 10**9  # steps, rounds, sub-agents
MOST_SPEND = 1e9  # dollars, and wall seconds (about 31 years)


class Budget(BaseModel):
    """Limits for one episode; ``None`` means no limit. Every limit is above 0 and at most its
    ``le`` bound (NaN and infinity are refused: give no limit instead)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    tokens: int | None = Field(default=None, gt=0, le=MOST_TOKENS)
    cost_usd: float | None = Field(default=None, gt=0, le=MOST_SPEND)
    cost_units: float | None = Field(default=None, gt=0, le=MOST_TOKENS)
    steps: int | None = Field(default=None, gt=0, le=MOST_COUNT, description="model calls plus tool calls")
    rounds: int | None = Field(default=None, gt=0, le=MOST_COUNT)
    subagents: int | None = Field(default=None, gt=0, le=MOST_COUNT)
    wall_s: float | None = Field(default=None, gt=0, le=MOST_SPEND)

    @classmethod
    def parse_cli(cls, items: list[str]) -> Budget:
        """Parse ``["tokens=2000", "wall_s=30"]`` as given to ``--budget``."""
        values: dict[str, str] = {}
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or key.strip() not in cls.model_fields:
                raise ConfigError(
                    f"--budget '{item}': expected NAME=VALUE with NAME one of {', '.join(cls.model_fields)}"
                )
            values[key.strip()] = value.strip()
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else "?"
            raise ConfigError(f"--budget {name}={values.get(name, '')}: {_expected(name)}") from None


def _expected(name: str) -> str:
    """The form and range a budget field takes (from its ``Field``), for a one-line error."""
    field = Budget.model_fields[name]
    whole = field.annotation == int | None
    most = next(m.le for m in field.metadata if isinstance(m, annotated_types.Le))
    shown = f"{most:d}" if whole else f"{most:g}"
    span = f"a whole number from 1 to {shown}" if whole else f"a number above 0 and at most {shown}"
    example = {"tokens": "4000", "wall_s": "60", "cost_usd": "0.05"}.get(name, "10" if whole else "2.5")
    return f"expected {span}, e.g. --budget {name}={example}"


class BudgetTracker:
    """What one episode has spent against its :class:`Budget`."""

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget or Budget()
        self.usage = Usage()
        self.steps = 0
        self.rounds = 0
        self.subagents = 0
        self.started = time.monotonic()
        self.paused_s = 0.0  # time spent in paused(): not the episode's own
        self.deadline: asyncio.Timeout | None = None  # the wall_s deadline the episode runs under (run_episode)

    @property
    def elapsed_s(self) -> float:
        """The episode's own wall time so far (its paused waits left out)."""
        return time.monotonic() - self.started - self.paused_s

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Around a wait that is not the episode's work: ``elapsed_s`` and the ``wall_s`` deadline stand still."""
        began = time.monotonic()
        deadline, left = self.deadline, None
        if deadline is not None and not deadline.expired() and (when := deadline.when()) is not None:
            left = when - asyncio.get_running_loop().time()
            deadline.reschedule(None)
        try:
            yield
        finally:
            self.paused_s += time.monotonic() - began
            if deadline is not None and left is not None and not deadline.expired():
                deadline.reschedule(asyncio.get_running_loop().time() + left)

    def charge(self, usage: Usage) -> None:
        """Add what a call spent; the call that takes a spend limit past its budget raises at once."""
        self.usage.add(usage)
        b = self.budget
        self._over("tokens", self.usage.total_tokens, b.tokens, strict=True)
        if self.usage.cost_usd is not None:
            self._over("cost_usd", self.usage.cost_usd, b.cost_usd, strict=True)
        self._over("cost_units", self.usage.cost_units, b.cost_units, strict=True)

    def step(self) -> None:
        """Count one model or tool call, after checking every limit."""
        self.check()
        self.steps += 1

    def new_round(self) -> None:
        self.check()
        self.rounds += 1
        self._over("rounds", self.rounds, self.budget.rounds, strict=True)

    def new_subagent(self) -> None:
        self.check()
        self.subagents += 1
        self._over("subagents", self.subagents, self.budget.subagents, strict=True)

    def check(self) -> None:
        b = self.budget
        self._over("tokens", self.usage.total_tokens, b.tokens)
        if self.usage.cost_usd is not None:
            self._over("cost_usd", self.usage.cost_usd, b.cost_usd)
        self._over("cost_units", self.usage.cost_units, b.cost_units)
        self._over("steps", self.steps, b.steps)
        self._over("wall_s", self.elapsed_s, b.wall_s)

    @staticmethod
    def _over(name: str, used: float, allowed: float | None, strict: bool = False) -> None:
        if allowed is None:
            return
        if used > allowed if strict else used >= allowed:
            raise BudgetExceededError(name, used, allowed)

    def remaining_tokens(self) -> int | None:
        if self.budget.tokens is None:
            return None
        return max(0, self.budget.tokens - self.usage.total_tokens)
