"""What a client is told when its episode fails, and what it is never told.

An episode that ends in ``error`` (the model server down, say) answers with an OpenAI-style error
body and a 502, not a 200 with empty content: ``status`` ``error`` is the only ending treated so;
a budget stop or an answer cut at ``max_tokens`` keeps its 200 with ``finish_reason: "length"``.
``--errors-as-200`` (server) or ``"orchestrion": {"errors_as_200": true}`` (one request) keeps the
older behaviour: a 200 whose ``orchestrion.status`` says ``error``.

Error text that reaches a client passes :func:`redact` first: upstream URLs (a pool's
``base_url``s, their host and port, and any other URL), API keys held by the pool's
``api_key_env`` variables and anything shaped like a secret key are replaced, and only its
first line is kept.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from ..models.pool import Pool
from ..runtime.episode import EpisodeResult
from ..status import EpisodeStatus
from ._bodies import episode_summary
from ._openai_schema import ApiError

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")
_KEYLIKE = re.compile(r"\b(?:sk|pk|rk|key|tok)[-_][A-Za-z0-9_\-]{12,}\b")
UPSTREAM = "<model server>"  # what stands for any other URL
REDACTED = "<redacted>"  # what stands for the pool's own server addresses and keys
MAX_ERROR_CHARS = 500


def pool_secrets(pool: Pool) -> tuple[str, ...]:
    """The pool's server URLs and the API keys its models read from the environment."""
    found: set[str] = set()
    for spec in pool.config.models:
        if spec.base_url:
            found.add(spec.base_url.rstrip("/"))
            where = urlsplit(spec.base_url)  # "Cannot connect to host HOST:PORT" names no URL, but the server
            found.update(part for part in (where.netloc.rpartition("@")[2], where.hostname) if part)
        if spec.api_key_env and (key := os.environ.get(spec.api_key_env)):
            found.add(key)
    return tuple(sorted(found, key=len, reverse=True))  # longest first: a URL before its prefix


def redact(text: str | None, secrets: Iterable[str] = ()) -> str | None:
    """``text`` safe to send: first line only, no URL, key or other secret."""
    if text is None:
        return None
    line = (text.strip().splitlines() or [""])[0]
    for secret in secrets:
        if secret:
            line = line.replace(secret, REDACTED)
    line = _URL.sub(UPSTREAM, line)
    line = _KEYLIKE.sub(REDACTED, line)
    return line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS - 3] + "..."


def summary(result: EpisodeResult, secrets: Iterable[str], ignored: list[str] | None = None) -> dict[str, Any]:
    """The ``orchestrion`` field of a finished response, its error redacted."""
    return {**episode_summary(result, ignored), "error": redact(result.error, secrets)}


def failure(result: EpisodeResult, secrets: Iterable[str]) -> ApiError | None:
    """The 502 that stands for an episode ending in ``error`` (None for every other ending). It
    says ``x-should-retry: false``: the episode already retried its model calls, and the official
    client (so LangChain and LiteLLM) would otherwise run and record the whole episode twice more."""
    if result.status != EpisodeStatus.ERROR:
        return None
    reason = redact(result.error, secrets) or "no reason recorded"
    return ApiError(502, f"the episode failed: {reason} (trace id {result.trace_id})", type="server_error",
                    code="episode_failed",
                    headers={"X-Orchestrion-Trace-Id": result.trace_id, "X-Orchestrion-Status": str(result.status),
                             "x-should-retry": "false"})
