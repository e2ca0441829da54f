"""JSONL export: one line per episode with its spans, events and decisions."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import orjson

from ._atomic import atomic_output
from .rows import DecisionRow, EpisodeRow, EventRow, SpanRow
from .store import TraceStore

_JSON_FIELDS = ("attrs", "data", "task", "meta", "messages", "prompt_token_ids", "token_ids", "logprobs", "action")


def _decode(row: EpisodeRow | SpanRow | EventRow | DecisionRow) -> dict[str, Any]:
    """The row as the dict of its columns (their order kept), JSON columns decoded."""
    out = dataclasses.asdict(row)
    for key in _JSON_FIELDS:
        if isinstance(out.get(key), str):
            try:
                out[key] = orjson.loads(out[key])
            except orjson.JSONDecodeError:
                pass
    return out


def episode_record(store: TraceStore, episode_id: str) -> dict[str, Any]:
    ep = store.episode(episode_id)
    if ep is None:
        return {}
    record = _decode(ep)
    record["spans"] = [_decode(s) for s in store.spans(ep.id)]
    record["events"] = [_decode(e) for e in store.events(ep.id)]
    record["decisions"] = [_decode(d) for d in store.decisions(ep.id)]
    return record


def export_jsonl(store: TraceStore, episode_ids: Iterable[str], out: Path | IO[bytes]) -> int:
    """Write one JSON line per episode; returns the number written. A file path is written whole
    or not at all (a temporary file renamed into place, owner-only)."""
    if isinstance(out, Path):
        with atomic_output(out) as handle:
            return _write_lines(store, episode_ids, handle)
    return _write_lines(store, episode_ids, out)


def _write_lines(store: TraceStore, episode_ids: Iterable[str], handle: IO[bytes]) -> int:
    count = 0
    for eid in episode_ids:
        record = episode_record(store, eid)
        if record:
            handle.write(orjson.dumps(record, default=str) + b"\n")
            count += 1
    return count
