"""Trace: events and spans of every episode, the SQLite store (written off the hot path by a
background writer), its live event bus, JSONL export and OpenTelemetry export (``trace.otel``,
imported on use: it loads the OpenTelemetry SDK).
"""

from __future__ import annotations

from ._atomic import atomic_files, atomic_output, check_output_file, check_output_folder
from ._fork import fork_run
from ._schema import db_path_problem
from ._watch import FileWatch
from .bus import EventType, Subscription, TraceBus, TraceEvent
from .rows import DecisionRow, DecisionSpanRow, EpisodeRow, EventRow, RunRow, SpanRow
from .store import TraceStore, default_db_path, open_for_reading
from .tracer import Span, Tracer, new_id

__all__ = [
    "DecisionRow", "DecisionSpanRow", "EpisodeRow", "EventRow", "EventType", "FileWatch", "RunRow", "Span", "SpanRow",
    "Subscription", "TraceBus", "TraceEvent", "TraceStore", "Tracer", "atomic_files", "atomic_output",
    "check_output_file", "check_output_folder", "db_path_problem", "default_db_path", "fork_run", "new_id",
    "open_for_reading",
]
