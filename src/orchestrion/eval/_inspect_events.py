"""An Orchestrion episode, written into the current inspect_ai sample's transcript.

The episode's span tree becomes nested inspect spans (``SpanBeginEvent``/``SpanEndEvent``: the
episode as a span of type ``orchestrion``, each round, decision, node, answer ... as a span of
its kind), each model call a ``ModelEvent`` (model ``orchestrion/<pool model>``, messages,
output, usage, cost where known, start and duration) and each tool or agent-tool call a
``ToolEvent`` (function, arguments, result, error; an agent's own model calls sit in a span of
type ``agent`` that the event names as its ``agent_span_id``). An ``InfoEvent`` (source
``orchestrion``) names the trace id and store, which is how the score hook
(:mod:`orchestrion.eval._inspect_registry`) finds the episodes of a sample.

Events carry the times recorded in the trace, so ``inspect view`` shows when each call ran.
inspect_ai is imported by the functions here, never at module import.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..status import EpisodeStatus
from ..trace.rows import SpanRow
from ..trace.store import TraceStore

INFO_SOURCE = "orchestrion"  # the InfoEvent that names an episode's trace id and store
TOOL_KINDS = ("tool", "agent")
# trace stores opened by a solver or model provider in this process, by path: the score hook
# writes through the same store instead of opening a second writer on the file
STORES: dict[str, TraceStore] = {}


def remember(store: TraceStore) -> TraceStore:
    STORES.setdefault(str(Path(store.path).resolve()), store)
    return store


def log_episode(store: TraceStore, trace_id: str, strategy: str, *, count_usage: bool) -> None:
    """Log the episode ``trace_id`` into the current sample's transcript. ``count_usage``: also add
    each model call's usage to the sample's and the eval's ``model_usage`` (the solver does; the
    model provider does not, since inspect counts its own output's usage)."""
    from inspect_ai.log import transcript
    from inspect_ai.util._span import current_span_id

    transcript().info({"orchestrion_trace_id": trace_id, "strategy": strategy,
                       "store": str(Path(store.path).resolve())}, source=INFO_SOURCE)
    spans = store.spans(trace_id)
    children: dict[str | None, list[SpanRow]] = defaultdict(list)
    for span in spans:
        children[span.parent_id].append(span)
    writer = _Writer(trace_id, strategy, children, count_usage, time.time())
    for root in children[None]:
        writer.span(root, current_span_id())


def _when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class _Writer:
    """Walks the span tree depth first, emitting inspect events in the order a viewer reads them."""

    def __init__(self, trace_id: str, strategy: str, children: dict[str | None, list[SpanRow]],
                 count_usage: bool, now: float) -> None:
        from inspect_ai._util.working import sample_working_time
        from inspect_ai.log import transcript

        self.trace_id = trace_id
        self.strategy = strategy
        self.children = children
        self.count_usage = count_usage
        self.now = now
        self.working_now = sample_working_time()
        self.transcript = transcript()

    def working_start(self, ts: float) -> float:
        return max(0.0, self.working_now - (self.now - ts))

    def meta(self, span: SpanRow) -> dict[str, Any]:
        return {"orchestrion_span_id": span.id, "orchestrion_trace_id": self.trace_id}

    def span(self, span: SpanRow, parent: str | None) -> None:
        if span.kind == "call":
            self.model_call(span, parent)
            return
        inner = self.children.get(span.id, [])
        if span.kind in TOOL_KINDS:
            self.tool_call(span, parent, f"orch-{span.id}" if inner else None)
            if not inner:
                return
        self.nest(span, parent, inner)

    def nest(self, span: SpanRow, parent: str | None, inner: list[SpanRow]) -> None:
        from inspect_ai.event import SpanBeginEvent, SpanEndEvent

        sid = f"orch-{span.id}"
        kind, name = span.kind, span.name
        if span.parent_id is None:
            kind, name = "orchestrion", f"orchestrion/{self.strategy}"
        ended = float(span.ended or span.started)
        self.transcript._event(SpanBeginEvent(
            id=sid, parent_id=parent, span_id=parent, type=kind, name=name, timestamp=_when(float(span.started)),
            working_start=self.working_start(float(span.started)), metadata=self.meta(span)))
        for child in inner:
            self.span(child, sid)
        self.transcript._event(SpanEndEvent(id=sid, span_id=sid, timestamp=_when(ended),
                                            working_start=self.working_start(ended)))

    def tool_call(self, span: SpanRow, parent: str | None, agent_span: str | None) -> None:
        from inspect_ai.event import ToolEvent
        from inspect_ai.tool import ToolCallError

        attrs = span.attrs_value()
        args = attrs.get("args")
        arguments = args if isinstance(args, dict) else {"input": args}
        started, ended = float(span.started), float(span.ended or span.started)
        failed = span.status != EpisodeStatus.OK
        error = None
        if failed:
            why = str(attrs.get("error") or attrs.get("output") or span.status)
            error = ToolCallError("timeout", why) if span.status == "timeout" else ToolCallError("unknown", why)
        self.transcript._event(ToolEvent(
            id=span.id, function=span.name, arguments=arguments, result=str(attrs.get("output") or ""),
            error=error, failed=failed or None, span_id=parent, timestamp=_when(started), completed=_when(ended),
            working_start=self.working_start(started), working_time=ended - started,
            agent=span.name if span.kind == "agent" else None, agent_span_id=agent_span,
            metadata={**self.meta(span), "status": span.status, "model": attrs.get("model")}))

    def model_call(self, span: SpanRow, parent: str | None) -> None:
        from inspect_ai.event import ModelEvent
        from inspect_ai.model import GenerateConfig, ModelOutput, ModelUsage
        from inspect_ai.model._model import model_usage, sample_model_usage, set_model_usage

        attrs = span.attrs_value()
        name = f"orchestrion/{span.name}"
        started, ended = float(span.started), float(span.ended or span.started)
        tokens_in, tokens_out = int(span.input_tokens or 0), int(span.output_tokens or 0)
        usage = ModelUsage(input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out,
                           total_cost=None if span.cost_usd is None else float(span.cost_usd))
        output = ModelOutput.from_content(model=name, content=str(attrs.get("output") or ""),
                                          stop_reason="max_tokens" if attrs.get("finish_reason") == "length"
                                          else "stop")
        output.usage, output.time = usage, ended - started
        self.transcript._event(ModelEvent(
            model=name, role=str(attrs.get("purpose") or "") or None,
            input=[_message(m) for m in attrs.get("messages") or [] if isinstance(m, dict)],
            tools=[], tool_choice="none", config=GenerateConfig(), output=output,
            error=None if span.status == EpisodeStatus.OK else str(attrs.get("error") or span.status),
            span_id=parent, timestamp=_when(started), completed=_when(ended), working_time=ended - started,
            working_start=self.working_start(started), metadata=self.meta(span)))
        if self.count_usage:
            for totals in (sample_model_usage(), model_usage()):  # the sample's and the eval's model_usage
                set_model_usage(name, usage.model_copy(), totals)


def _message(m: dict[str, Any]) -> Any:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser

    content = str(m.get("content") or "")
    role = m.get("role")
    if role == "system":
        return ChatMessageSystem(content=content)
    if role == "assistant":
        return ChatMessageAssistant(content=content)
    return ChatMessageUser(content=content)
