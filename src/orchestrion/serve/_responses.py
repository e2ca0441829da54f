"""The OpenAI Responses API (``POST /v1/responses``), as `orchestrion serve` speaks it.

A Responses request becomes the same episode a chat request would: ``instructions`` is a
system message, ``input`` (a string, or message items with text parts) the conversation,
``max_output_tokens`` the answer's token limit, ``text.format`` the answer's JSON format (as
chat's ``response_format``), and ``orchestrion`` the same extension field. What happens to
every other field is in :data:`orchestrion.serve._fields.RESPONSES_FIELDS`. The server keeps no
responses: ``previous_response_id`` and ``conversation`` are refused, so the whole
conversation comes as ``input`` each time.

Client tools
    ``tools`` are function tools (flat: ``{"type": "function", "name", "description",
    "parameters"}``), as chat's (:mod:`orchestrion.serve._client_tools`). A call ends the response
    with ``function_call`` output items (``call_id``, ``name``, JSON-string ``arguments``); the
    next request's ``input``, carrying those ``function_call`` items and a
    ``function_call_output`` item per call, continues the same episode. Input ``function_call``
    items are read as an assistant message's ``tool_calls``, ``function_call_output`` items as
    ``tool`` messages (a ``call_id`` that matches no earlier ``function_call`` is a 400).

Response
    A ``response`` object with one ``message`` output item holding one ``output_text`` part;
    ``status`` is ``completed``, or ``incomplete`` (``incomplete_details.reason``
    ``max_output_tokens``) when the answer was cut at its token limit or the episode stopped
    on its budget. ``usage`` is the episode's total, and ``orchestrion`` the same summary as
    chat's. An episode ending in ``error`` is a 502 error body, as for chat (with
    ``errors_as_200``: status ``failed`` and ``error``).

Streaming (``stream: true``)
    Server-sent events, each with its ``event:`` name: ``response.created``,
    ``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
    then ``response.output_text.delta`` token by token as the answer is written (grounded as it
    goes, as for chat), then ``response.output_text.done``, ``response.content_part.done``,
    ``response.output_item.done`` and ``response.completed`` (or ``response.incomplete``); an
    episode that fails ends with ``response.failed``. Silent stretches get ``: keep-alive``
    comments; progress is not sent (chat streams carry it). The message item is opened with its
    first text; a response that ends with client tool calls sends, per call,
    ``response.output_item.added`` (a ``function_call`` item with empty arguments),
    ``response.function_call_arguments.delta`` and ``.done``, ``response.output_item.done``, then
    ``response.completed``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..models.types import Usage
from ..runtime.episode import EpisodeResult
from ..status import EpisodeStatus
from ._bodies import SSE_KEEPALIVE, Ending, tool_call_items
from ._fields import RESPONSES_FIELDS, unread_keys
from ._openai_schema import (
    ApiError,
    ChatMessage,
    ChatRequest,
    JsonSchemaFormat,
    OrchestrionExtra,
    ResponseFormat,
    check_parts,
    screened,
    validated,
)
from ._stream import KeepAlive, Paused, StreamItem
from ._tool_spec import tool_spec

ITEM_KEYS = frozenset({"type", "role", "content"})  # what is read of an input message item
CALL_KEYS = frozenset({"type", "call_id", "name", "arguments", "id", "status"})  # of a function_call item
OUTPUT_KEYS = frozenset({"type", "call_id", "output", "id", "status"})  # of a function_call_output item


def _about(name: str) -> str:
    rule = RESPONSES_FIELDS[name]
    return f"{rule.fate}: {rule.note}"


def _field(name: str, default: Any = None, **kw: Any) -> Any:
    return Field(default, description=_about(name), **kw)


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponsesRequest(BaseModel):
    """A Responses request: every field of OpenAI's schema, typed; what serve does with each is
    in its description (:data:`orchestrion.serve._fields.RESPONSES_FIELDS`)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description=_about("model"))
    input: str | list[dict[str, Any]] = Field(description=_about("input"))
    instructions: str | None = _field("instructions")
    stream: bool = _field("stream", False)
    stream_options: dict[str, Any] | None = _field("stream_options")
    max_output_tokens: int | None = _field("max_output_tokens", gt=0)
    text: TextConfig | None = _field("text")
    tools: list[dict[str, Any]] | None = _field("tools")
    tool_choice: str | dict[str, Any] | None = _field("tool_choice")
    parallel_tool_calls: bool | None = _field("parallel_tool_calls")
    max_tool_calls: int | None = _field("max_tool_calls", ge=0)
    top_logprobs: int | None = _field("top_logprobs", ge=0, le=20)
    include: list[str] | None = _field("include")
    previous_response_id: str | None = _field("previous_response_id")
    conversation: str | dict[str, Any] | None = _field("conversation")
    prompt: dict[str, Any] | None = _field("prompt")
    background: bool | None = _field("background")
    background_options: dict[str, Any] | None = _field("background_options")
    context_management: list[dict[str, Any]] | None = _field("context_management")
    truncation: Literal["auto", "disabled"] | None = _field("truncation")
    reasoning: dict[str, Any] | None = _field("reasoning")
    image: dict[str, Any] | None = _field("image")
    access_programs: dict[str, Any] | list[Any] | None = _field("access_programs")
    temperature: float | None = _field("temperature", ge=0, le=2)
    top_p: float | None = _field("top_p", ge=0, le=1)
    store: bool | None = _field("store")
    service_tier: str | None = _field("service_tier")
    prompt_cache_key: str | None = _field("prompt_cache_key")
    prompt_cache_retention: str | None = _field("prompt_cache_retention")
    prompt_cache_options: dict[str, Any] | None = _field("prompt_cache_options")
    metadata: dict[str, str] | None = _field("metadata")
    user: str | None = _field("user")
    safety_identifier: str | None = _field("safety_identifier")
    moderation: dict[str, Any] | None = _field("moderation")
    orchestrion: OrchestrionExtra = Field(default_factory=OrchestrionExtra, description=_about("orchestrion"))


def parse_responses(body: bytes) -> tuple[ResponsesRequest, ChatRequest]:
    """The Responses request and the chat request its episode runs as; a 400 naming what is wrong."""
    req = validated(ResponsesRequest, body)
    ignored = screened(req, RESPONSES_FIELDS)
    fmt = req.text.format if req.text is not None else None
    response_format = None
    if fmt is not None:
        if fmt.type == "json_schema" and fmt.schema_ is None:
            raise ApiError(400, "'text.format.schema': required when type is 'json_schema'",
                           code="invalid_request", param="text.format.schema")
        schema = JsonSchemaFormat.model_validate({"name": fmt.name, "schema": fmt.schema_}) \
            if fmt.type == "json_schema" else None
        response_format = ResponseFormat(type=fmt.type, json_schema=schema)
    messages, unread = input_messages(req)
    chat = ChatRequest(model=req.model, messages=messages, stream=req.stream,
                       max_tokens=req.max_output_tokens, response_format=response_format, metadata=req.metadata,
                       user=req.user, safety_identifier=req.safety_identifier, orchestrion=req.orchestrion)
    chat._ignored = [*ignored, *unread]
    chat._spec = tool_spec(req.tools, req.tool_choice, req.parallel_tool_calls, flat=True)
    return req, chat


def input_messages(req: ResponsesRequest) -> tuple[list[ChatMessage], list[str]]:
    """``instructions`` and ``input`` as chat messages (message items with text parts only), and
    the keys of the items and parts that are not read (listed back as ignored)."""
    messages = [ChatMessage(role="system", content=req.instructions)] if req.instructions else []
    if isinstance(req.input, str):
        return [*messages, ChatMessage(role="user", content=req.input)], []
    unread: list[str] = []
    called: set[str] = set()
    for i, item in enumerate(req.input):
        kind = item.get("type", "message")
        if kind in ("function_call", "function_call_output"):
            messages.append(_tool_item(item, f"input.{i}", called, messages))
            unread += unread_keys(item, CALL_KEYS if kind == "function_call" else OUTPUT_KEYS, f"input.{i}")
            continue
        if kind != "message" or "role" not in item:
            raise ApiError(400, f"'input.{i}': a {kind!r} item cannot be read: send message, function_call and "
                           "function_call_output items", code="unsupported_content", param=f"input.{i}")
        unread += unread_keys(item, ITEM_KEYS, f"input.{i}")
        unread += check_parts(item.get("content"), f"input.{i}.content")
        try:
            messages.append(ChatMessage.model_validate({"role": item["role"], "content": item.get("content")}))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in (f"input.{i}", *first["loc"]))
            raise ApiError(400, f"'{where}': {first['msg']}", code="invalid_request", param=where) from None
    if not messages:
        raise ApiError(400, "'input': empty: send the request as a string or message items",
                       code="invalid_request", param="input")
    return messages, unread


def _tool_item(item: dict[str, Any], where: str, called: set[str], before: list[ChatMessage]) -> ChatMessage:
    """A ``function_call`` item as an assistant message's tool call (joined to the one before it when
    that holds calls too), a ``function_call_output`` item as a ``tool`` message."""
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ApiError(400, f"'{where}.call_id': required", code="invalid_request", param=f"{where}.call_id")
    if item["type"] == "function_call_output":
        if call_id not in called:
            raise ApiError(400, f"'{where}.call_id': {call_id!r} matches no function_call item before it",
                           code="invalid_request", param=f"{where}.call_id")
        output = item.get("output")
        text = output if isinstance(output, str) else "\n".join(
            str(p.get("text", "")) for p in output or [] if isinstance(p, dict))
        return ChatMessage(role="tool", tool_call_id=call_id, content=text)
    name, arguments = item.get("name"), item.get("arguments", "")
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise ApiError(400, f"'{where}': a function_call item needs its name and its arguments (a JSON string)",
                       code="invalid_request", param=where)
    called.add(call_id)
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    last = before[-1] if before else None
    if last is not None and last.role == "assistant" and last.tool_calls and not last.content:
        before.pop()
        return last.model_copy(update={"tool_calls": [*last.tool_calls, call]})
    return ChatMessage(role="assistant", content=None, tool_calls=[call])


def function_call_items(paused: Paused) -> list[dict[str, Any]]:
    """The ``function_call`` output items of a response that ends with client tool calls."""
    return [{"type": "function_call", "id": "fc_" + c["id"].removeprefix("call_"), "call_id": c["id"],
             "name": c["function"]["name"], "arguments": c["function"]["arguments"], "status": "completed"}
            for c in tool_call_items(paused.calls)]


def new_response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def usage_body(usage: Usage) -> dict[str, Any]:
    return {"input_tokens": usage.input_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.total_tokens}


def message_item(rid: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [output_text(text)]
    return {"id": "msg_" + rid.removeprefix("resp_"), "type": "message", "role": "assistant", "status": status,
            "content": content}


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def response_body(rid: str, created: float, req: ResponsesRequest, *, status: str = "in_progress",
                  end: Ending | Paused | None = None) -> dict[str, Any]:
    """The ``response`` object: in progress (no ``end``), finished, or ended with client tool calls."""
    fmt = req.text.format.model_dump(by_alias=True, exclude_none=True) if req.text and req.text.format else None
    body: dict[str, Any] = {
        "id": rid, "object": "response", "created_at": created, "status": status, "model": req.model,
        "output": [], "error": None, "incomplete_details": None, "instructions": req.instructions,
        "metadata": req.metadata or {}, "max_output_tokens": req.max_output_tokens,
        "parallel_tool_calls": bool(req.tools) and req.parallel_tool_calls is not False,
        "temperature": None, "top_p": None, "tool_choice": req.tool_choice or ("auto" if req.tools else "none"),
        "tools": req.tools or [], "store": False,
        "text": {"format": fmt or {"type": "text"}}, "usage": None,
    }
    if isinstance(end, Paused):
        body.update(status="completed", usage=usage_body(end.usage), orchestrion=end.ext, completed_at=time.time(),
                    output=function_call_items(end))
    elif end is not None:
        status = finished_status(end)
        body.update(status=status, usage=usage_body(end.result.usage), orchestrion=end.ext,
                    completed_at=time.time() if status == "completed" else None,
                    output=[message_item(rid, end.answer, "incomplete" if status == "incomplete" else "completed")])
        if status == "incomplete":
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        elif status == "failed":
            body["error"] = {"code": "server_error", "message": end.ext.get("error") or "the episode failed"}
    return body


def finished_status(end: Ending) -> str:
    if end.result.status == EpisodeStatus.ERROR:
        return "failed"  # only with errors_as_200: otherwise the episode's error is a 502
    return "incomplete" if end.finish == "length" else "completed"


def _event(kind: str, seq: int, data: dict[str, Any]) -> bytes:
    payload = orjson.dumps({"type": kind, "sequence_number": seq, **data}, default=str)
    return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"


async def responses_sse(req: ResponsesRequest, rid: str, items: AsyncIterator[StreamItem],
                        on_result: Callable[[EpisodeResult], None]) -> AsyncIterator[bytes]:
    """The Responses SSE body (see the module docstring)."""
    created = time.time()
    seq = iter(range(1 << 62))
    where = {"item_id": message_item(rid, None, "in_progress")["id"], "output_index": 0}

    def event(kind: str, **data: Any) -> bytes:
        return _event(kind, next(seq), data)

    start = response_body(rid, created, req)
    yield event("response.created", response=start)
    yield event("response.in_progress", response=start)
    opened = False

    def open_message() -> list[bytes]:  # the message item, with its first text (never for tool calls)
        nonlocal opened
        if opened:
            return []
        opened = True
        return [event("response.output_item.added", output_index=0, item=message_item(rid, None, "in_progress")),
                event("response.content_part.added", **where, content_index=0, part=output_text(""))]

    async for item in items:
        if isinstance(item, str):
            for head in open_message():
                yield head
            yield event("response.output_text.delta", **where, content_index=0, delta=item, logprobs=[])
        elif isinstance(item, KeepAlive):
            yield SSE_KEEPALIVE
        elif isinstance(item, ApiError):
            failed = {**start, "status": "failed", "error": {"code": "server_error", "message": item.message}}
            yield event("response.failed", response=failed)
        elif isinstance(item, Paused):
            for chunk in _function_call_events(rid, created, req, item, event):
                yield chunk
        elif isinstance(item, Ending):
            on_result(item.result)
            for head in open_message():
                yield head
            done = response_body(rid, created, req, end=item)
            yield event("response.output_text.done", **where, content_index=0, text=item.answer, logprobs=[])
            yield event("response.content_part.done", **where, content_index=0, part=output_text(item.answer))
            yield event("response.output_item.done", output_index=0, item=done["output"][0])
            yield event(f"response.{done['status']}", response=done)


def _function_call_events(rid: str, created: float, req: ResponsesRequest, paused: Paused,
                          event: Callable[..., bytes]) -> list[bytes]:
    """A streamed response's end with client tool calls: each ``function_call`` item, its arguments, done."""
    out = []
    for i, item in enumerate(function_call_items(paused)):
        out += [event("response.output_item.added", output_index=i,
                      item={**item, "arguments": "", "status": "in_progress"}),
                event("response.function_call_arguments.delta", item_id=item["id"], output_index=i,
                      delta=item["arguments"]),
                event("response.function_call_arguments.done", item_id=item["id"], output_index=i,
                      arguments=item["arguments"], name=item["name"]),
                event("response.output_item.done", output_index=i, item=item)]
    return [*out, event("response.completed", response=response_body(rid, created, req, end=paused))]
