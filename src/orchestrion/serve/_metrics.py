"""Prometheus metrics of `orchestrion serve`, exposed at ``GET /metrics``.

Each app has its own registry (several servers can live in one process, as in tests):

- ``orchestrion_requests_total{endpoint, code}`` and ``orchestrion_request_duration_seconds{endpoint}``:
  every HTTP request, timed to the last byte sent (a streamed answer included);
- ``orchestrion_episodes_total{strategy, status}``, ``orchestrion_episode_duration_seconds{strategy}``
  and ``orchestrion_episodes_in_flight``;
- ``orchestrion_tokens_total{direction}`` (input, output) and ``orchestrion_cost_usd_total``, summed
  over finished episodes; ``orchestrion_cost_unknown_episodes_total`` counts those whose price is
  unknown (their dollars are not in the sum, never counted as 0);
- ``orchestrion_time_to_first_token_seconds``: from a streamed request to its first answer delta.
"""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..runtime.episode import EpisodeResult

_ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/models", "/health", "/version", "/metrics")
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


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
        self.episode_s = Histogram("orchestrion_episode_duration_seconds", "episode wall time", ["strategy"],
                                   buckets=_LATENCY_BUCKETS, registry=r)
        self.in_flight = Gauge("orchestrion_episodes_in_flight", "episodes running now", registry=r)
        self.tokens = Counter("orchestrion_tokens", "model tokens of finished episodes", ["direction"], registry=r)
        self.cost = Counter("orchestrion_cost_usd", "dollars of finished episodes with known prices", registry=r)
        self.cost_unknown = Counter("orchestrion_cost_unknown_episodes", "finished episodes with an unknown price",
                                    registry=r)
        self.ttft = Histogram("orchestrion_time_to_first_token_seconds",
                              "streamed requests: time to the first answer delta", buckets=_LATENCY_BUCKETS,
                              registry=r)

    def episode(self, result: EpisodeResult) -> None:
        self.episodes.labels(result.strategy, str(result.status)).inc()
        self.episode_s.labels(result.strategy).observe(result.wall_s)
        self.tokens.labels("input").inc(result.usage.input_tokens)
        self.tokens.labels("output").inc(result.usage.output_tokens)
        if result.usage.cost_usd is None:
            self.cost_unknown.inc()
        else:
            self.cost.inc(result.usage.cost_usd)

    def render(self) -> bytes:
        return generate_latest(self.registry)


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
