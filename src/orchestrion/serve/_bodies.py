"""The bodies `orchestrion serve` answers with: completions, stream chunks, progress items.

Response
    A ``chat.completion``; ``usage`` is the episode's total over all its model calls;
    ``finish_reason`` is ``stop`` when the answer was cut at a ``stop`` string (``stop_reason``
    names it, as vLLM does), else ``length`` when the episode stopped on its budget or the answer
    was cut at ``max_tokens``, else ``stop``.
    An episode that ran is a 200 unless it ended in ``error``. How it went is told three ways,
    so that a client which drops unknown fields (LangChain, LiteLLM) still sees it:
    ``system_fingerprint`` = ``orchestrion;status=<status>;trace_id=<id>`` (a standard field:
    LangChain's ``response_metadata["system_fingerprint"]``, LiteLLM's ``system_fingerprint``),
    the headers ``X-Orchestrion-Trace-Id`` and ``X-Orchestrion-Status``, and the body field
    ``orchestrion`` = {trace_id, status, error, strategy, cost_usd, wall_s} (with ``ignored``:
    the request fields that had no effect, also in the header ``X-Orchestrion-Ignored-Fields``;
    with ``client_wait_s`` after client tool calls: the part of ``wall_s`` the episode spent
    paused for the client's results).
    One that ended in ``error`` is a 502 error body (code ``episode_failed``, with
    ``x-should-retry: false``: the episode already retried its model calls, so the official
    client and the clients built on it raise at once instead of running it again; streamed: an
    ``error`` event before ``[DONE]``), unless ``--errors-as-200`` or the request's
    ``orchestrion.errors_as_200`` asks for the 200 (see :mod:`orchestrion.serve._failures`).
    No upstream URL or key is ever sent.

Streaming (``stream: true``)
    ``text/event-stream`` of ``chat.completion.chunk`` events, each with one choice and a
    ``system_fingerprint`` whose status is ``running`` until the finishing chunk:

    1. ``delta: {role: assistant, content: ""}``, with ``orchestrion.trace_id``;
    2. only when asked for, with ``stream_options: {"include_progress": true}`` or the header
       ``X-Orchestrion-Progress: true``: progress as it happens, chunks with an empty delta and
       ``orchestrion.progress`` = {event: start|end, span_id, parent_id, kind, name, status, t}
       (``end`` adds duration_s, input_tokens, output_tokens; ``t`` is seconds since the
       episode began), one per start and end of each span (round, decision, call, tool, agent,
       subagent, step, node, answer, ...), sent as the trace store commits it (the server
       subscribes to the store's in-process event bus before the episode starts). A plain
       client gets a plain stream: standard clients show an empty delta as nothing;
    3. the answer as content deltas, token by token while the synthesis model writes it
       (grounded as it goes: the deltas joined are exactly the final answer, up to its first
       ``stop`` string: a tail that may begin one is held back until it cannot). The progress
       of the answer's own spans may arrive between them. A strategy that answers without
       a synthesis has its answer sent in word-sized deltas once it is known;
    4. an empty delta with ``finish_reason``, the ``orchestrion`` summary above and the
       final ``system_fingerprint`` (both carry the episode's status: LangChain puts the
       fingerprint of this chunk in the streamed message's ``response_metadata``);
    5. with ``stream_options.include_usage``: a usage chunk with no choices;
    6. ``data: [DONE]``.

    Silent stretches get ``: keep-alive`` comment lines. The trace id is also a header. An
    Orchestrion error after the stream began is sent as ``data: {"error": {...}}`` (the
    official client raises it), then ``[DONE]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ..models.types import Usage
from ..runtime.client_tools import ClientToolCall
from ..runtime.episode import EpisodeResult
from ..status import EpisodeStatus
from ..trace.bus import EventType, TraceEvent


def usage_body(usage: Usage) -> dict[str, int]:
    return {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens}


def finish_reason(status: str, answer_finish: str | None = None) -> str:
    """``length`` for a budget stop or an answer cut at its token limit, else ``stop``."""
    return "length" if status == EpisodeStatus.BUDGET_EXCEEDED or answer_finish == "length" else "stop"


@dataclass(frozen=True)
class Ending:
    """How a finished episode's response ends."""

    result: EpisodeResult
    answer: str  # what the client gets: the episode's answer up to the first stop string
    finish: str  # finish_reason: stop | length
    stop_reason: str | None  # the stop string the answer was cut at
    ext: dict[str, Any]  # the response's ``orchestrion`` field


def ending(result: EpisodeResult, answer: str, stop_reason: str | None, answer_finish: str | None,
           ext: dict[str, Any]) -> Ending:
    """An answer cut at a stop string finished with ``stop``, whatever else happened."""
    finish = "stop" if stop_reason is not None else finish_reason(result.status, answer_finish)
    return Ending(result, answer, finish, stop_reason, ext)


def fingerprint(status: str, trace_id: str) -> str:
    """The ``system_fingerprint`` of a response or chunk: where a standard client sees the
    episode's status (``running`` until it ends) and trace id."""
    return f"orchestrion;status={status};trace_id={trace_id}"


def parse_fingerprint(value: str | None) -> dict[str, str]:
    """``{"status": ..., "trace_id": ...}`` from a :func:`fingerprint` (empty for any other value)."""
    if not value or not value.startswith("orchestrion;"):
        return {}
    return dict(part.partition("=")[::2] for part in value.split(";")[1:])


def completion_body(cid: str, created: int, model: str, end: Ending) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": fingerprint(end.result.status, end.result.trace_id),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": end.answer},
                     "finish_reason": end.finish, "stop_reason": end.stop_reason, "logprobs": None}],
        "usage": usage_body(end.result.usage),
        "orchestrion": end.ext,
    }


def tool_call_items(calls: list[ClientToolCall]) -> list[dict[str, Any]]:
    """``message.tool_calls``: each call's id, ``function`` type, name and JSON-string arguments."""
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
            for c in calls]


def tool_calls_body(cid: str, created: int, model: str, calls: list[ClientToolCall], usage: Usage,
                    ext: dict[str, Any]) -> dict[str, Any]:
    """A ``chat.completion`` that ends with client tool calls (``finish_reason: "tool_calls"``): the
    episode waits for their results (``orchestrion.status`` ``running``)."""
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": fingerprint(EpisodeStatus.RUNNING, str(ext.get("trace_id"))),
        "choices": [{"index": 0, "finish_reason": "tool_calls", "stop_reason": None, "logprobs": None,
                     "message": {"role": "assistant", "content": None, "tool_calls": tool_call_items(calls)}}],
        "usage": usage_body(usage),
        "orchestrion": ext,
    }


def chunk_body(cid: str, created: int, model: str, delta: dict[str, Any] | None = None, *,
               finish: str | None = None, ext: dict[str, Any] | None = None,
               usage: Usage | None = None, stop_reason: str | None = None,
               system_fingerprint: str | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` gives the usage chunk (no choices)."""
    body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                            "system_fingerprint": system_fingerprint}
    choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
    if finish is not None:
        choice["stop_reason"] = stop_reason
    body["choices"] = [] if delta is None else [choice]
    if usage is not None:
        body["usage"] = usage_body(usage)
    if ext is not None:
        body["orchestrion"] = ext
    return body


def episode_summary(result: EpisodeResult, ignored: list[str] | None = None) -> dict[str, Any]:
    """The ``orchestrion`` field of a finished response (``ignored``: the request fields that had no
    effect, when there are any)."""
    summary = {"trace_id": result.trace_id, "status": result.status, "error": result.error,
               "strategy": result.strategy, "cost_usd": result.cost_usd, "wall_s": round(result.wall_s, 3)}
    if result.client_wait_s:  # of wall_s, the time paused for the client's tool results
        summary["client_wait_s"] = round(result.client_wait_s, 3)
    return {**summary, "ignored": ignored} if ignored else summary


def progress(event: TraceEvent, t0: float) -> dict[str, Any] | None:
    """The ``orchestrion.progress`` item of a span's start or end event (None for other events and
    for the episode's root span); ``t0`` is when the episode started."""
    if event.kind == "episode" or event.type not in (EventType.SPAN_STARTED, EventType.SPAN_ENDED):
        return None
    base = {"span_id": event.span_id, "parent_id": event.parent_id, "kind": event.kind, "name": event.name}
    if event.type is EventType.SPAN_STARTED:
        return {"event": "start", **base, "status": EpisodeStatus.RUNNING, "t": round(event.ts - t0, 3)}
    started = float(event.data.get("started", event.ts))
    usage = event.data.get("usage") or {}
    return {"event": "end", **base, "status": event.status, "t": round(event.ts - t0, 3),
            "duration_s": round(event.ts - started, 3), "input_tokens": usage.get("input_tokens", 0),
            "output_tokens": usage.get("output_tokens", 0)}


def sse(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data, default=str) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
SSE_KEEPALIVE = b": keep-alive\n\n"
