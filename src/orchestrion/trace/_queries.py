"""What callers read from and write to the trace store, as typed methods (mixed into TraceStore).

This is the store's interface: code outside ``orchestrion.trace`` calls these methods
rather than writing SQL. Writes go through the background writer (``submit``), so they
are committed soon after, in order; call ``flush``/``aflush`` to wait for them. Reads
open a short-lived connection and return typed rows (:mod:`orchestrion.trace.rows`: one
frozen dataclass per row, columns as stored, JSON columns as text with ``*_value()``
methods that decode them), ids, or small aggregates.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Literal, overload

from .._errors import TraceError
from ..models.types import Usage
from ..status import EpisodeStatus, RunStatus
from ._json import dumps
from ._library import trusted_programs
from .bus import EventType, TraceEvent
from .rows import DecisionRow, DecisionSpanRow, EpisodeRow, EventRow, RunRow, SpanRow

# An episode that counts in an eval run: finished (closing update committed), not interrupted, and
# not an error that a later episode retried (``eval --resume --retry-errors``).
COUNTED = (f"finished = 1 AND status NOT IN ('{EpisodeStatus.INTERRUPTED}', '{EpisodeStatus.CANCELLED}', "
           f"'{EpisodeStatus.RETRIED}')")


def _marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


def _chunks(values: Sequence[str], size: int = 500) -> list[tuple[str, ...]]:
    """``values`` in pieces that stay under SQLite's limit on bound parameters per statement."""
    return [tuple(values[i:i + size]) for i in range(0, len(values), size)]


class TraceQueries:
    """Runs, episodes, spans, events and decisions, read and written by name."""

    path: Path

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        raise NotImplementedError

    def submit(self, sql: str, params: Sequence[Any] = ()) -> None:
        raise NotImplementedError

    def publish(self, event: TraceEvent) -> None:
        raise NotImplementedError

    # -- runs ---------------------------------------------------------------------------
    def create_run(self, run_id: str, kind: str, config: Any, *, status: RunStatus = RunStatus.RUNNING,
                   created: float | None = None) -> None:
        """Add a ``runs`` row; ``config`` is stored as JSON."""
        self.submit("INSERT INTO runs (id, created, kind, config, status) VALUES (?,?,?,?,?)",
                    (run_id, time.time() if created is None else created, kind, dumps(config), status))

    def set_run_status(self, run_id: str, status: RunStatus) -> None:
        self.submit("UPDATE runs SET status = ? WHERE id = ?", (status, run_id))

    def set_run_config(self, run_id: str, config: Any) -> None:
        """Replace a run's stored config (an eval run extended to more examples)."""
        self.submit("UPDATE runs SET config = ? WHERE id = ?", (dumps(config), run_id))

    def runs_matching(self, id_or_prefix: str) -> list[RunRow]:
        """The runs whose id is ``id_or_prefix`` or starts with it (``config`` as stored), by id."""
        return [RunRow.of(r) for r in self.query("SELECT * FROM runs WHERE id = ? OR id LIKE ? ORDER BY id",
                                                 (id_or_prefix, id_or_prefix + "%"))]

    def runs(self, *, kind: str | None = None, newest_first: bool = False,
             limit: int | None = None) -> list[RunRow]:
        """Runs (of one ``kind``, if given) by creation time."""
        sql = "SELECT * FROM runs"
        params: list[Any] = []
        if kind is not None:
            sql += " WHERE kind = ?"
            params.append(kind)
        sql += " ORDER BY created DESC" if newest_first else " ORDER BY created"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [RunRow.of(r) for r in self.query(sql, params)]

    def episode_run_ids(self, id_or_prefix: str) -> list[str]:
        """Distinct run ids of episodes whose run id is ``id_or_prefix`` or starts with it."""
        rows = self.query("SELECT DISTINCT run_id FROM episodes WHERE run_id = ? OR run_id LIKE ?",
                          (id_or_prefix, id_or_prefix + "%"))
        return [r["run_id"] for r in rows]

    # -- episodes: writes -------------------------------------------------------------------
    def start_episode(self, episode_id: str, *, run_id: str | None, task_id: str | None, epoch: int, strategy: str,
                      task: Any, started: float, meta: Any) -> None:
        """The opening row of an episode (status ``running``); ``task`` and ``meta`` are stored as JSON."""
        self.submit(
            "INSERT INTO episodes (id, run_id, task_id, epoch, strategy, task, status, started, meta)"
            " VALUES (?,?,?,?,?,?,?,?,?)",
            (episode_id, run_id, task_id, epoch, strategy, dumps(task), EpisodeStatus.RUNNING.value, started,
             dumps(meta)),
        )
        self.publish(TraceEvent(EventType.EPISODE_STARTED, episode_id, started, name=strategy,
                                status=EpisodeStatus.RUNNING, data={"run_id": run_id, "task_id": task_id,
                                                                    "epoch": epoch}))

    def finish_episode(self, episode_id: str, *, status: EpisodeStatus, answer: str, error: str | None, ended: float,
                       usage: Usage, meta_patch: dict[str, Any]) -> None:
        """The closing update: outcome, usage, ``meta_patch`` merged into meta (JSON merge patch), finished=1."""
        self.submit(
            "UPDATE episodes SET status=?, answer=?, error=?, ended=?, input_tokens=?, output_tokens=?, "
            "cost_usd=?, cost_units=?, meta=json_patch(meta, ?), finished=1 WHERE id=?",
            (status, answer, error, ended, usage.input_tokens, usage.output_tokens, usage.cost_usd, usage.cost_units,
             dumps(meta_patch), episode_id),
        )
        self.publish(TraceEvent(EventType.EPISODE_FINISHED, episode_id, ended, status=str(status),
                                data={"answer": answer, "error": error, "usage": usage.to_dict()}))

    def patch_episode_meta(self, episode_id: str, patch: dict[str, Any]) -> None:
        """Merge ``patch`` into the episode's meta (JSON merge patch)."""
        self.submit("UPDATE episodes SET meta = json_patch(meta, ?) WHERE id = ?", (dumps(patch), episode_id))

    def annotate_episode(self, episode_id: str, *, label: str | None, note: str | None,
                         at: float | None = None) -> None:
        """Set the episode's annotation, ``meta.annotation`` = ``{label, note, at}`` (a person's mark,
        e.g. from the viewer; the training export can filter on the label). Both empty clears it."""
        label, note = (label or "").strip() or None, (note or "").strip() or None
        value = None if label is None and note is None else {
            "label": label, "note": note, "at": time.time() if at is None else at}
        self.submit("UPDATE episodes SET meta = json_patch(COALESCE(meta, '{}'), ?) WHERE id = ?",
                    (dumps({"annotation": value}), episode_id))

    def mark_interrupted(self, run_id: str) -> None:
        """The run's unfinished or cancelled episodes become ``interrupted`` (kept, never counted)."""
        self.submit(
            "UPDATE episodes SET status = 'interrupted' WHERE run_id = ? AND (finished = 0 OR status = 'cancelled')",
            (run_id,),
        )

    def mark_retried(self, run_id: str) -> None:
        """The run's finished episodes that ended in ``error`` become ``retried`` (kept with their
        error, never counted), so a resume runs their (task, strategy, epoch) again."""
        self.submit("UPDATE episodes SET status = ? WHERE run_id = ? AND finished = 1 AND status = ?",
                    (EpisodeStatus.RETRIED, run_id, EpisodeStatus.ERROR))

    # -- episodes: reads --------------------------------------------------------------------
    def episode(self, episode_id: str) -> EpisodeRow | None:
        """The episode with this id or unique id prefix; None if there is none."""
        rows = self.query("SELECT * FROM episodes WHERE id = ? OR id LIKE ?", (episode_id, episode_id + "%"))
        if len(rows) > 1:
            raise TraceError(f"trace id prefix '{episode_id}' matches {len(rows)} episodes; give more characters")
        return EpisodeRow.of(rows[0]) if rows else None

    def episodes(self, *, run_id: str | None = None, no_run: bool = False, ids: Sequence[str] | None = None,
                 strategy: str | None = None, newest_first: bool = False,
                 limit: int | None = None) -> list[EpisodeRow]:
        """Episode rows passing every given filter, oldest first (or newest first), at most ``limit``.

        ``no_run``: only episodes without a run id; ``ids``: only these episodes (empty: none).
        """
        where: list[str] = []
        params: list[Any] = []
        if strategy:
            where.append("strategy = ?")
            params.append(strategy)
        if no_run:
            where.append("(run_id IS NULL OR run_id = '')")
        elif run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        if ids is not None:
            if not ids:
                return []
            where.append(f"id IN ({_marks(ids)})")
            params.extend(ids)
        sql = "SELECT * FROM episodes" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY started DESC, rowid DESC" if newest_first else " ORDER BY started, rowid"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [EpisodeRow.of(r) for r in self.query(sql, params)]

    def episode_ids(self, *, run_id: str | None = None, finished: bool = False, limit: int | None = None) -> list[str]:
        """Episode ids (of one run, if given; only finished ones with ``finished``), oldest first."""
        where: list[str] = ["finished = 1"] if finished else []
        params: list[Any] = []
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        sql = "SELECT id FROM episodes" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY started, rowid"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [r["id"] for r in self.query(sql, params)]

    def episode_for_task(self, run_id: str, task_id: str) -> EpisodeRow | None:
        """The (first) episode of ``run_id`` for ``task_id``, or None."""
        rows = self.query("SELECT * FROM episodes WHERE run_id = ? AND task_id = ? ORDER BY started, rowid LIMIT 1",
                          (run_id, task_id))
        return EpisodeRow.of(rows[0]) if rows else None

    def counted_episodes(self, run_id: str) -> list[EpisodeRow]:
        """The run's counted episodes (finished, not interrupted or cancelled), one per
        (task, strategy, epoch) -- the first to start (``meta_value()`` decodes their meta)."""
        rows = self.query(f"SELECT * FROM episodes WHERE run_id = ? AND {COUNTED} ORDER BY started, rowid", (run_id,))
        seen: set[tuple[Any, ...]] = set()
        kept = []
        for row in map(EpisodeRow.of, rows):
            key = (row.task_id, row.strategy, row.epoch)
            if key not in seen:
                seen.add(key)
                kept.append(row)
        return kept

    def scored_history(self, limit: int, split: str | None = None) -> list[EpisodeRow]:
        """Finished episodes whose meta has a score (``score``, or ``result.score`` where an episode's
        answer carried one), latest ended first; with ``split``, only those whose task's
        ``metadata.split`` is ``split`` (filtered in the database: no other episode is read)."""
        sql = ("SELECT * FROM episodes WHERE finished = 1 AND (json_extract(meta, '$.score') IS NOT NULL "
               "OR json_extract(meta, '$.result.score') IS NOT NULL)")
        params: list[Any] = []
        if split is not None:
            sql += " AND json_extract(task, '$.metadata.split') = ?"
            params.append(split)
        return [EpisodeRow.of(r) for r in self.query(sql + " ORDER BY ended DESC LIMIT ?", (*params, limit))]

    def worked_programs(self, limit: int, split: str = "train") -> list[tuple[str, str]]:
        """(task prompt, program) of the latest correct episodes on ``split`` whose answer is what a
        program printed (``meta.result.program_ok``, kept in format): each episode's last python run
        that returned ``ok``, newest episode first; at most ``limit``, and only programs whose shape
        was right in most of its runs (:mod:`._library`). What the coder's program library
        (:meth:`orchestrion.runtime.context.RunContext.worked_programs`) shows."""
        rows = self.query(
            "SELECT e.id AS episode, json_extract(e.task, '$.prompt') AS prompt, "
            "json_extract(e.meta, '$.correct') AS correct, "
            "json_extract(s.attrs, '$.args.code') AS code FROM episodes e JOIN spans s ON s.episode_id = e.id "
            "WHERE e.finished = 1 AND json_extract(e.meta, '$.result.program_ok') = 1 "
            "AND json_extract(e.meta, '$.result.out_of_format') IS NULL "
            "AND json_extract(e.task, '$.metadata.split') = ? AND s.kind = 'tool' "
            "AND json_extract(s.attrs, '$.tool') = 'python' AND s.status = 'ok' "
            "ORDER BY e.ended DESC, s.ended DESC", (split,))
        runs: dict[str, tuple[str, str, bool]] = {}
        for r in rows:
            if r["episode"] not in runs and isinstance(r["prompt"], str) and isinstance(r["code"], str) and r["code"]:
                runs[r["episode"]] = (r["prompt"], r["code"], r["correct"] == 1)
        return trusted_programs(runs.values(), limit)

    def task_prompts(self, run_id: str) -> set[str]:
        """The distinct task prompts of the run's episodes."""
        rows = self.query("SELECT DISTINCT json_extract(task, '$.prompt') AS p FROM episodes WHERE run_id = ?",
                          (run_id,))
        return {r["p"] for r in rows if isinstance(r["p"], str) and r["p"]}

    def scored_episodes_of(self, prompts: Collection[str]) -> list[EpisodeRow]:
        """Finished episodes with a ``meta.score`` whose task prompt is one of ``prompts``, oldest first."""
        rows: list[dict[str, Any]] = []
        for part in _chunks(sorted(prompts)):
            rows += self.query(
                "SELECT * FROM episodes WHERE finished = 1 AND json_extract(meta, '$.score') IS NOT NULL "
                f"AND json_extract(task, '$.prompt') IN ({_marks(part)})", part)
        return sorted(map(EpisodeRow.of, rows), key=lambda e: (e.started, e.id))

    # -- spans, events, decisions -------------------------------------------------------------
    def ok_tool_names(self, episode_ids: Collection[str], tools: Collection[str]) -> dict[str, list[str]]:
        """Per episode of ``episode_ids`` that called one of ``tools`` and got ``ok``: those tools,
        each once, in the order they were first called."""
        found: dict[str, list[str]] = {}
        names = sorted(tools)
        for part in _chunks(sorted(episode_ids)) if names else ():
            for r in self.query(f"SELECT episode_id, name FROM spans WHERE kind = 'tool' AND status = 'ok' AND "
                                f"name IN ({_marks(names)}) AND episode_id IN ({_marks(part)}) ORDER BY started, rowid",
                                (*names, *part)):
                called = found.setdefault(r["episode_id"], [])
                if r["name"] not in called:
                    called.append(r["name"])
        return found

    def spans(self, episode_id: str, *, kinds: Sequence[str] | None = None, exclude_kinds: Sequence[str] = (),
              since: float | None = None, attrs: bool = True) -> list[SpanRow]:
        """The episode's spans by start time: only ``kinds`` (if given), none of ``exclude_kinds``,
        started at or after ``since``; ``attrs=False`` leaves the attrs column out (it reads None)."""
        cols = "*" if attrs else ("id, episode_id, parent_id, kind, name, started, ended, status, input_tokens, "
                                  "output_tokens, cost_usd, cost_units")
        sql = f"SELECT {cols} FROM spans WHERE episode_id = ?"
        params: list[Any] = [episode_id]
        if kinds is not None:
            sql += f" AND kind IN ({_marks(kinds)})"
            params.extend(kinds)
        if exclude_kinds:
            sql += f" AND kind NOT IN ({_marks(exclude_kinds)})"
            params.extend(exclude_kinds)
        if since is not None:
            sql += " AND started >= ?"
            params.append(since)
        return [SpanRow.of(r) for r in self.query(sql + " ORDER BY started, rowid", params)]

    def events(self, episode_id: str) -> list[EventRow]:
        """The episode's events in the order they were written."""
        return [EventRow.of(r) for r in self.query("SELECT * FROM events WHERE episode_id = ? ORDER BY id",
                                                   (episode_id,))]

    @overload
    def decisions(self, episode_id: str, *, span_attrs: Literal[False] = False) -> list[DecisionRow]: ...

    @overload
    def decisions(self, episode_id: str, *, span_attrs: Literal[True]) -> list[DecisionSpanRow]: ...

    def decisions(self, episode_id: str, *, span_attrs: bool = False) -> list[DecisionRow] | list[DecisionSpanRow]:
        """The episode's decision attempts by (seq, attempt); ``span_attrs``: each row also has its
        decision span's ``attrs`` (as stored) as ``span_attrs`` (:class:`DecisionSpanRow`)."""
        if span_attrs:
            return [DecisionSpanRow.of(r) for r in self.query(
                "SELECT d.*, s.attrs AS span_attrs FROM decisions d LEFT JOIN spans s ON s.id = d.span_id "
                "WHERE d.episode_id = ? ORDER BY d.seq, d.attempt",
                (episode_id,),
            )]
        return [DecisionRow.of(r) for r in self.query(
            "SELECT * FROM decisions WHERE episode_id = ? ORDER BY seq, attempt", (episode_id,))]

    def decision_validity(self, episode_ids: Sequence[str]) -> list[bool]:
        """Whether each decision attempt of these episodes was valid (one entry per attempt)."""
        if not episode_ids:
            return []
        rows = self.query(f"SELECT valid FROM decisions WHERE episode_id IN ({_marks(episode_ids)})",
                          tuple(episode_ids))
        return [bool(r["valid"]) for r in rows]

    # -- aggregates over a run -----------------------------------------------------------------
    def decision_counts(self, run_id: str) -> dict[str, tuple[int, int]]:
        """Per episode of the run that made decisions: (invalid attempts, attempts)."""
        rows = self.query(
            "SELECT d.episode_id AS ep, SUM(d.valid = 0) AS bad, COUNT(*) AS n FROM decisions d "
            "JOIN episodes e ON e.id = d.episode_id WHERE e.run_id = ? GROUP BY d.episode_id", (run_id,))
        return {r["ep"]: (int(r["bad"] or 0), int(r["n"])) for r in rows}

    def prompt_reuse(self, run_id: str) -> dict[str, tuple[int, int]]:
        """Per episode of the run: prompt tokens its model calls reused from a cached prefix, and
        prompt tokens they evaluated (calls whose backend reports neither are left out)."""
        rows = self.query(
            "SELECT s.episode_id AS ep, SUM(json_extract(s.attrs, '$.prompt_reused')) AS reused, "
            "SUM(json_extract(s.attrs, '$.prompt_evaluated')) AS evaluated FROM spans s "
            "JOIN episodes e ON e.id = s.episode_id WHERE e.run_id = ? AND s.kind = 'call' "
            "AND json_extract(s.attrs, '$.prompt_evaluated') IS NOT NULL GROUP BY 1", (run_id,))
        return {r["ep"]: (int(r["reused"] or 0), int(r["evaluated"] or 0)) for r in rows}

    def span_label_counts(self, run_id: str, kinds: Sequence[str], attr: str) -> dict[str, Counter[str]]:
        """Per episode of the run: how many spans of ``kinds`` carry each label, the label being
        the span's ``attrs[attr]`` or, without one, its name."""
        rows = self.query(
            "SELECT s.episode_id AS ep, COALESCE(json_extract(s.attrs, ?), s.name) AS label, COUNT(*) AS n "
            "FROM spans s "
            f"JOIN episodes e ON e.id = s.episode_id WHERE e.run_id = ? AND s.kind IN ({_marks(kinds)}) GROUP BY 1, 2",
            ("$." + attr, run_id, *kinds))
        counts: dict[str, Counter[str]] = defaultdict(Counter)
        for r in rows:
            counts[r["ep"]][str(r["label"])] += int(r["n"])
        return counts
