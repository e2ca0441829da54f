"""Prometheus metrics of `orchestrion serve`, exposed at ``GET /metrics``.

Each app has its own registry (several servers can live in one process, as in tests).

Server-wide series:

- ``orchestrion_requests_total{endpoint, code}`` and ``orchestrion_request_duration_seconds{endpoint}``:
  every HTTP request, timed to the last byte sent (a streamed answer included);
- ``orchestrion_episodes_total{strategy, status}``, ``orchestrion_episode_duration_seconds{strategy}``
  (the episode's own time: its waits for client tool results, ``client_wait_s``, are left out; they
  are the client tools' latency below) and ``orchestrion_episodes_in_flight``;
- ``orchestrion_tokens_total{direction}`` (input, output) and ``orchestrion_cost_usd_total``, summed
  over finished episodes; ``orchestrion_cost_unknown_episodes_total`` counts those whose price is
  unknown (their dollars are not in the sum, never counted as 0);
- ``orchestrion_time_to_first_token_seconds``: from a streamed request to its first answer delta.

Series named and bucketed as vLLM's (``vllm:x`` is ``orchestrion:x`` here, so a dashboard built
for vLLM reads them with the prefix changed). They come from the episode's own committed trace
events, which the request's :class:`~orchestrion.serve._stream.Watch` already receives: every
pool model call is a ``call`` span, every tool or agent-tool call a ``tool`` / ``agent`` span.

- per pool model, labelled ``model_name`` (the pool's name) and ``strategy``:
  ``orchestrion:model_calls_total``, ``orchestrion:model_call_errors_total`` (plus ``error``: the
  span's status, ``error`` or ``timeout``), ``orchestrion:model_call_retries_total`` (a decision's
  repair attempts: the same call asked again with the validation error),
  ``orchestrion:model_call_latency_seconds`` (vLLM's e2e request latency buckets),
  ``orchestrion:prompt_tokens_total`` and ``orchestrion:generation_tokens_total``;
- per tool, agent tool or client tool (a request's ``tools``: its latency is the wait for the
  client's result), labelled ``tool`` and ``strategy``: ``orchestrion:tool_calls_total``
  (plus ``status``: the result envelope's ``ok``, ``exec_error``, ``timeout``, ...) and
  ``orchestrion:tool_call_latency_seconds``;
- per request, labelled ``model_name`` (the model asked for, ``orchestrion/<strategy>``) and
  ``strategy``: ``orchestrion:request_prompt_tokens`` and ``orchestrion:request_generation_tokens``
  (the episode's tokens over all its calls; vLLM's 1-2-5 buckets) and, for streamed requests,
  ``orchestrion:inter_token_latency_seconds``: the gaps between consecutive answer deltas as sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..runtime.episode import EpisodeResult
from ..trace.bus import EventType, TraceEvent
from ._openai_schema import MODEL_PREFIX

_ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/models", "/health", "/version", "/metrics")
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# vLLM's buckets (its Prometheus stat logger): e2e request latency and inter-token latency
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                480.0, 960.0, 1920.0, 7680.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)
_TOOL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_MAX_REQUEST_TOKENS = 1_000_000  # an episode sums many calls: no one context length bounds it
_CALL_ERRORS = ("error", "timeout")
_TOOL_KINDS = ("tool", "agent", "client_tool")  # a client tool's latency is the wait for its result


def buckets_1_2_5(top: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``top`` (vLLM's token-count buckets)."""
    found: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > top:
                return tuple(found)
            found.append(m * scale)
        scale *= 10


def endpoint_of(path: str) -> str:
    """A bounded label for a request path (unknown paths share one label)."""
    if path in _ENDPOINTS:
        return path
    if path.startswith("/v1/models/"):
        return "/v1/models/{id}"
    return "other"


class ServeMetrics:
    """The counters, gauges and histograms of one serve app."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("orchestrion_requests", "HTTP requests by endpoint and status code",
                                ["endpoint", "code"], registry=r)
        self.request_s = Histogram("orchestrion_request_duration_seconds", "HTTP request time to the last byte",
                                   ["endpoint"], buckets=_LATENCY_BUCKETS, registry=r)
        self.episodes = Counter("orchestrion_episodes", "finished episodes by strategy and status",
                                ["strategy", "status"], registry=r)
        self.episode_s = Histogram("orchestrion_episode_duration_seconds",
                                   "episode wall time less its waits for client tool results", ["strategy"],
                                   buckets=_LATENCY_BUCKETS, registry=r)
        self.in_flight = Gauge("orchestrion_episodes_in_flight", "episodes running now", registry=r)
        self.tokens = Counter("orchestrion_tokens", "model tokens of finished episodes", ["direction"], registry=r)
        self.cost = Counter("orchestrion_cost_usd", "dollars of finished episodes with known prices", registry=r)
        self.cost_unknown = Counter("orchestrion_cost_unknown_episodes", "finished episodes with an unknown price",
                                    registry=r)
        self.ttft = Histogram("orchestrion_time_to_first_token_seconds",
                              "streamed requests: time to the first answer delta", buckets=_LATENCY_BUCKETS,
                              registry=r)
        self._vllm_shaped(r)

    def _vllm_shaped(self, r: CollectorRegistry) -> None:
        model, tool, request = ["model_name", "strategy"], ["tool", "strategy"], ["model_name", "strategy"]
        self.model_calls = Counter("orchestrion:model_calls", "pool model calls", model, registry=r)
        self.model_errors = Counter("orchestrion:model_call_errors", "pool model calls that failed",
                                    [*model, "error"], registry=r)
        self.model_retries = Counter("orchestrion:model_call_retries",
                                     "decision calls asked again after an invalid output", model, registry=r)
        self.model_s = Histogram("orchestrion:model_call_latency_seconds", "pool model call latency", model,
                                 buckets=_E2E_BUCKETS, registry=r)
        self.prompt_tokens = Counter("orchestrion:prompt_tokens", "prompt tokens of pool model calls", model,
                                     registry=r)
        self.generation_tokens = Counter("orchestrion:generation_tokens", "generated tokens of pool model calls",
                                         model, registry=r)
        self.tool_calls = Counter("orchestrion:tool_calls", "tool and agent-tool calls by result status",
                                  [*tool, "status"], registry=r)
        self.tool_s = Histogram("orchestrion:tool_call_latency_seconds", "tool and agent-tool call latency", tool,
                                buckets=_TOOL_BUCKETS, registry=r)
        token_buckets = buckets_1_2_5(_MAX_REQUEST_TOKENS)
        self.request_prompt = Histogram("orchestrion:request_prompt_tokens", "prompt tokens of one request's episode",
                                        request, buckets=token_buckets, registry=r)
        self.request_generation = Histogram("orchestrion:request_generation_tokens",
                                            "generated tokens of one request's episode", request,
                                            buckets=token_buckets, registry=r)
        self.itl = Histogram("orchestrion:inter_token_latency_seconds",
                             "streamed requests: time between consecutive answer deltas", request,
                             buckets=_ITL_BUCKETS, registry=r)

    def episode(self, result: EpisodeResult) -> None:
        self.episodes.labels(result.strategy, str(result.status)).inc()
        self.episode_s.labels(result.strategy).observe(max(0.0, result.wall_s - result.client_wait_s))
        self.tokens.labels("input").inc(result.usage.input_tokens)
        self.tokens.labels("output").inc(result.usage.output_tokens)
        if result.usage.cost_usd is None:
            self.cost_unknown.inc()
        else:
            self.cost.inc(result.usage.cost_usd)
        served = MODEL_PREFIX + result.strategy
        self.request_prompt.labels(served, result.strategy).observe(result.usage.input_tokens)
        self.request_generation.labels(served, result.strategy).observe(result.usage.output_tokens)

    def answer_stream(self, strategy: str, sent_at: Sequence[float]) -> None:
        """A streamed answer ended: the gaps between its deltas (``sent_at``: when each was sent)."""
        itl = self.itl.labels(MODEL_PREFIX + strategy, strategy)
        for before, after in zip(sent_at, sent_at[1:], strict=False):
            itl.observe(max(0.0, after - before))

    def watcher(self, strategy: str) -> Callable[[TraceEvent], None]:
        """What counts one episode's trace events (fed every event, in order) into the per-model
        and per-tool series."""
        return EpisodeCounter(self, strategy).event

    def render(self) -> bytes:
        return generate_latest(self.registry)


class EpisodeCounter:
    """The per-model and per-tool series of one episode, from its committed trace events."""

    def __init__(self, metrics: ServeMetrics, strategy: str) -> None:
        self.m = metrics
        self.strategy = strategy
        self._tools: dict[str, str] = {}  # open tool span id -> tool name (named at the span's start)

    def event(self, event: TraceEvent) -> None:
        if event.type is EventType.SPAN_STARTED and event.kind in _TOOL_KINDS and event.span_id:
            attrs = event.data.get("attrs") or {}
            self._tools[event.span_id] = str(attrs.get("tool") or event.name or "")
        elif event.type is EventType.SPAN_ENDED and event.kind == "call":
            self._call(event)
        elif event.type is EventType.SPAN_ENDED and event.kind in _TOOL_KINDS:
            self._tool(event)
        elif event.type is EventType.DECISION and int(event.data.get("attempt") or 0) > 0 \
                and not event.data.get("replayed"):
            self.m.model_retries.labels(str(event.data.get("model") or ""), self.strategy).inc()

    def _call(self, event: TraceEvent) -> None:
        model = str(event.name or "")
        attrs: dict[str, Any] = dict(event.data.get("attrs") or {})
        usage: dict[str, Any] = dict(event.data.get("usage") or {})
        self.m.model_calls.labels(model, self.strategy).inc()
        if event.status in _CALL_ERRORS:
            self.m.model_errors.labels(model, self.strategy, str(event.status)).inc()
        latency = attrs.get("latency_s")
        if not isinstance(latency, (int, float)):
            latency = _duration(event)
        self.m.model_s.labels(model, self.strategy).observe(float(latency))
        self.m.prompt_tokens.labels(model, self.strategy).inc(int(usage.get("input_tokens") or 0))
        self.m.generation_tokens.labels(model, self.strategy).inc(int(usage.get("output_tokens") or 0))

    def _tool(self, event: TraceEvent) -> None:
        name = self._tools.pop(event.span_id or "", None) or str(event.name or "")
        attrs: dict[str, Any] = dict(event.data.get("attrs") or {})
        status = str(attrs.get("status") or event.status or "")
        self.m.tool_calls.labels(name, self.strategy, status).inc()
        self.m.tool_s.labels(name, self.strategy).observe(_duration(event))


def _duration(event: TraceEvent) -> float:
    started = event.data.get("started")
    return max(0.0, event.ts - float(started)) if isinstance(started, (int, float)) else 0.0


class MetricsMiddleware:
    """Counts and times every HTTP request, to the last byte of its response."""

    def __init__(self, app: ASGIApp, metrics: ServeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            endpoint = endpoint_of(str(scope.get("path", "")))
            self.metrics.requests.labels(endpoint, str(status)).inc()
            self.metrics.request_s.labels(endpoint).observe(time.perf_counter() - start)
