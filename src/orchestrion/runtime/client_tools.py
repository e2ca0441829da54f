"""Client tools: functions that the caller of an episode runs itself (`orchestrion serve`'s client,
which sent them as a request's ``tools``), offered to the strategy beside the pool's own tools.

A strategy that calls client tools (:meth:`~orchestrion.runtime.context.RunContext.call_client_tools`)
pauses there: each call is a span of kind ``client_tool`` (its arguments, then its result,
status and ``wait_s``), the caller is told through :attr:`ClientTools.on_pause` which calls the
episode waits for, and the episode waits until :meth:`ClientTools.resolve` hands it the
results (serve: the client's next request, carrying the ``tool`` messages), which come back as
ordinary :class:`~orchestrion.tools.envelope.ToolResult` envelopes with their statuses. The same
episode goes on: same trace, round and budget. An episode whose results do not come within
``timeout_s`` raises :class:`ClientToolsTimeout`, and is recorded ``interrupted``.

The wait is the client's time, not the episode's: the budget's wall clock stands still through it
(:meth:`~orchestrion.runtime.budget.BudgetTracker.paused`), and :attr:`ClientTools.waited_s`, the
total, is reported apart from the episode's wall time (``client_wait_s`` in its meta).

What the request offers is a :class:`ClientToolSpec`: the tools with their JSON-schema
parameters, ``choice`` (OpenAI's ``tool_choice``: ``none``, ``auto``, ``required``, or one tool's
name) and ``parallel`` (``parallel_tool_calls``). A continuation may change it (the client's
next request may bind other tools or another choice).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from .._errors import OrchestrionError
from ..models.types import Usage
from ..status import EpisodeStatus, ToolStatus
from ..tools.envelope import ToolResult
from ..trace.tracer import Span, Tracer
from .budget import BudgetTracker

CLIENT_TOOL = "client_tool"  # the kind of a client tool call's span
DEFAULT_TIMEOUT_S = 600.0
MAX_SHOWN = 4000  # characters of a result kept on its span


class ClientToolsTimeout(OrchestrionError):
    """The client sent no results for the episode's client tool calls in time: the episode is
    recorded ``interrupted``."""


@dataclass(frozen=True)
class ClientTool:
    """One function the client offers: its name, description and JSON-schema parameters."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def line(self) -> str:
        """How the tool is shown to a model: name, description, parameter schema."""
        about = f": {self.description.strip()}" if self.description.strip() else ""
        return f"- {self.name}{about}\n  arguments (JSON schema): {orjson.dumps(self.parameters).decode()}"


@dataclass(frozen=True)
class ClientToolSpec:
    """The client tools a request offers, ``choice`` (``none``, ``auto``, ``required`` or a tool's
    name) and whether several may be called at once."""

    tools: tuple[ClientTool, ...]
    choice: str = "auto"
    parallel: bool = True

    @property
    def offered(self) -> tuple[ClientTool, ...]:
        """The tools a decision may call now: none for ``none``, the named one for a name."""
        if self.choice == "none":
            return ()
        if self.choice in ("auto", "required"):
            return self.tools
        return tuple(t for t in self.tools if t.name == self.choice)

    @property
    def must_call(self) -> bool:
        """Whether a decision must call a tool (``required`` or a named tool), not answer."""
        return self.choice not in ("none", "auto") and bool(self.offered)

    def get(self, name: str) -> ClientTool | None:
        return next((t for t in self.tools if t.name == name), None)


@dataclass(frozen=True)
class ClientToolCall:
    """One call of a client tool: its id (``call_...``), the tool's name and its arguments."""

    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    @property
    def arguments_json(self) -> str:
        return orjson.dumps(self.arguments).decode()


@dataclass(frozen=True)
class ClientToolReply:
    """What the client sent back for one call: the result text and its status."""

    content: str
    status: ToolStatus = ToolStatus.OK

    def result(self) -> ToolResult:
        if self.status is ToolStatus.OK:
            return ToolResult(output=self.content)
        return ToolResult(status=self.status, output=self.content, error=self.content or self.status.value)


# the episode pauses for these calls; ``Usage`` is the episode's so far
Pause = Callable[[list[ClientToolCall], Usage], None]


class ClientTools:
    """An episode's client tools, and its wait for their results (see the module doc)."""

    def __init__(self, spec: ClientToolSpec, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 on_pause: Pause | None = None) -> None:
        self.spec = spec
        self.timeout_s = timeout_s
        self.on_pause = on_pause
        self.waiting: list[ClientToolCall] = []  # the calls the episode waits for now
        self.called = 0  # client tool calls made in this episode
        self.waited_s = 0.0  # how long the episode has waited for the client's results, in all
        self._results: asyncio.Future[dict[str, ClientToolReply]] | None = None
        self._given_up: str | None = None  # why the wait was ended early (give_up)

    def resolve(self, replies: Mapping[str, ClientToolReply], spec: ClientToolSpec | None = None) -> bool:
        """Hand the waiting episode its results (by call id), and the tools offered from now on.
        False when it waits for nothing (it ended, or timed out)."""
        if self._results is None or self._results.done():
            return False
        if spec is not None:
            self.spec = spec
        self._results.set_result(dict(replies))
        return True

    def give_up(self, why: str) -> None:
        """End the wait now, as its timeout would (the episode is recorded ``interrupted``), saying ``why``."""
        if self._results is not None and not self._results.done():
            self._given_up = why
            self._results.set_exception(TimeoutError())

    async def call(self, calls: Sequence[ClientToolCall], tracer: Tracer, budget: BudgetTracker,
                   parent: Span | None = None) -> list[ToolResult]:
        """Ask the client to run ``calls`` and wait for the results, each call a ``client_tool`` span."""
        spans = []
        for call in calls:
            budget.step()
            spans.append(tracer.start(CLIENT_TOOL, call.name, parent, tool=call.name, call_id=call.id,
                                      args=call.arguments))
        self.called += len(calls)
        self.waiting = list(calls)
        self._results = asyncio.get_running_loop().create_future()
        asked = time.monotonic()
        if self.on_pause is not None:
            self.on_pause(list(calls), _copy(budget.usage))
        try:
            with budget.paused():  # the client's time, not the episode's: its wall clock stands still
                replies = await asyncio.wait_for(asyncio.shield(self._results), self.timeout_s)
        except TimeoutError:
            why = self._given_up or \
                f"no result came within {self.timeout_s:g}s (the client did not continue the conversation)"
            for span in spans:
                span.set(error=why, wait_s=round(time.monotonic() - asked, 3))
                span.end(ToolStatus.TIMEOUT)
            raise ClientToolsTimeout(f"client tool calls unanswered: {why}") from None
        except asyncio.CancelledError:
            for span in spans:
                span.set(wait_s=round(time.monotonic() - asked, 3))
                span.end(EpisodeStatus.CANCELLED)
            raise
        finally:
            self.waiting = []
            self._results = None
            self.waited_s += time.monotonic() - asked
        waited = round(time.monotonic() - asked, 3)
        results = []
        for call, span in zip(calls, spans, strict=True):
            reply = replies.get(call.id) or ClientToolReply("the client sent no result for this call",
                                                            ToolStatus.CANCELLED)
            result = reply.result()
            result.latency_s = waited
            span.set(output=reply.content[:MAX_SHOWN], status=result.status.value, wait_s=waited, error=result.error)
            span.end(result.status)
            results.append(result)
        return results


def _copy(usage: Usage) -> Usage:
    return Usage(usage.input_tokens, usage.output_tokens, usage.cost_usd, usage.cost_units, usage.calls)
