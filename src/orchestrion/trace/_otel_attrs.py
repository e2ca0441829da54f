"""How one stored span reads as an OpenTelemetry span: its name and attributes.

The attributes follow the OpenTelemetry GenAI semantic conventions where one applies:

- the episode is an ``invoke_workflow`` span (``gen_ai.workflow.name`` = the strategy);
- a model call (``call``) is a ``chat`` span: ``gen_ai.request.model``, ``gen_ai.response.model``,
  ``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.finish_reasons`` and, unless
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=false``, ``gen_ai.input.messages`` /
  ``gen_ai.output.messages``;
- a tool call is an ``execute_tool`` span, an agent tool or sub-agent an ``invoke_agent`` span;
- rounds, decisions, plan nodes, sub-agent steps and synthesis are plain internal spans.

Token usage sits as ``gen_ai.usage.*`` on model-call spans only, so a backend that sums tokens
over a trace counts each call once. Every span also carries Orchestrion's own view:
``orchestrion.kind``, ``orchestrion.episode_id``, ``orchestrion.span_id``, ``orchestrion.run_id``,
``orchestrion.status``, the subtree's rolled-up ``orchestrion.input_tokens`` /
``orchestrion.output_tokens``, ``orchestrion.cost_usd`` (absent when unknown) and
``orchestrion.cost_units``. ``openinference.span.kind`` names the span's role for Phoenix.

OpenInference's attributes (Phoenix groups sessions by the first; arize-phoenix 20.26 prices
spans itself from their tokens and the model price it holds, and does not read the second):

- ``session.id`` on every span of an episode: the client's session or conversation id for a
  served request (``metadata.session_id`` or ``metadata.conversation_id`` of the chat request),
  else the episode's run id (an eval run groups as one session; a serve process is not a
  session), else the episode id;
- on model-call spans whose cost is known, ``llm.cost.total`` (USD) and, where the call
  recorded its price split, ``llm.cost.prompt`` and ``llm.cost.completion``. An unknown cost
  gets no attribute, never 0.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from ..status import EpisodeStatus, ended_badly
from .rows import EpisodeRow, SpanRow

MAX_TEXT = 16_000  # characters kept of any one text attribute

# Orchestrion span kind -> (gen_ai.operation.name or None, openinference.span.kind)
_ROLES: dict[str, tuple[str | None, str]] = {
    "episode": ("invoke_workflow", "CHAIN"),
    "call": ("chat", "LLM"),
    "tool": ("execute_tool", "TOOL"),
    "agent": ("invoke_agent", "AGENT"),
    "subagent": ("invoke_agent", "AGENT"),
}

Attributes = dict[str, str | bool | int | float | list[str]]


def capture_content() -> bool:
    """Whether prompts and outputs go into the spans (the GenAI convention's opt-out variable)."""
    value = os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    return value.strip().lower() not in ("false", "0", "no")


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


def decoded_attrs(row: SpanRow) -> dict[str, Any]:
    raw = row.attrs
    if not raw:
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def span_name(row: SpanRow, attrs: dict[str, Any]) -> str:
    """``{operation} {target}`` for GenAI operations (the convention), ``{kind} {name}`` otherwise."""
    kind, name = str(row.kind or "span"), str(row.name or "")
    if kind == "episode":
        return f"invoke_workflow {name}".strip()
    if kind == "call":
        return f"chat {name}".strip()
    if kind == "tool":
        return f"execute_tool {attrs.get('tool') or name}".strip()
    if kind in ("agent", "subagent"):
        return f"invoke_agent {attrs.get('tool') or name}".strip()
    return name if name.startswith(kind) else f"{kind} {name}".strip()  # "round 1", not "round round 1"


def session_id(episode: EpisodeRow, run_kind: str | None) -> str:
    """The ``session.id`` of an episode's spans (see the module docstring); ``run_kind`` is the
    kind of its ``runs`` row (None when it has none)."""
    task = episode.task_value()
    meta = task.get("metadata") if isinstance(task, dict) else None
    client = meta.get("metadata") if isinstance(meta, dict) else None
    if isinstance(client, dict):
        for key in ("session_id", "conversation_id"):
            if isinstance(client.get(key), str) and client[key]:
                return str(client[key])
    if episode.run_id and run_kind != "serve":
        return str(episode.run_id)
    return str(episode.id)


def span_attributes(row: SpanRow, attrs: dict[str, Any], episode: EpisodeRow, *,
                    provider: str, content: bool, session: str | None = None) -> Attributes:
    """Every attribute of one exported span (see the module docstring)."""
    kind = str(row.kind or "span")
    operation, oi_kind = _ROLES.get(kind, (None, "CHAIN"))
    out: Attributes = {"openinference.span.kind": oi_kind, "session.id": session or str(episode.id)}
    if operation is not None:
        out["gen_ai.operation.name"] = operation
        out["gen_ai.provider.name"] = provider
        out["gen_ai.system"] = provider  # the older name of the same attribute; many backends still read it
    out.update(_orchestrion_attrs(row, episode))
    if kind == "episode":
        out["gen_ai.workflow.name"] = str(row.name or "")
        if content:
            out["input.value"] = _text(attrs.get("task") or _task_prompt(episode))
            out["output.value"] = _text(attrs.get("answer") or episode.answer or "")
    elif kind == "call":
        out.update(_call_attrs(row, attrs, content))
    elif kind == "tool":
        out["gen_ai.tool.name"] = str(attrs.get("tool") or row.name or "")
        out["gen_ai.tool.type"] = "function"
        out["gen_ai.tool.call.id"] = str(row.id)
        if content:
            out.update(_io_attrs(attrs, "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"))
    elif kind in ("agent", "subagent"):
        out["gen_ai.agent.name"] = str(attrs.get("tool") or row.name or "")
        out["gen_ai.agent.id"] = str(row.id)
        if attrs.get("model"):
            out["gen_ai.request.model"] = str(attrs["model"])
        if content:
            out.update(_io_attrs(attrs, "input.value", "output.value", instruction=attrs.get("instruction")))
    elif kind == "decision":
        for key in ("model", "schema", "valid", "attempts"):
            if isinstance(attrs.get(key), (str, bool, int, float)):
                out[f"orchestrion.decision.{key}"] = attrs[key]
    status = str(row.status or EpisodeStatus.RUNNING)
    if ended_badly(status):
        out["error.type"] = status
    return out


def _orchestrion_attrs(row: SpanRow, episode: EpisodeRow) -> Attributes:
    out: Attributes = {
        "orchestrion.kind": str(row.kind or ""),
        "orchestrion.name": str(row.name or ""),
        "orchestrion.span_id": str(row.id),
        "orchestrion.episode_id": str(episode.id),
        "orchestrion.status": str(row.status or "running"),
        "orchestrion.input_tokens": int(row.input_tokens or 0),
        "orchestrion.output_tokens": int(row.output_tokens or 0),
        "orchestrion.cost_units": float(row.cost_units or 0.0),
    }
    if row.parent_id:
        out["orchestrion.parent_span_id"] = str(row.parent_id)
    if row.cost_usd is not None:  # unknown prices stay unknown: no attribute, never 0
        out["orchestrion.cost_usd"] = float(row.cost_usd)
    for key, value in (("run_id", episode.run_id), ("task_id", episode.task_id), ("strategy", episode.strategy)):
        if value:
            out[f"orchestrion.{key}"] = str(value)
    return out


def _call_attrs(row: SpanRow, attrs: dict[str, Any], content: bool) -> Attributes:
    model = str(row.name or "")
    out: Attributes = {
        "gen_ai.request.model": model,
        "gen_ai.response.model": model,
        "gen_ai.usage.input_tokens": int(row.input_tokens or 0),
        "gen_ai.usage.output_tokens": int(row.output_tokens or 0),
    }
    out.update(_cost_attrs(row, attrs))
    if attrs.get("purpose"):
        out["orchestrion.purpose"] = str(attrs["purpose"])
    if attrs.get("finish_reason"):
        out["gen_ai.response.finish_reasons"] = [str(attrs["finish_reason"])]
    if content:
        messages = attrs.get("messages")
        if isinstance(messages, list):
            out["gen_ai.input.messages"] = _messages(messages)
        if attrs.get("output") is not None:
            reply = {"role": "assistant", "parts": [{"type": "text", "content": _text(attrs["output"])}],
                     "finish_reason": str(attrs.get("finish_reason") or "stop")}
            out["gen_ai.output.messages"] = orjson.dumps([reply]).decode()
    return out


def _cost_attrs(row: SpanRow, attrs: dict[str, Any]) -> Attributes:
    """OpenInference's ``llm.cost.*`` of a model call whose cost is known (none when unknown)."""
    if row.cost_usd is None:
        return {}
    total = float(row.cost_usd)
    out: Attributes = {"llm.cost.total": total}
    prompt, completion = attrs.get("cost_prompt_usd"), attrs.get("cost_completion_usd")
    if isinstance(prompt, (int, float)) and isinstance(completion, (int, float)) \
            and abs(prompt + completion - total) <= 1e-9 * max(1.0, total):  # a split that adds up
        out["llm.cost.prompt"] = float(prompt)
        out["llm.cost.completion"] = float(completion)
    return out


def _messages(messages: list[Any]) -> str:
    """Chat messages in the convention's shape: role plus a list of typed parts."""
    shaped = [
        {"role": str(m.get("role", "user")), "parts": [{"type": "text", "content": _text(m.get("content") or "")}]}
        for m in messages if isinstance(m, dict)
    ]
    return orjson.dumps(shaped).decode()


def _io_attrs(attrs: dict[str, Any], input_key: str, output_key: str, *, instruction: Any = None) -> Attributes:
    out: Attributes = {}
    given = attrs.get("args") if attrs.get("args") is not None else instruction
    if given is not None:
        out[input_key] = _text(given)
    if attrs.get("output") is not None:
        out[output_key] = _text(attrs["output"])
    if attrs.get("error"):
        out["orchestrion.error"] = _text(attrs["error"])
    return out


def _task_prompt(episode: EpisodeRow) -> str:
    raw = episode.task
    if isinstance(raw, str):
        try:
            task = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
        if isinstance(task, dict):
            return str(task.get("prompt") or "")
    return ""
