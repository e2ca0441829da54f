"""The OpenAI chat-completions wire format, as `orchestrion serve` speaks it.

Request parsing (with 400s that name the bad field), the conversation -> task prompt
rule, and the bodies of responses, stream chunks and errors. No web framework here:
:mod:`orchestrion.serve.server` does the HTTP.

Request
    ``model`` is ``orchestrion/<strategy>``. ``max_tokens`` (or ``max_completion_tokens``, the
    smaller if both) caps the *answer's* tokens, as on any OpenAI-compatible server: it becomes
    the strategy option ``max_tokens`` (the output limit of answer and synthesis calls). The
    episode's *budget* is separate: the extension field ``orchestrion`` (official client:
    ``extra_body={"orchestrion": {...}}``) takes ``budget`` (any :class:`~orchestrion.Budget`
    field, as ``--budget``: ``tokens`` is input plus output tokens over every model call of the
    episode) and ``options`` (strategy options, as ``orchestrion run --set``). With
    ``--max-tokens-cap N`` a request without a token budget gets N, and one asking for more
    than N (budget or ``max_tokens``) gets a 400.
    ``response_format`` ``{"type": "json_object"}`` or ``{"type": "json_schema", "json_schema":
    {"schema": ...}}`` makes the answer one JSON value (the synthesis writes it through the
    structured-output path: constrained decoding where the backend has it, else the schema in
    the prompt and bounded repairs; the type and required keys are checked). ``tools`` (function
    calling) is refused with a 400: a strategy chooses and runs its own tools. Other OpenAI
    fields (temperature, top_p, ...) are accepted and ignored; ``n`` must be 1.

Conversation -> task prompt
    The last ``user`` message is the task. With nothing before it, the prompt is exactly its
    text. Otherwise earlier messages become context, in this layout::

        Instructions:
        <system and developer messages, in order, blank-line separated>

        Conversation so far:
        User: <text>
        Assistant: <text>
        Tool result (name): <text>

        Current request:
        <the last user message>

    Messages after the last user message are ignored. Content may be a string or a list of
    parts; only ``text`` parts are read.

Response
    A ``chat.completion``; ``usage`` is the episode's total over all its model calls;
    ``finish_reason`` is ``length`` when the episode stopped on its budget or the answer was
    cut at ``max_tokens``, else ``stop``.
    An episode that ran is a 200 unless it ended in ``error``: the headers
    ``X-Orchestrion-Trace-Id`` and ``X-Orchestrion-Status`` and the body field
    ``orchestrion`` = {trace_id, status, error, strategy, cost_usd, wall_s} say how it went.
    One that ended in ``error`` is a 502 error body (code ``episode_failed``; streamed: an
    ``error`` event before ``[DONE]``), unless ``--errors-as-200`` or the request's
    ``orchestrion.errors_as_200`` asks for the 200 (see :mod:`orchestrion.serve._failures`).
    No upstream URL or key is ever sent.

Streaming (``stream: true``)
    ``text/event-stream`` of ``chat.completion.chunk`` events, each with one choice:

    1. ``delta: {role: assistant, content: ""}``, with ``orchestrion.trace_id``;
    2. progress as it happens: chunks with an empty delta and ``orchestrion.progress`` =
       {event: start|end, span_id, parent_id, kind, name, status, t} (``end`` adds
       duration_s, input_tokens, output_tokens; ``t`` is seconds since the episode began),
       one per start and end of each span (round, decision, call, tool, agent, subagent,
       step, node, answer, ...), sent as the trace store commits it (the server subscribes
       to the store's in-process event bus before the episode starts);
    3. the answer as content deltas, token by token while the synthesis model writes it
       (grounded as it goes: the deltas joined are exactly the final answer). The progress
       of the answer's own spans may arrive between them. A strategy that answers without
       a synthesis has its answer sent in word-sized deltas once it is known;
    4. an empty delta with ``finish_reason`` and the ``orchestrion`` summary above (its
       ``status`` is the episode's);
    5. with ``stream_options.include_usage``: a usage chunk with no choices;
    6. ``data: [DONE]``.

    Silent stretches get ``: keep-alive`` comment lines. The trace id is also a header; the
    status comes in chunk 4. An Orchestrion error after the stream began is sent as
    ``data: {"error": {...}}`` (the official client raises it), then ``[DONE]``.

Errors
    ``{"error": {message, type, param, code}}``: 400 malformed body, ``tools``, or a token
    budget over the cap, 401 a missing or wrong ``Authorization: Bearer`` key (with ``--api-key-env``),
    404 unknown model or path, 413 a body over ``--max-body-kb``, 429 more than
    ``--max-concurrent`` episodes in flight (with ``Retry-After``), 502 an episode that ended in
    ``error``, 500 an error outside the episode, as one line.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..models.types import Usage
from ..runtime.budget import Budget
from ..runtime.episode import EpisodeResult
from ..status import EpisodeStatus
from ..strategies.registry import strategies
from ..trace.bus import EventType, TraceEvent

MODEL_PREFIX = "orchestrion/"


class ApiError(Exception):
    """An error returned to the client as ``{"error": {message, type, param, code}}``."""

    def __init__(self, status: int, message: str, *, code: str, type: str = "invalid_request_error",
                 param: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, code=self.code, param=self.param)


def error_body(message: str, *, type: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


# -- request ----------------------------------------------------------------------
class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class OrchestrionExtra(BaseModel):
    """The ``orchestrion`` request field (with the official client: ``extra_body={"orchestrion": {...}}``)."""

    model_config = ConfigDict(extra="forbid")

    options: dict[str, Any] = Field(default_factory=dict, description="strategy options, as `--set KEY=VALUE`")
    budget: Budget = Field(default_factory=Budget, description="episode budget, as `--budget NAME=VALUE`")
    errors_as_200: bool | None = Field(
        default=None, description="an episode ending in error answers 200 with orchestrion.status 'error' "
                                  "instead of a 502 error body (default: the server's --errors-as-200)")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str | None = None
    schema_: dict[str, Any] = Field(default_factory=lambda: {"type": "object"}, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class ChatRequest(BaseModel):
    """The fields serve reads; other OpenAI fields (temperature, top_p, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    max_completion_tokens: int | None = Field(default=None, gt=0)
    n: int | None = None
    response_format: ResponseFormat | None = None
    tools: list[dict[str, Any]] | None = None
    orchestrion: OrchestrionExtra = Field(default_factory=OrchestrionExtra)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def json_schema(self) -> dict[str, Any] | None:
        """The JSON schema the answer must follow (``response_format``), or None for text."""
        fmt = self.response_format
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return {"type": "object"}
        if fmt.json_schema is None:
            raise ApiError(400, "'response_format.json_schema': required when type is 'json_schema'",
                           code="invalid_request", param="response_format.json_schema")
        return fmt.json_schema.schema_


def parse_request(body: bytes) -> ChatRequest:
    """The request, or an :class:`ApiError` 400 naming the bad field."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(raw, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    try:
        req = ChatRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "body"
        raise ApiError(400, f"'{where}': {first['msg']}", code="invalid_request", param=where) from None
    if req.n not in (None, 1):
        raise ApiError(400, "'n': only n=1 is supported (one episode per request)", code="invalid_request", param="n")
    if req.tools:
        raise ApiError(400, "'tools': function calling is not supported: each orchestrion/<strategy> model runs "
                       "its own tools and answers with text; drop 'tools' (response_format json_object or "
                       "json_schema is supported for structured answers)", code="tools_not_supported", param="tools")
    req.json_schema  # noqa: B018 - a json_schema format without its schema is a 400 now, not later
    return req


def strategy_of(model: str) -> str:
    """The strategy a model id names, or a 404."""
    name = model[len(MODEL_PREFIX):] if model.startswith(MODEL_PREFIX) else ""
    if name not in strategies():
        known = ", ".join(MODEL_PREFIX + n for n in sorted(strategies()))
        raise ApiError(404, f"model '{model}' does not exist; the models are: {known}",
                       code="model_not_found", param="model")
    return name


def episode_budget(req: ChatRequest, cap: int | None) -> Budget:
    """The episode's budget: ``orchestrion.budget``, its tokens defaulting to the cap (a 400 over it)."""
    extra = req.orchestrion.budget
    tokens = cap if extra.tokens is None else extra.tokens
    if cap is not None and tokens is not None and tokens > cap:
        raise ApiError(400, f"orchestrion.budget.tokens {tokens} is over this server's per-request cap of {cap}; "
                       f"ask for {cap} or fewer", code="max_tokens_over_cap", param="orchestrion.budget.tokens")
    return extra.model_copy(update={"tokens": tokens})


def episode_options(req: ChatRequest, cap: int | None) -> dict[str, Any]:
    """The strategy options: ``orchestrion.options`` with ``max_tokens`` (the answer's token limit)
    lowered to the request's ``max_tokens`` / ``max_completion_tokens`` (a 400 over the cap)."""
    options = dict(req.orchestrion.options)
    asked = [t for t in (req.max_tokens, req.max_completion_tokens) if t is not None]
    if asked:
        limit = min(asked)
        if cap is not None and limit > cap:
            raise ApiError(400, f"max_tokens {limit} is over this server's per-request cap of {cap}; "
                           f"ask for {cap} or fewer", code="max_tokens_over_cap", param="max_tokens")
        given = options.get("max_tokens")
        options["max_tokens"] = min(limit, given) if isinstance(given, int) else limit
    return options


def server_error(exc: BaseException) -> ApiError:
    """A 500 whose message is the error's first line."""
    line = (str(exc).splitlines() or [type(exc).__name__])[0]
    return ApiError(500, line, type="server_error", code="orchestrion_error")


# -- conversation -> task prompt ------------------------------------------------------
def text_of(message: ChatMessage) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")


def task_prompt(messages: list[ChatMessage]) -> str:
    """The task prompt for a conversation (see the module docstring)."""
    last = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    if last is None:
        raise ApiError(400, "'messages': there is no message with role 'user' to answer",
                       code="invalid_request", param="messages")
    request = text_of(messages[last]).strip()
    if not request:
        raise ApiError(400, f"'messages.{last}.content': the last user message has no text",
                       code="invalid_request", param=f"messages.{last}.content")
    instructions = [text_of(m).strip() for m in messages[:last] if m.role in ("system", "developer")]
    turns = [_turn(m) for m in messages[:last] if m.role not in ("system", "developer")]
    parts = []
    if any(instructions):
        parts.append("Instructions:\n" + "\n\n".join(t for t in instructions if t))
    if turns:
        parts.append("Conversation so far:\n" + "\n".join(turns))
    if not parts:
        return request
    return "\n\n".join([*parts, "Current request:\n" + request])


def _turn(message: ChatMessage) -> str:
    if message.role in ("tool", "function"):
        label = f"Tool result ({message.name})" if message.name else "Tool result"
    else:
        label = message.role.capitalize()
    return f"{label}: {text_of(message).strip()}"


# -- responses ----------------------------------------------------------------------------
def usage_body(usage: Usage) -> dict[str, int]:
    return {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens}


def finish_reason(status: str, answer_finish: str | None = None) -> str:
    """``length`` for a budget stop or an answer cut at its token limit, else ``stop``."""
    return "length" if status == EpisodeStatus.BUDGET_EXCEEDED or answer_finish == "length" else "stop"


def completion_body(cid: str, created: int, model: str, answer: str, status: str, usage: Usage,
                    ext: dict[str, Any], answer_finish: str | None = None) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                     "finish_reason": finish_reason(status, answer_finish), "logprobs": None}],
        "usage": usage_body(usage),
        "orchestrion": ext,
    }


def chunk_body(cid: str, created: int, model: str, delta: dict[str, Any] | None = None, *,
               finish: str | None = None, ext: dict[str, Any] | None = None,
               usage: Usage | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` gives the usage chunk (no choices)."""
    body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
    body["choices"] = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
    if usage is not None:
        body["usage"] = usage_body(usage)
    if ext is not None:
        body["orchestrion"] = ext
    return body


def episode_summary(result: EpisodeResult) -> dict[str, Any]:
    """The ``orchestrion`` field of a finished response."""
    return {"trace_id": result.trace_id, "status": result.status, "error": result.error,
            "strategy": result.strategy, "cost_usd": result.cost_usd, "wall_s": round(result.wall_s, 3)}


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
