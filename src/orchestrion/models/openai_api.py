"""The ``openai-api`` backend: any OpenAI-compatible chat-completions server.

Speaks the wire protocol over aiohttp + orjson (the official SDK costs 2-3 ms CPU per
call): one lazily made ``ClientSession`` per event loop, unbounded connection pool.
Each failure is a one-line :class:`ModelError`: a 4xx other than 429 fails at once; 429,
5xx, connection errors and timeouts are retried with exponential backoff and jitter
(``Retry-After`` honoured, capped; one asking for more than ``timeout_s`` fails at once), each
retry logged as one warning line, then raise :class:`ModelUnavailableError`. A timeout
is not retried (a hung server hangs again), so with the defaults (45 s per request, 10 s
to connect, 3 retries) a dead or hung server fails in under a minute. An HTTP
error status is a :class:`ModelHTTPError` carrying ``status``, ``body`` and ``retryable``.
A missing API-key variable is a :class:`ConfigError`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from yarl import URL

from .._errors import ConfigError, ModelError, ModelHTTPError, ModelUnavailableError
from . import _openai_wire as wire
from .cost import Price, cost_of
from .types import UNCONSTRAINED_MODES, Completion, GenerateConfig, Message, StructuredMode, Usage

if TYPE_CHECKING:
    from .spec import ModelSpec

_AUTO_ORDER: tuple[str, ...] = ("json_schema", "json_object", "prompt")
_FALLBACK_HINTS = ("response_format", "json_schema", "json_object", "structured", "guided", "grammar")
_JSON_HEADERS = {"Content-Type": "application/json"}
# A hung server fails after one DEFAULT_TIMEOUT_S and a black-holed one after one CONNECT_TIMEOUT_S
# (timeouts are not retried); a refused connection is retried with capped backoff: all under a minute.
DEFAULT_TIMEOUT_S = 45.0
CONNECT_TIMEOUT_S = 10.0
# the error aiohttp raises when sock_connect runs out (aiohttp >= 3.10; older ones raise a plain timeout)
_CONNECT_TIMEOUT: type[BaseException] = getattr(aiohttp, "ConnectionTimeoutError", type("_Never", (Exception,), {}))
log = logging.getLogger(__name__)
_HINTS = {
    401: "; check the API key in {key}",
    403: "; check the API key in {key}",
    404: "; check base_url and the model id '{model}'",
}


class OpenAIAPIModel:
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``structured`` picks how ``GenerateConfig.json_schema`` is enforced:
    ``json_schema`` (``response_format`` with the schema), ``json_object`` (JSON mode
    plus the schema in the system prompt), ``json_object_schema`` (JSON mode with the
    schema in ``response_format``, as llama-cpp-python's server takes it; also in the
    prompt), ``prompt`` (schema in the system prompt only) or ``auto`` (json_schema,
    then json_object, then prompt, moving on after a rejecting 400 and remembering the
    first that works). ``extra_body`` is merged into every request, e.g.
    ``{"return_token_ids": True}`` for vLLM token ids.
    """

    constrains_json: bool = True

    def __init__(
        self, name: str, base_url: str, *, model: str | None = None, api_key_env: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S, max_retries: int = 3, structured: StructuredMode = "auto",
        price: Price | None = None, backoff_s: float = 0.5, max_backoff_s: float = 8.0,
        max_retry_after_s: float = 30.0, extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self._url = URL(self.url)
        if self._url.scheme not in ("http", "https") or not self._url.host:
            raise ConfigError(f"model '{name}': base_url '{base_url}' must look like http://HOST:PORT/v1")
        self.server_model = model or name
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.structured: StructuredMode = structured
        self.price = price
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_retry_after_s = max_retry_after_s
        self.extra_body = dict(extra_body or {})
        self.constrains_json = structured not in UNCONSTRAINED_MODES
        self._auto_mode = _AUTO_ORDER[0]
        self._auto_confirmed = False
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(CONNECT_TIMEOUT_S, timeout_s))
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None

    @property
    def structured_mode(self) -> str:
        """The mode the next schema-constrained call starts with (``auto`` resolved)."""
        return self._auto_mode if self.structured == "auto" else self.structured

    # -- public API -----------------------------------------------------------------
    async def complete(self, messages: Sequence[Message], config: GenerateConfig) -> Completion:
        """One completion (streamed when ``config.on_text`` wants the pieces); raises a
        :class:`ModelError` subclass on failure."""
        if config.on_text is not None:
            return await self._complete_streamed(messages, config, config.on_text)
        start = time.perf_counter()
        _, raw, mode = await self._post(messages, config, stream=False)
        return self._parse(raw, config, mode, start)

    def stream(self, messages: Sequence[Message], config: GenerateConfig) -> ChatStream:
        """Stream one completion: ``async for piece in model.stream(...)`` yields content deltas.

        The returned :class:`ChatStream` is an ``AsyncIterator[str]``; once it is
        exhausted its ``completion`` attribute holds the whole :class:`Completion`
        (joined text, usage from ``stream_options.include_usage``, latency, and
        ``extra["ttft_s"]``, the time to the first piece).
        """
        return ChatStream(self, messages, config)

    async def _complete_streamed(self, messages: Sequence[Message], config: GenerateConfig,
                                 on_text: Callable[[str], None]) -> Completion:
        """A streamed request whose pieces go to ``on_text`` as they arrive; the whole Completion."""
        async with self.stream(messages, config) as chat:
            async for piece in chat:
                on_text(piece)
        if chat.completion is None:
            raise ModelError(f"model '{self.name}' at {self.url}: the stream ended without a completion")
        return chat.completion

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is None or session.closed:
            return
        if self._session_loop is asyncio.get_running_loop():
            await session.close()
        else:  # made on a loop that has ended: it cannot be awaited from here
            session.detach()

    # -- transport ------------------------------------------------------------------
    def _get_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._session
        if session is None or session.closed or self._session_loop is not loop:
            if session is not None and not session.closed:
                session.detach()
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=30)
            session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
            self._session, self._session_loop = session, loop
        return session

    def _headers(self) -> dict[str, str]:
        if self.api_key_env is None:
            return _JSON_HEADERS
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(
                f"model '{self.name}': environment variable {self.api_key_env} (api_key_env) is not set;"
                f" export it with the API key for {self.base_url}"
            )
        return {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}

    async def _post(
        self, messages: Sequence[Message], config: GenerateConfig, *, stream: bool
    ) -> tuple[aiohttp.ClientResponse, bytes, str | None]:
        """Send with structured-mode fallback; return the open response, its body (if read) and the mode."""
        modes = self._modes(config)
        for i, mode in enumerate(modes):
            body = self._body(messages, config, mode, stream)
            try:
                resp, raw = await self._send(body, read=not stream)
            except ModelHTTPError as exc:
                if i + 1 < len(modes) and self._may_fall_back(exc):
                    continue
                raise
            if self.structured == "auto" and mode is not None:
                self._auto_mode, self._auto_confirmed = mode, True
            return resp, raw, mode
        raise ModelError(f"model '{self.name}' at {self.url}: no structured-output mode left to try")

    async def _send(self, body: bytes, *, read: bool) -> tuple[aiohttp.ClientResponse, bytes]:
        """POST with retries; return an OK response (closed and read when ``read``)."""
        session = self._get_session()
        headers = self._headers()
        kind, problem, delay, status, message = "unreachable", "", 0.0, 0, ""
        where = f"model '{self.name}' at {self.url}"
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            if attempt:  # one line per retry, so a wait is never silent
                log.warning("%s: %s; retry %d of %d in %.1fs", where, problem, attempt, attempts - 1, delay)
                await asyncio.sleep(delay)
            delay = min(self.max_backoff_s, self.backoff_s * 2**attempt) * (0.5 + random.random() / 2)
            try:
                resp = await session.post(self._url, data=body, headers=headers)
                if resp.status < 300:
                    if not read:
                        return resp, b""
                    async with resp:
                        return resp, await resp.read()
                async with resp:
                    message = wire.error_message(await resp.read(), resp.reason)
                if resp.status != 429 and resp.status < 500:
                    key = f"${self.api_key_env}" if self.api_key_env else "the variable named by api_key_env (none set)"
                    hint = _HINTS.get(resp.status, "").format(key=key, model=self.server_model)
                    text = f"model '{self.name}' at {self.url} rejected the request (HTTP {resp.status}): {message}"
                    raise ModelHTTPError(text + hint, resp.status, message, retryable=False)
                kind, problem, status = "failing", f"HTTP {resp.status}: {message}", resp.status
                wait = wire.retry_after(resp.headers, math.inf)
                if wait is not None and wait > self.timeout_s:  # waiting that long is not this call's to do
                    raise ModelHTTPError(
                        f"{where} answered {problem} and asks to wait {wait:g}s before a retry, longer than the "
                        f"call's timeout of {self.timeout_s:g}s (timeout_s); not retried", status, message, True)
                delay = delay if wait is None else min(wait, self.max_retry_after_s)
            except (aiohttp.ClientError, TimeoutError) as exc:
                kind = ("connect" if isinstance(exc, _CONNECT_TIMEOUT) else
                        "timeout" if isinstance(exc, TimeoutError) else "unreachable")
                problem = wire.one_line(str(exc) or type(exc).__name__)
                if kind != "unreachable":  # a hanging server hangs again: one wait of timeout_s, not one per retry
                    attempts = attempt + 1
                    break
        tries = f"{attempts} attempt" + ("s" if attempts > 1 else "")
        if kind == "connect":
            raise ModelUnavailableError(
                f"{where} accepted no connection within {self._timeout.sock_connect:g}s ({tries}); too many "
                "connections at once? lower max_concurrency for this model, or check that the host is reachable"
            )
        if kind == "timeout":
            raise ModelUnavailableError(
                f"{where} timed out after {self.timeout_s:g}s ({tries}); is the server overloaded or hung?"
                " raise timeout_s for this model"
            )
        if kind == "failing":
            raise ModelHTTPError(f"{where} kept failing after {attempts} attempts: {problem}", status, message, True)
        raise ModelUnavailableError(f"{where} is unreachable: {problem}; is the server running?")

    # -- request and response ---------------------------------------------------------
    def _modes(self, config: GenerateConfig) -> list[str | None]:
        if config.json_schema is None or self.structured == "none":
            return [None]
        if self.structured != "auto":
            return [self.structured]
        return list(_AUTO_ORDER[_AUTO_ORDER.index(self._auto_mode) :])

    def _may_fall_back(self, exc: ModelHTTPError) -> bool:
        if exc.retryable or exc.status not in (400, 422):
            return False
        lowered = exc.body.lower()
        return not self._auto_confirmed or any(h in lowered for h in _FALLBACK_HINTS)

    def _body(self, messages: Sequence[Message], config: GenerateConfig, mode: str | None, stream: bool) -> bytes:
        schema = config.json_schema
        msgs: list[Message] = list(messages)
        body: dict[str, Any] = {
            "model": self.server_model, "messages": msgs, "max_tokens": config.max_tokens,
            "temperature": config.temperature, "top_p": config.top_p,
        }
        if config.seed is not None:
            body["seed"] = config.seed
        if config.stop:
            body["stop"] = list(config.stop)
        if config.logprobs:
            body["logprobs"] = True
        if schema is not None and mode == "json_schema":
            name = re.sub(r"[^A-Za-z0-9_-]", "_", str(schema.get("title") or "output"))[:64]
            spec = {"name": name, "schema": schema, "strict": False}
            body["response_format"] = {"type": "json_schema", "json_schema": spec}
        elif schema is not None and mode is not None:
            body["messages"] = wire.with_schema_prompt(msgs, schema)
            if mode == "json_object":
                body["response_format"] = {"type": "json_object"}
            elif mode == "json_object_schema":  # llama-cpp-python's server: the schema becomes a grammar
                body["response_format"] = {"type": "json_object", "schema": schema}
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        body.update(self.extra_body)
        return orjson.dumps(body)

    def _parse(self, raw: bytes, config: GenerateConfig, mode: str | None, start: float) -> Completion:
        try:
            obj = orjson.loads(raw)
            choice = obj["choices"][0]
            text = (choice.get("message") or {}).get("content") or ""
            finish = choice.get("finish_reason") or "stop"
            if not isinstance(text, str) or not isinstance(finish, str):
                raise TypeError(text)
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
            raise self._invalid(raw) from None
        prompt_ids = obj.get("prompt_token_ids") or choice.get("prompt_token_ids")
        return Completion(
            text, self.name, self._usage(obj.get("usage")), time.perf_counter() - start, finish,
            prompt_token_ids=wire.ints(prompt_ids), token_ids=wire.ints(choice.get("token_ids")),
            logprobs=wire.logprobs(choice.get("logprobs")) if config.logprobs else None,
            structured_mode=mode, extra={"server_model": obj.get("model"), **wire.cached_prompt(obj.get("usage"))},
        )

    def _usage(self, usage: Any) -> Usage:
        if not isinstance(usage, dict):  # tokens unknown, so the cost is unknown too
            return Usage(cost_usd=None, calls=1)
        n_in, n_out = usage.get("prompt_tokens"), usage.get("completion_tokens")
        n_in, n_out = (n_in if isinstance(n_in, int) else 0), (n_out if isinstance(n_out, int) else 0)
        return Usage(input_tokens=n_in, output_tokens=n_out, cost_usd=cost_of(self.price, n_in, n_out), calls=1)

    def _invalid(self, raw: bytes) -> ModelError:
        detail = wire.error_message(raw, "empty body")
        return ModelError(f"model '{self.name}' at {self.url} returned an invalid response: {detail}")

    async def _stream(
        self, messages: Sequence[Message], config: GenerateConfig, handle: ChatStream
    ) -> AsyncGenerator[str, None]:
        """The content deltas of a streamed request; ``handle.completion`` once it ended. A reply
        that is not an event stream is read whole: a JSON completion (a server that ignores
        ``stream``) is one piece, anything else an invalid response; so is a stream that carries
        no choice at all."""
        start = time.perf_counter()
        resp, _, mode = await self._post(messages, config, stream=True)
        state, ttft = wire.StreamState(), None
        try:
            async with resp:
                if not wire.is_sse(resp.content_type):
                    raw = await resp.read()
                    if not wire.is_sse(resp.content_type, raw):
                        whole = self._parse(raw, config, mode, start)
                        if whole.text:
                            yield whole.text
                        whole.extra["ttft_s"] = whole.latency_s if whole.text else None
                        handle.completion = whole
                        return
                    payloads: AsyncIterator[bytes] = _each(wire.sse_payloads(raw))
                else:
                    payloads = wire.sse_data(resp)
                async for data in payloads:
                    try:
                        piece = state.feed(data)
                    except wire.InvalidChunk:
                        raise self._invalid(data) from None
                    if piece:
                        ttft = time.perf_counter() - start if ttft is None else ttft
                        yield piece
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ModelUnavailableError(
                f"model '{self.name}' at {self.url} broke off the stream: "
                f"{wire.one_line(str(exc) or type(exc).__name__)}"
            ) from None
        if not state.choices:
            raise ModelError(f"model '{self.name}' at {self.url} returned an invalid response: "
                             "the stream carried no choice")
        handle.completion = Completion(
            "".join(state.pieces), self.name, self._usage(state.usage), time.perf_counter() - start, state.finish,
            token_ids=state.token_ids or None, logprobs=state.logprobs if config.logprobs else None,
            structured_mode=mode, extra={"ttft_s": ttft, **wire.cached_prompt(state.usage)},
        )


async def _each(items: Sequence[bytes]) -> AsyncIterator[bytes]:
    for item in items:
        yield item


class ChatStream:
    """The content deltas of one streamed completion, as an ``AsyncIterator[str]``.

    ``completion`` is ``None`` until the stream ends, then the whole
    :class:`Completion`. Close it (``aclose()`` or ``async with``) if you stop early.
    """

    def __init__(self, model: OpenAIAPIModel, messages: Sequence[Message], config: GenerateConfig) -> None:
        self.completion: Completion | None = None
        self._gen = model._stream(messages, config, self)

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> str:
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        await self._gen.aclose()

    async def __aenter__(self) -> ChatStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def from_spec(spec: ModelSpec) -> OpenAIAPIModel:
    """Build the backend for one ``openai-api`` pool entry."""
    if not spec.base_url:
        raise ConfigError(f"model '{spec.name}': an openai-api model needs base_url (e.g. http://127.0.0.1:8000/v1)")
    return OpenAIAPIModel(
        spec.name, spec.base_url, model=spec.model or spec.name, api_key_env=spec.api_key_env,
        timeout_s=spec.timeout_s, max_retries=spec.max_retries, structured=spec.structured, price=spec.price,
        extra_body=spec.extra_body,
    )
