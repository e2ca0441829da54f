"""The commands' side of OpenTelemetry export: find the endpoint, start a sender, report once.

Kept apart from :mod:`orchestrion.trace.otel` so that commands can ask whether to export
without importing OpenTelemetry (and without failing when the ``otel`` extra is absent and
nobody asked for export).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import typer

from .._errors import ConfigError, TraceError
from ..trace.store import TraceStore

if TYPE_CHECKING:
    from ..trace.otel import OtlpSender

ENV_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

OtlpOpt = Annotated[str | None, typer.Option(
    "--otlp-endpoint", metavar="URL",
    help="send each finished episode as OpenTelemetry spans to this OTLP/HTTP receiver "
         "(e.g. Phoenix: http://127.0.0.1:6006); default: $OTEL_EXPORTER_OTLP_ENDPOINT, else none")]


class _Described(Protocol):
    def describe(self) -> list[dict[str, Any]]: ...


def pool_providers(pool: _Described) -> dict[str, str]:
    """``gen_ai.provider.name`` per model of ``pool``: its backend (llama-cpp, openai-api, scripted)."""
    return {row["name"]: str(row["backend"]) for row in pool.describe()}


def warn_stderr(line: str) -> None:
    """One warning line on stderr."""
    sys.stderr.write(f"warning: {line}\n")
    sys.stderr.flush()


def start_sender(option: str | None, store: TraceStore, *, warn: Callable[[str], None] = warn_stderr,
                 providers: dict[str, str] | None = None) -> OtlpSender | None:
    """A running :class:`OtlpSender` when ``--otlp-endpoint`` or the standard environment variables
    name a receiver, else None.

    Without the ``otel`` extra, an explicit ``--otlp-endpoint`` is a :class:`ConfigError` (before any
    work starts); an endpoint that only comes from the environment gets a warning and no export.
    """
    from_env = next((name for name in ENV_VARS if os.environ.get(name, "").strip()), None)
    if not option and from_env is None:
        return None
    try:
        from ..trace.otel import OtlpSender, resolve_endpoint
    except ConfigError as exc:
        if option:
            raise
        warn(f"{from_env} is set but traces are not exported: {exc}")
        return None
    url = resolve_endpoint(option)
    return None if url is None else OtlpSender(store, url, providers=providers)


def finish_sender(sender: OtlpSender | None, *, warn: Callable[[str], None] = warn_stderr) -> None:
    """Wait for ``sender`` to send what it was given; one warning line if something was not sent."""
    if sender is None:
        return
    report = sender.close()
    line = report.warning(sender.store.path)
    if line:
        warn(line)


def episode_id(store: TraceStore, id_or_prefix: str) -> str:
    """The full id of the stored episode ``id_or_prefix`` names (a TraceError when none or several)."""
    row = store.episode(id_or_prefix)
    if row is None:
        raise TraceError(f"trace store {store.path}: no episode '{id_or_prefix}'; see `orchestrion trace list`")
    return row.id


def export_otlp(store: TraceStore, ids: list[str], option: str | None,
                warn: Callable[[str], None] = warn_stderr) -> int:
    """Send stored episodes to ``option`` (or the environment's endpoint); returns how many went out."""
    sender = start_sender(option, store, warn=warn)
    if sender is None:
        raise ConfigError("--format otlp needs --otlp-endpoint URL (or OTEL_EXPORTER_OTLP_ENDPOINT), "
                          "e.g. --otlp-endpoint http://127.0.0.1:6006")
    sender.add_all(ids)
    report = sender.close(close_timeout_s=max(60.0, 2.0 * len(ids)))
    line = report.warning(store.path)
    if line:
        warn(line)
    return report.sent
