"""Fork a run: a new run with the same config and copies of some of its episodes.

For a change that can act only in some episodes of a finished run (a rule that fires on one kind
of call): the fork keeps the episodes the change cannot touch, and ``orchestrion eval --resume``
on the fork runs the rest again with the changed code. The old run stays as it was, so a table
can show both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._errors import TraceError
from ..status import RunStatus
from .store import TraceStore
from .tracer import new_id


def _copy_episode(rows: dict[str, list[dict[str, Any]]], run_id: str) -> dict[str, list[dict[str, Any]]]:
    """The rows of one episode under fresh ids (episode, spans, decisions), in run ``run_id``."""
    episode = new_id()
    spans = {r["id"]: new_id() for r in rows["spans"]}
    out: dict[str, list[dict[str, Any]]] = {
        "episodes": [{**r, "id": episode, "run_id": run_id} for r in rows["episodes"]],
        "spans": [{**r, "id": spans[r["id"]], "episode_id": episode, "parent_id": spans.get(r["parent_id"])}
                  for r in rows["spans"]],
        "events": [{**r, "episode_id": episode, "span_id": spans.get(r["span_id"])} for r in rows["events"]],
        "decisions": [{**r, "id": new_id(), "episode_id": episode, "span_id": spans.get(r["span_id"])}
                      for r in rows["decisions"]],
    }
    return out


def fork_run(store: TraceStore, run_id: str, keep: Iterable[str]) -> str:
    """A new run (status ``interrupted``, so ``--resume`` finishes it) with ``run_id``'s kind and config
    and a copy of each episode whose id is in ``keep``; returns the new run's id."""
    runs = [r for r in store.runs_matching(run_id) if r.id == run_id]
    if not runs:
        raise TraceError(f"{store.path}: no run {run_id} to fork (give its full id)")
    run = runs[0]
    wanted = set(keep)
    episodes = [r["id"] for r in store.query("SELECT id FROM episodes WHERE run_id = ? ORDER BY rowid", (run_id,))]
    strays = wanted - set(episodes)
    if strays:
        raise TraceError(f"fork of run {run_id}: episode {sorted(strays)[0]} is not one of its episodes")
    fork = new_id()
    store.create_run(fork, run.kind or "eval", run.config_value(), status=RunStatus.INTERRUPTED)
    for episode in episodes:
        if episode in wanted:
            store.import_rows(_copy_episode(store.export_episode_rows(episode), fork))
    store.flush()
    return fork
