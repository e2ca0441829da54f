"""One registry for tools and agent tools (Agent-as-Tool): one call shape for both.

``ToolRegistry.call`` is the only place tools run: it validates arguments,
applies the timeout, converts every failure into a status, and charges cost
units. Tracing of the call is done by the runtime context around it.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ValidationError

from .._errors import BudgetExceededError, ToolNotFoundError
from ..models.queueing import pausable
from .envelope import ToolResult, ToolStatus

if TYPE_CHECKING:
    from .context import ToolContext


class Tool(ABC):
    """A typed function the orchestrator or a sub-agent can call.

    Subclasses set ``name``, ``description`` and ``Args`` (a pydantic model whose
    JSON schema is shown to models) and implement :meth:`run`.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[BaseModel]]
    kind: ClassVar[Literal["tool", "agent"]] = "tool"
    cost_units: ClassVar[float] = 1.0
    timeout_s: float = 60.0

    @abstractmethod
    async def run(self, args: Any, ctx: ToolContext | None, model: str | None) -> ToolResult | str:
        """Do the work. Return a string (status OK) or a full :class:`ToolResult`."""

    def schema(self) -> dict[str, Any]:
        return self.Args.model_json_schema()

    def args_from_input(self, text: str) -> dict[str, Any]:
        """Map one input string (the unified call shape) onto this tool's main argument."""
        required = [n for n, f in self.Args.model_fields.items() if f.is_required()]
        key = (required or list(self.Args.model_fields) or ["input"])[0]
        return {key: text}

    def signature(self) -> str:
        """One line for prompts: name(arg: type, ...) - description."""
        props = self.schema().get("properties", {})
        params = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in props.items())
        return f"{self.name}({params}) [{self.kind}] - {self.description}"


class ToolRegistry:
    """Tools and agent tools by name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise ToolNotFoundError(f"unknown tool '{name}'; available: {', '.join(self.names) or 'none'}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> list[str]:
        return sorted(self._tools)

    def tools(self) -> list[Tool]:
        return [self._tools[n] for n in self.names]

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        return ToolRegistry(self._tools[n] for n in names if n in self._tools)

    async def call(
        self,
        name: str,
        args: dict[str, Any] | None,
        ctx: ToolContext | None = None,
        *,
        model: str | None = None,
        timeout_s: float | None = None,
    ) -> ToolResult:
        """Run one tool and always return an envelope (cancellation still propagates)."""
        start = time.perf_counter()
        if name not in self._tools:
            return ToolResult(
                status=ToolStatus.NOT_FOUND,
                error=f"unknown tool '{name}'; available: {', '.join(self.names)}",
            )
        tool = self._tools[name]
        try:
            parsed = tool.Args.model_validate(args or {})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'args'}: {e['msg']}" for e in exc.errors()[:3]
            )
            return ToolResult(status=ToolStatus.INVALID_ARGS, error=f"{name}: {problems}")
        limit = timeout_s if timeout_s is not None else tool.timeout_s
        try:
            async with asyncio.timeout(limit) as deadline:
                with pausable(deadline):  # its model calls' time queued for a slot does not count
                    raw = await tool.run(parsed, ctx, model)
            result = raw if isinstance(raw, ToolResult) else ToolResult(output=raw)
        except TimeoutError:
            result = ToolResult(status=ToolStatus.TIMEOUT, error=f"{name} timed out after {limit:g}s")
        except BudgetExceededError as exc:
            result = ToolResult(status=ToolStatus.BUDGET_EXCEEDED, error=str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a crashing tool is data, not a crash
            result = ToolResult(status=ToolStatus.EXEC_ERROR, error=f"{name}: {type(exc).__name__}: {exc}")
        if result.cost_units == 0.0:
            result.cost_units = tool.cost_units
        result.latency_s = time.perf_counter() - start
        return result
