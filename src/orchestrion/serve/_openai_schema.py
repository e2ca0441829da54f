"""The OpenAI chat-completions request, as `orchestrion serve` reads it.

Request parsing (with 400s that name the bad field, in OpenAI's error shape) and the
conversation -> task prompt rule. The bodies of responses and stream chunks are in
:mod:`orchestrion.serve._bodies`, what happens to each request field in
:mod:`orchestrion.serve._fields`. No web framework here: :mod:`orchestrion.serve.server` does
the HTTP.

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
    the prompt and bounded repairs; the type and required keys are checked). ``tools`` are client
    tools the strategy may call (:mod:`orchestrion.serve._client_tools`). ``stop`` cuts the
    answer (:mod:`orchestrion.serve._stop`), ``seed`` seeds the episode. Every other field of
    OpenAI's schema is typed (a bad type is a 400) and either honoured, refused with a 400 that
    says why, or accepted and ignored for a stated reason, listed back in the response
    (:mod:`orchestrion.serve._fields`); fields no OpenAI schema has are listed back as ignored.

Conversation -> task prompt
    See :mod:`orchestrion.serve._conversation`; client tools (``tools``, ``tool_choice``,
    ``parallel_tool_calls``) in :mod:`orchestrion.serve._client_tools`.

Errors
    ``{"error": {message, type, param, code}}``: 400 malformed body, a malformed tool, or a token
    budget over the cap, 401 a missing or wrong ``Authorization: Bearer`` key (with ``--api-key-env``),
    404 unknown model or path, 413 a body over ``--max-body-kb``, 429 more than
    ``--max-concurrent`` episodes in flight (with ``Retry-After``), 502 an episode that ended in
    ``error``, 503 a trace store that cannot write (``trace_store_failing``, with ``Retry-After``;
    ``/health`` then says ``failing``) or a server shutting down (``cancelled`` for the episodes
    it stopped, ``shutting_down`` for new requests), 403 another Host or Origin on a server
    without a key (``forbidden_host``), 500 an error outside the episode, as one line.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from ..runtime.budget import Budget
from ..runtime.client_tools import ClientToolSpec
from ..strategies.registry import strategies
from ._api_error import ApiError as ApiError
from ._api_error import error_body as error_body
from ._conversation import TEXT_PARTS as TEXT_PARTS
from ._conversation import ChatMessage as ChatMessage
from ._conversation import check_tool_messages
from ._conversation import task_prompt as task_prompt
from ._conversation import text_of as text_of
from ._fields import CHAT_FIELDS, LEGACY_CHOICE, Rule, screen, unread_keys
from ._tool_spec import tool_spec

MODEL_PREFIX = "orchestrion/"
PART_KEYS = frozenset({"type", "text", "refusal"})  # what is read of a content part
M = TypeVar("M", bound=BaseModel)


# -- request ----------------------------------------------------------------------
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
    include_progress: bool = Field(False, description="Orchestrion: stream a progress chunk per span start and "
                                   "end (also the header X-Orchestrion-Progress: true)")


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str | None = None
    schema_: dict[str, Any] = Field(default_factory=lambda: {"type": "object"}, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


def _about(name: str, rules: dict[str, Rule] = CHAT_FIELDS) -> str:
    rule = rules[name]
    return f"{rule.fate}: {rule.note}"


def _field(name: str, default: Any = None, **kw: Any) -> Any:
    return Field(default, description=_about(name), **kw)


class ChatRequest(BaseModel):
    """A chat-completions request: every field of OpenAI's schema, typed; what serve does with
    each is in its description (:data:`orchestrion.serve._fields.CHAT_FIELDS`)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description=_about("model"))
    messages: list[ChatMessage] = Field(min_length=1, description=_about("messages"))
    stream: bool = _field("stream", False)
    stream_options: StreamOptions | None = _field("stream_options")
    max_tokens: int | None = _field("max_tokens", gt=0)
    max_completion_tokens: int | None = _field("max_completion_tokens", gt=0)
    n: int | None = _field("n", ge=1)
    stop: str | list[str] | None = _field("stop")
    seed: int | None = _field("seed")
    response_format: ResponseFormat | None = _field("response_format")
    modalities: list[Literal["text", "audio"]] | None = _field("modalities")
    tools: list[dict[str, Any]] | None = _field("tools")
    functions: list[dict[str, Any]] | None = _field("functions")
    tool_choice: str | dict[str, Any] | None = _field("tool_choice")
    function_call: str | dict[str, Any] | None = _field("function_call")
    parallel_tool_calls: bool | None = _field("parallel_tool_calls")
    logprobs: bool | None = _field("logprobs")
    top_logprobs: int | None = _field("top_logprobs", ge=0, le=20)
    logit_bias: dict[str, float] | None = _field("logit_bias")
    frequency_penalty: float | None = _field("frequency_penalty", ge=-2, le=2)
    presence_penalty: float | None = _field("presence_penalty", ge=-2, le=2)
    temperature: float | None = _field("temperature", ge=0, le=2)
    top_p: float | None = _field("top_p", ge=0, le=1)
    audio: dict[str, Any] | None = _field("audio")
    web_search_options: dict[str, Any] | None = _field("web_search_options")
    reasoning_effort: str | None = _field("reasoning_effort")
    verbosity: Literal["low", "medium", "high"] | None = _field("verbosity")
    prediction: dict[str, Any] | None = _field("prediction")
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
    _ignored: list[str] = PrivateAttr(default_factory=list)
    _spec: ClientToolSpec | None = PrivateAttr(default=None)

    @property
    def client_tools(self) -> ClientToolSpec | None:
        """The client tools offered (``tools``, ``tool_choice``, ``parallel_tool_calls``), checked."""
        return self._spec

    @property
    def ignored(self) -> list[str]:
        """The fields the client sent that had no effect (see :mod:`orchestrion.serve._fields`)."""
        return self._ignored

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def include_progress(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_progress

    @property
    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def recorded(self) -> dict[str, Any]:
        """What the client said about itself, kept in the episode's task metadata."""
        found = {"metadata": self.metadata, "user": self.user, "safety_identifier": self.safety_identifier}
        return {k: v for k, v in found.items() if v is not None}

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


def validated(cls: type[M], body: bytes) -> M:
    """The JSON ``body`` as a ``cls``, or an :class:`ApiError` 400 naming the bad field."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(raw, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "body"
        raise ApiError(400, f"'{where}': {first['msg']}", code="invalid_request", param=where) from None


def screened(req: BaseModel, rules: dict[str, Rule]) -> list[str]:
    """The ignored fields of ``req``; a 400 for the first refused one."""
    ignored, refused = screen(req, rules)
    if refused is not None:
        name, why = refused
        code = "tools_not_supported" if name in ("tools", "functions") else "unsupported_value"
        raise ApiError(400, f"'{name}': {why}", code=code, param=name)
    return ignored


def parse_request(body: bytes) -> ChatRequest:
    """The request, or an :class:`ApiError` 400 naming the bad field or the refused value."""
    req = validated(ChatRequest, body)
    req._ignored = screened(req, CHAT_FIELDS)
    if any(not s for s in req.stops):
        raise ApiError(400, "'stop': an empty stop string would end every answer before it starts",
                       code="invalid_request", param="stop")
    for i, message in enumerate(req.messages):
        req._ignored += check_parts(message.content, f"messages.{i}.content")
    check_tool_messages(req.messages)
    if req.function_call is not None and req.tools:  # the legacy choice beside tools: tool_choice says it
        raise ApiError(400, f"'function_call': {LEGACY_CHOICE}", code="unsupported_value", param="function_call")
    req._spec = tool_spec(req.tools, req.tool_choice, req.parallel_tool_calls)
    req.json_schema  # noqa: B018 - a json_schema format without its schema is a 400 now, not later
    return req


def check_parts(content: Any, where: str) -> list[str]:
    """A 400 for a content part that is not text (the pool's models read text); the keys of the
    parts that are not read (listed back as ignored)."""
    unread = []
    for j, part in enumerate(content if isinstance(content, list) else []):
        kind = part.get("type")
        if kind not in TEXT_PARTS:
            raise ApiError(400, f"'{where}.{j}': a {kind!r} part cannot be read: the pool's models read text, "
                           "send text parts only", code="unsupported_content", param=f"{where}.{j}")
        unread += unread_keys(part, PART_KEYS, f"{where}.{j}")
    return unread


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
    lowered to the request's ``max_tokens`` / ``max_completion_tokens`` (a 400 over the cap), and
    ``seed`` from the request's unless the options set one."""
    options = dict(req.orchestrion.options)
    if req.seed is not None:
        options.setdefault("seed", req.seed)
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
