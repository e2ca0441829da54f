"""Wire helpers of the ``openai-api`` backend: SSE framing, what the chunks of a stream add up
to, error bodies, ``Retry-After``, token ids and log-probs out of a response, and the schema note
for prompt-mode JSON."""

from __future__ import annotations

import email.utils
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import aiohttp
import orjson

from .types import Message, msg

_DONE = b"[DONE]"


def _payload(line: bytes) -> bytes | None:
    """The payload of one ``data:`` line (None for any other line)."""
    return line[5:].strip() if line.startswith(b"data:") else None


async def sse_data(resp: aiohttp.ClientResponse) -> AsyncGenerator[bytes, None]:
    """The payloads of ``data:`` lines, up to ``[DONE]`` or the end of the body."""
    buf = b""
    async for chunk in resp.content.iter_any():
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            data = _payload(line)
            if data == _DONE:
                return
            if data:
                yield data
    data = _payload(buf)
    if data and data != _DONE:
        yield data


def is_sse(content_type: str, raw: bytes | None = None) -> bool:
    """Whether a response is a server-sent event stream: by its Content-Type, or (for a body read
    whole, ``raw``) by its first line, for a server that streams under another type."""
    if content_type.lower() == "text/event-stream":
        return True
    return raw is not None and raw.lstrip().startswith((b"data:", b":", b"event:", b"id:", b"retry:"))


def sse_payloads(raw: bytes) -> list[bytes]:
    """The ``data:`` payloads of a whole SSE body, up to ``[DONE]``."""
    found = []
    for line in raw.split(b"\n"):
        data = _payload(line)
        if data == _DONE:
            break
        if data:
            found.append(data)
    return found


class InvalidChunk(ValueError):
    """A stream event that is not a chat-completion chunk."""


class StreamState:
    """What the chunks of one streamed completion add up to.

    ``choices`` counts the chunks that carried a choice: a stream with none (``choices: []``
    throughout, or no chunk at all) answered nothing, which the caller reports as an invalid
    response rather than an empty answer."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.logprobs: list[float] = []
        self.token_ids: list[int] = []
        self.usage: Any = None  # in the last chunk, with stream_options.include_usage
        self.finish = "stop"
        self.choices = 0

    def feed(self, data: bytes) -> str:
        """The content delta of one ``data:`` payload ("" when it has none); :class:`InvalidChunk`
        when the payload is not a chunk (an error event included)."""
        try:
            event = orjson.loads(data)
            if not isinstance(event, dict) or event.get("error"):
                raise InvalidChunk
            self.usage = event.get("usage") or self.usage
            choices = event.get("choices")
            if choices is None or choices == []:
                return ""
            choice = choices[0]
            self.choices += 1
            self.finish = choice.get("finish_reason") or self.finish
            self.logprobs.extend(logprobs(choice.get("logprobs")) or ())
            self.token_ids.extend(ints(choice.get("token_ids")) or ())
            piece = (choice.get("delta") or {}).get("content") or ""
        except (ValueError, AttributeError, TypeError, KeyError, IndexError):  # incl. JSONDecodeError
            raise InvalidChunk from None
        if not isinstance(piece, str):
            raise InvalidChunk
        if piece:
            self.pieces.append(piece)
        return piece


def with_schema_prompt(messages: list[Message], schema: dict[str, Any]) -> list[Message]:
    note = (
        "Reply with a single JSON value and nothing else (no prose, no code fences)."
        " It must match this JSON Schema:\n" + orjson.dumps(schema).decode()
    )
    out = list(messages)
    if out and out[0]["role"] == "system":
        out[0] = msg("system", out[0]["content"] + "\n\n" + note)
    else:
        out.insert(0, msg("system", note))
    return out


def error_message(raw: bytes, default: str | None) -> str:
    """The server's error text from an OpenAI, vLLM or FastAPI style error body."""
    text = raw.decode("utf-8", "replace")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        found = err.get("message") if isinstance(err, dict) else err
        found = found or obj.get("message") or obj.get("detail")
        if found:
            text = found if isinstance(found, str) else orjson.dumps(found).decode()
    return one_line(text) or (default or "no error message")


def one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def retry_after(headers: Mapping[str, str], cap: float) -> float | None:
    """Seconds asked for by ``retry-after-ms`` / ``Retry-After`` (seconds or HTTP date), capped."""
    seconds: float | None = None
    try:
        if ms := headers.get("retry-after-ms"):
            seconds = float(ms) / 1000
        elif value := headers.get("Retry-After"):
            try:
                seconds = float(value)
            except ValueError:
                seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError):
        return None
    return None if seconds is None else min(max(seconds, 0.0), cap)


def ints(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return value
    return None


def logprobs(value: Any) -> list[float] | None:
    """``logprobs.content[*].logprob`` of one choice (or chunk), if present."""
    content = value.get("content") if isinstance(value, dict) else None
    if not isinstance(content, list):
        return None
    return [float(t["logprob"]) for t in content if isinstance(t, dict) and isinstance(t.get("logprob"), (int, float))]


def cached_prompt(usage: Any) -> dict[str, int]:
    """``prompt_reused`` / ``prompt_evaluated`` from a server's ``usage.prompt_tokens_details.
    cached_tokens`` (vLLM and SGLang with prefix caching, OpenAI); empty when it does not say."""
    if not isinstance(usage, dict):
        return {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    total = usage.get("prompt_tokens")
    if not isinstance(cached, int) or not isinstance(total, int) or not 0 <= cached <= total:
        return {}
    return {"prompt_reused": cached, "prompt_evaluated": total - cached}
