"""The OpenAI chat-completions wire format, as `orchestrion serve` speaks it.

Request parsing (with 400s that name the bad field), the conversation -> task prompt
rule, and the bodies of responses, stream chunks and errors. No web framework here:
:mod:`orchestrion.serve.server` does the HTTP.

Request
    ``model`` is ``orchestrion/<strategy>``. ``max_tokens`` (or ``max_completion_tokens``) is
    the episode's token *budget*: input plus output tokens over every model call of the
    episode. With ``--max-tokens-cap N`` a request without a limit gets N, and one asking for
    more than N gets a 400. The extension field ``orchestrion`` (official client:
    ``extra_body={"orchestrion": {...}}``) takes ``options`` (strategy options, as
    ``orchestrion run --set``) and ``budget`` (any :class:`~orchestrion.Budget` field, as
    ``--budget``; its ``tokens`` and ``max_tokens`` combine to the smaller). Other OpenAI
    fields (temperature, tools, response_format, ...) are accepted and ignored; ``n`` must be 1.

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
    ``finish_reason`` is ``length`` when the episode stopped on its budget, else ``stop``.
    Every episode that ran is a 200 whatever its status: the headers
    ``X-Orchestrion-Trace-Id`` and ``X-Orchestrion-Status`` and the body field
    ``orchestrion`` = {trace_id, status, error, strategy, cost_usd, wall_s} say how it went.

Streaming (``stream: true``)
    ``text/event-stream`` of ``chat.completion.chunk`` events, each with one choice:

    1. ``delta: {role: assistant, content: ""}``, with ``orchestrion.trace_id``;
    2. progress as it happens: chunks with an empty delta and ``orchestrion.progress`` =
       {event: start|end, span_id, parent_id, kind, name, status, t} (``end`` adds
       duration_s, input_tokens, output_tokens; ``t`` is seconds since the episode began),
       one per start and end of each span (round, decision, call, tool, agent, subagent,
       step, node, ...), read from the trace store as it is committed;
    3. the answer as one content delta;
    4. an empty delta with ``finish_reason`` and the ``orchestrion`` summary above;
    5. with ``stream_options.include_usage``: a usage chunk with no choices;
    6. ``data: [DONE]``.

    Silent stretches get ``: keep-alive`` comment lines. The trace id is also a header; the
    status comes in chunk 4. An Orchestrion error after the stream began is sent as
    ``data: {"error": {...}}`` (the official client raises it), then ``[DONE]``.

Errors
    ``{"error": {message, type, param, code}}``: 400 malformed body or a token budget over
    the cap, 401 a missing or wrong ``Authorization: Bearer`` key (with ``--api-key-env``),
    404 unknown model or path, 413 a body over ``--max-body-kb``, 429 more than
    ``--max-concurrent`` episodes in flight (with ``Retry-After``), 500 an Orchestrion error
    outside the episode, as one line.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..api import EpisodeResult
from ..models._types import Usage
from ..runtime.budget import Budget
from ..strategies.base import strategies

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


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatRequest(BaseModel):
    """The fields serve reads; other OpenAI fields (temperature, tools, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    max_completion_tokens: int | None = Field(default=None, gt=0)
    n: int | None = None
    orchestrion: OrchestrionExtra = Field(default_factory=OrchestrionExtra)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


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
    """The request's budget: ``orchestrion.budget`` with tokens = the smallest limit asked, or the cap."""
    extra = req.orchestrion.budget
    asked = [t for t in (req.max_tokens, req.max_completion_tokens, extra.tokens) if t is not None]
    tokens = min(asked) if asked else cap
    if cap is not None and tokens is not None and tokens > cap:
        raise ApiError(400, f"max_tokens {tokens} is over this server's per-request cap of {cap}; "
                       f"ask for {cap} or fewer", code="max_tokens_over_cap", param="max_tokens")
    return extra.model_copy(update={"tokens": tokens})


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


def finish_reason(status: str) -> str:
    return "length" if status == "budget_exceeded" else "stop"


def completion_body(cid: str, created: int, model: str, answer: str, status: str, usage: Usage,
                    ext: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                     "finish_reason": finish_reason(status), "logprobs": None}],
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


class SpanProgress:
    """Turns an episode's span rows, read again and again, into start/end events, each sent once.

    Rows need: id, parent_id, kind, name, status, started, ended, input_tokens, output_tokens.
    """

    def __init__(self, episode_started: float) -> None:
        self.t0 = episode_started
        self.seen: dict[str, bool] = {}  # span id -> ended already reported

    def feed(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for r in rows:
            ended = self.seen.get(r["id"])
            base = {"span_id": r["id"], "parent_id": r["parent_id"], "kind": r["kind"], "name": r["name"]}
            if ended is None:
                events.append({"event": "start", **base, "status": "running", "t": round(r["started"] - self.t0, 3)})
            if r["ended"] is not None and not ended:
                events.append({"event": "end", **base, "status": r["status"], "t": round(r["ended"] - self.t0, 3),
                               "duration_s": round(r["ended"] - r["started"], 3),
                               "input_tokens": r["input_tokens"], "output_tokens": r["output_tokens"]})
            self.seen[r["id"]] = r["ended"] is not None
        return events


def sse(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data, default=str) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
SSE_KEEPALIVE = b": keep-alive\n\n"
