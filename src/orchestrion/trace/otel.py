"""OpenTelemetry export: episodes as OTLP/HTTP traces (GenAI semantic conventions).

One episode is one OTel trace. Its id is the episode id (128-bit hex), every span keeps its
parent, its recorded start and end times and its status, and span ids are derived from
Orchestrion's span ids (the same episode always exports the same ids). What each span says is
in :mod:`orchestrion.trace._otel_attrs`.

Spans are read back from the store after an episode is committed, so exporting never touches
the hot path and never changes the trace. :class:`OtlpSender` sends from one background
thread; a receiver that is down or refuses the spans costs one bounded attempt
(``timeout_s``), after which the remaining episodes are skipped and :meth:`OtlpSender.close`
reports what was not sent -- the store still holds all of it, to send later with
``orchestrion trace export --format otlp``.

Needs the ``otel`` extra (``opentelemetry-sdk``, ``opentelemetry-exporter-otlp-proto-http``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .._errors import ConfigError
from .._version import __version__
from ..status import EpisodeStatus
from ._otel_attrs import capture_content, decoded_attrs, session_id, span_attributes, span_name
from .store import TraceStore

try:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExportResult
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
except ImportError:  # pragma: no cover - exercised by the missing-extra test through a fresh import
    raise ConfigError(
        "OpenTelemetry export needs the otel extra; install it with `pip install 'orchestrion[otel]'`"
    ) from None

TRACES_PATH = "/v1/traces"
BATCH = 512  # spans per OTLP request
_EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http"
_OS_ERROR = re.compile(r"\[Errno -?\d+\][^\"')]*")


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL for ``endpoint``: a URL already ending in ``/v1/traces`` is kept,
    any other gets ``/v1/traces`` appended (``http://host:4318`` -> ``http://host:4318/v1/traces``)."""
    url = endpoint.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--otlp-endpoint '{endpoint}': give an http(s) URL, e.g. http://127.0.0.1:6006")
    return url if parts.path.rstrip("/").endswith(TRACES_PATH) else url.rstrip("/") + TRACES_PATH


def resolve_endpoint(option: str | None) -> str | None:
    """Where to send traces: ``option``, else ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (a full URL),
    else ``OTEL_EXPORTER_OTLP_ENDPOINT`` (a base URL), else nowhere (None)."""
    if option:
        return traces_url(option)
    full = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if full:
        return full
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base.rstrip("/") + TRACES_PATH if base else None


def _span_id(orchestrion_id: str) -> int:
    """A non-zero 64-bit OTel span id, derived from (and stable for) an Orchestrion span id."""
    value = int.from_bytes(hashlib.blake2b(orchestrion_id.encode(), digest_size=8).digest(), "big")
    return value or 1


def trace_id_of(episode_id: str) -> int:
    """The OTel trace id of an episode: its own id when that is 32 hex digits, else a stable hash."""
    if len(episode_id) == 32:
        try:
            value = int(episode_id, 16)
        except ValueError:
            value = 0
        if value:
            return value
    return int.from_bytes(hashlib.blake2b(episode_id.encode(), digest_size=16).digest(), "big") or 1


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _status(status: str, attrs: dict[str, Any]) -> Status:
    if status == EpisodeStatus.OK:
        return Status(StatusCode.OK)
    if status == EpisodeStatus.RUNNING:  # never closed (the process died mid-span)
        return Status(StatusCode.UNSET)
    detail = attrs.get("error")
    return Status(StatusCode.ERROR, f"{status}: {detail}" if detail else status)


def resource() -> Resource:
    """``service.name`` (``OTEL_SERVICE_NAME`` or ``orchestrion``) plus ``OTEL_RESOURCE_ATTRIBUTES``."""
    return Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "orchestrion",
                            "service.version": __version__})


def episode_spans(store: TraceStore, episode_id: str, *, providers: dict[str, str] | None = None,
                  res: Resource | None = None) -> list[ReadableSpan]:
    """The OTel spans of one stored episode (empty if there is no such episode).

    ``providers`` maps model names to ``gen_ai.provider.name`` values (default ``orchestrion``)."""
    episode = store.episode(episode_id)
    if episode is None:
        return []
    rows = store.spans(episode.id)
    events: dict[str, list[Event]] = {}
    for ev in store.events(episode.id):
        if ev.span_id:
            events.setdefault(ev.span_id, []).append(
                Event(str(ev.kind), {"orchestrion.data": str(ev.data or "")}, _ns(float(ev.ts))))
    trace_id = trace_id_of(episode.id)
    scope = InstrumentationScope("orchestrion", __version__)
    the_resource = res or resource()
    content = capture_content()
    fallback_end = float(episode.ended or 0.0)
    kinds = store.query("SELECT kind FROM runs WHERE id = ?", (episode.run_id,)) if episode.run_id else []
    session = session_id(episode, str(kinds[0]["kind"]) if kinds else None)
    out: list[ReadableSpan] = []
    for row in rows:
        attrs = decoded_attrs(row)
        model = str(attrs.get("model") or row.name or "")
        provider = (providers or {}).get(model, "orchestrion")
        started = float(row.started)
        ended = float(row.ended or max(fallback_end, started))
        parent = row.parent_id
        out.append(ReadableSpan(
            name=span_name(row, attrs),
            context=SpanContext(trace_id, _span_id(row.id), is_remote=False,
                                trace_flags=TraceFlags(TraceFlags.SAMPLED)),
            parent=SpanContext(trace_id, _span_id(parent), is_remote=False,
                               trace_flags=TraceFlags(TraceFlags.SAMPLED)) if parent else None,
            resource=the_resource,
            attributes=span_attributes(row, attrs, episode, provider=provider, content=content, session=session),
            events=events.get(row.id, []),
            kind=SpanKind.CLIENT if row.kind == "call" else SpanKind.INTERNAL,
            status=_status(str(row.status or EpisodeStatus.RUNNING), attrs),
            start_time=_ns(started),
            end_time=_ns(ended),
            instrumentation_scope=scope,
        ))
    return out


@dataclass
class SendReport:
    """What an :class:`OtlpSender` did: episodes and spans sent, episodes not sent and why."""

    url: str
    sent: int = 0
    spans: int = 0
    not_sent: list[str] = field(default_factory=list)
    error: str | None = None

    def warning(self, db: object) -> str | None:
        """One line for the user when something was not sent (None when all went out)."""
        if not self.not_sent:
            return None
        return (f"OTLP export to {self.url} failed ({self.error}); {len(self.not_sent)} episode(s) not sent, "
                f"their traces are kept in {db}: resend with `orchestrion trace export --format otlp "
                f"--otlp-endpoint URL {' '.join(self.not_sent[:3])}{' ...' if len(self.not_sent) > 3 else ''}`")


class _LastError(logging.Handler):
    """Keeps the exporter's last complaint (the reason for the one-line warning), prints nothing."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.messages.append(record.getMessage())

    @property
    def reason(self) -> str:
        """The OS error behind a failed connection (``[Errno 111] Connection refused``), else the first complaint."""
        for message in self.messages:
            if found := _OS_ERROR.search(message):
                return found.group(0).strip()
        return self.messages[0].splitlines()[0][:300] if self.messages else "the receiver did not accept the spans"


class OtlpSender:
    """Sends finished episodes to an OTLP/HTTP receiver from one background thread.

    ``add(episode_id)`` queues an episode (it must be committed to the store); ``close()``
    waits for the queue (at most ``close_timeout_s``) and returns a :class:`SendReport`.
    After the first failed request the sender stops trying: the rest are reported as not sent.
    """

    def __init__(self, store: TraceStore, url: str, *, timeout_s: float = 5.0,
                 providers: dict[str, str] | None = None) -> None:
        self.store = store
        self.report = SendReport(url)
        self._providers = providers
        self._resource = resource()
        self._exporter = OTLPSpanExporter(endpoint=url, timeout=timeout_s)
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._failed = False
        self._thread = threading.Thread(target=self._work, name="orchestrion-otlp", daemon=True)
        self._thread.start()

    def add(self, episode_id: str) -> None:
        self._queue.put(episode_id)

    def add_all(self, episode_ids: Iterable[str]) -> None:
        for eid in episode_ids:
            self.add(eid)

    def close(self, close_timeout_s: float = 60.0) -> SendReport:
        self._queue.put(None)
        self._thread.join(close_timeout_s)
        if self._thread.is_alive():  # still sending: what is left counts as not sent
            self._failed = True
            self.report.error = self.report.error or f"still sending after {close_timeout_s:g}s"
            while True:
                try:
                    left = self._queue.get_nowait()
                except queue.Empty:
                    break
                if left is not None:
                    self.report.not_sent.append(left)
        else:
            self._exporter.shutdown()  # type: ignore[no-untyped-call]
        return self.report

    def _work(self) -> None:
        while (episode_id := self._queue.get()) is not None:
            if self._failed:
                self.report.not_sent.append(episode_id)
                continue
            try:
                spans = episode_spans(self.store, episode_id, providers=self._providers, res=self._resource)
                ok, reason = self._send(spans)
            except Exception as exc:  # noqa: BLE001 - an export problem must never crash the command
                ok, reason = False, f"{type(exc).__name__}: {exc}"
            if ok:
                self.report.sent += 1
                self.report.spans += len(spans)
            else:
                self._failed = True
                self.report.error = reason
                self.report.not_sent.append(episode_id)

    def _send(self, spans: list[ReadableSpan]) -> tuple[bool, str | None]:
        logger = logging.getLogger(_EXPORTER_LOGGER)
        handler, propagate = _LastError(), logger.propagate
        logger.addHandler(handler)
        logger.propagate = False  # the exporter's retry chatter becomes our one-line warning
        try:
            for start in range(0, len(spans), BATCH):
                if self._exporter.export(spans[start:start + BATCH]) is not SpanExportResult.SUCCESS:
                    return False, handler.reason
            return True, None
        finally:
            logger.removeHandler(handler)
            logger.propagate = propagate
