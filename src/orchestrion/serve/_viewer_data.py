"""The trace viewer's data: episode summaries with filters, and one episode laid out for the page.

Everything here reads the trace store and returns plain JSON-ready dicts; the
HTTP API (``viewer.py``) and the static export serve the very same dicts, so the
page shows the same views either way.

Search (``q``) keeps episodes whose task prompt holds every word of the query, ignoring
case; paging (``offset``, ``limit``) cuts the filtered list, newest first, and says how many
matched in all. Episodes "of the same task" have the same prompt text (the compare view).
``sort`` orders the list by one column (:data:`SORT_KEYS`; a leading ``-`` reverses it), before
paging: the default, ``-started``, is newest first. Episodes without a value (no score, unknown
cost) come last either way. ``label`` keeps episodes annotated with that label
(``meta.annotation``, written by :meth:`~orchestrion.trace.store.TraceStore.annotate_episode`).

"Correct" comes from a score recorded with the episode: ``meta.correct`` (a
boolean) if present, else ``meta.score`` or ``meta.result.score`` (a number;
``>= CORRECT_AT`` counts as correct). An episode without either is *unknown*,
never "wrong".
"""

from __future__ import annotations

from typing import Any

import orjson

from ..status import EpisodeStatus, ended_badly
from ..trace.rows import EpisodeRow
from ..trace.store import TraceStore
from ._viewer_charts import charts
from ._viewer_diff import action_facets

CORRECT_AT = 0.5
NO_RUN = "-"  # the run filter value for episodes recorded outside any run
CORRECT_VALUES = {"yes": True, "true": True, "1": True, "no": False, "false": False, "0": False, "unknown": None}
# Timeline lanes, top to bottom; kinds not listed get a lane of their own after these.
LANES = ("episode", "round", "milestone", "topology", "decision", "node", "subagent", "step", "agent", "tool", "call")
MAX_TEXT = 20_000  # longer strings in span attributes are cut for the page
MAX_TREE_NODES = 400  # the span-tree graph keeps the shallowest spans beyond this
PAGE = 50  # episodes per page unless the request says otherwise
MAX_PAGE = 1000
MAX_ANSWER = 2000  # a summary's answer (the list shows its start, the full text on hover)
MAX_LABEL, MAX_NOTE = 64, 4000
DEFAULT_SORT = "-started"
# The columns the list sorts by, each a summary's value (None: no value, sorted last).
SORT_KEYS: dict[str, Any] = {
    "started": lambda s: s["started"], "strategy": lambda s: s["strategy"], "status": lambda s: s["status"],
    "score": lambda s: s["score"] if s["score"] is not None else (None if s["correct"] is None else
                                                                  float(s["correct"])),
    "tokens": lambda s: s["input_tokens"] + s["output_tokens"], "cost": lambda s: s["cost_usd"],
    "wall": lambda s: s["wall_s"], "label": lambda s: s["label"],
}


def loads(value: Any) -> Any:
    if not isinstance(value, (str, bytes)):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def score_of(meta: Any) -> tuple[float | None, bool | None]:
    """(score, correct) from an episode's meta; (None, None) when nothing was scored."""
    if not isinstance(meta, dict):
        return None, None
    result = _dict(meta.get("result"))
    score = _number(meta.get("score"))
    if score is None:
        score = _number(result.get("score"))
    for where in (meta, result):
        if isinstance(where.get("correct"), bool):
            return score, where["correct"]
    return score, None if score is None else score >= CORRECT_AT


def parse_correct(value: str | None) -> tuple[bool, bool | None]:
    """(filter on?, wanted value) from a ``correct=`` query value; raises ValueError if unknown."""
    if value is None or value == "":
        return False, None
    key = value.strip().lower()
    if key not in CORRECT_VALUES:
        raise ValueError(f"correct must be one of {', '.join(CORRECT_VALUES)}; got '{value}'")
    return True, CORRECT_VALUES[key]


def _runs(store: TraceStore) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for row in store.runs():
        config = _dict(loads(row.config))
        dataset = config.get("dataset")
        out[row.id] = {"id": row.id, "kind": row.kind, "created": row.created, "status": row.status,
                       "dataset": dataset if isinstance(dataset, str) else None}
    return out


def prompt_of(row: EpisodeRow) -> str:
    """The task prompt of an episode row."""
    task = loads(row.task)
    return str(task.get("prompt", "")) if isinstance(task, dict) else str(task or "")


def matches_text(prompt: str, q: str | None) -> bool:
    """Whether ``prompt`` holds every word of ``q`` (case-insensitive); an empty query matches all."""
    words = (q or "").casefold().split()
    text = prompt.casefold()
    return all(w in text for w in words)


def _summary(row: EpisodeRow, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    task = loads(row.task)
    task = task if isinstance(task, dict) else {"prompt": str(task or "")}
    meta = loads(row.meta)
    score, correct = score_of(meta)
    metadata = _dict(task.get("metadata"))
    dataset = metadata.get("dataset") or (runs.get(row.run_id or "", {}).get("dataset"))
    note = _dict(_dict(meta).get("annotation"))
    ended, started = _number(row.ended), _number(row.started)  # a damaged row lists, without times
    waited = _number(_dict(meta).get("client_wait_s")) or 0.0  # paused for a client's tool results
    return {
        "id": row.id, "run_id": row.run_id, "task_id": row.task_id, "epoch": row.epoch,
        "strategy": row.strategy, "prompt": str(task.get("prompt", ""))[:300],
        "status": row.status, "finished": bool(row.finished),
        "started": started, "ended": ended,
        # the episode's own time, as serve's latency metric counts it: the client's waits left out
        "wall_s": max(0.0, ended - started - waited) if ended is not None and started is not None else None,
        "client_wait_s": waited,
        "input_tokens": row.input_tokens or 0, "output_tokens": row.output_tokens or 0,
        "cost_usd": row.cost_usd, "cost_units": row.cost_units or 0,
        "score": score, "correct": correct, "dataset": dataset if isinstance(dataset, str) else None,
        "answer": _clip(row.answer, MAX_ANSWER) if isinstance(row.answer, str) else None,
        "label": note.get("label") if isinstance(note.get("label"), str) else None,
        "note": note.get("note") if isinstance(note.get("note"), str) else None,
    }


def parse_sort(sort: str | None) -> tuple[str, bool]:
    """(column, descending) from a ``sort=`` value such as ``score`` or ``-cost``; raises ValueError."""
    text = (sort or DEFAULT_SORT).strip()
    key, descending = text.lstrip("-"), text.startswith("-")
    if key not in SORT_KEYS:
        raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)} (a leading '-' reverses it); got '{sort}'")
    return key, descending


def sort_summaries(summaries: list[dict[str, Any]], sort: str | None) -> list[dict[str, Any]]:
    """``summaries`` ordered by ``sort`` (stable: ties keep their newest-first order); no value last."""
    key, descending = parse_sort(sort)
    if key == "started" and descending:
        return summaries  # the store's own order
    value = SORT_KEYS[key]
    known = [s for s in summaries if value(s) is not None]
    return sorted(known, key=value, reverse=descending) + [s for s in summaries if value(s) is None]


def episode_summaries(
    store: TraceStore, *, strategy: str | None = None, run: str | None = None, dataset: str | None = None,
    correct: str | None = None, q: str | None = None, limit: int | None = None, label: str | None = None,
) -> list[dict[str, Any]]:
    """Episodes, newest first, that pass every given filter (empty = no filter)."""
    on, wanted = parse_correct(correct)
    rows = store.episodes(strategy=strategy or None, run_id=run or None, no_run=run == NO_RUN, newest_first=True)
    runs = _runs(store)
    out = []
    for row in rows:
        if q and not matches_text(prompt_of(row), q):
            continue
        s = _summary(row, runs)
        if (dataset and s["dataset"] != dataset) or (on and s["correct"] is not wanted) or (
                label and s["label"] != label):
            continue
        out.append(s)
        if limit is not None and len(out) >= limit:
            break
    return out


def episode_page(
    store: TraceStore, *, strategy: str | None = None, run: str | None = None, dataset: str | None = None,
    correct: str | None = None, q: str | None = None, offset: int = 0, limit: int = PAGE, sort: str | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """One page of :func:`episode_summaries`, sorted by ``sort``: ``episodes``, ``total`` (all that
    match), ``offset``, ``limit``, ``sort``."""
    offset, limit = max(0, offset), min(max(1, limit), MAX_PAGE)
    parse_sort(sort)  # a bad value is refused before anything is read
    found = episode_summaries(store, strategy=strategy, run=run, dataset=dataset, correct=correct, q=q, label=label)
    page = sort_summaries(found, sort)[offset:offset + limit]
    return {"episodes": page, "count": len(page), "total": len(found), "offset": offset, "limit": limit,
            "sort": sort or DEFAULT_SORT}


def same_task(store: TraceStore, prompt: str) -> list[dict[str, Any]]:
    """Brief summaries, newest first, of every episode whose prompt is ``prompt``."""
    runs = _runs(store)
    return [_brief(_summary(row, runs)) for row in store.episodes(newest_first=True) if prompt_of(row) == prompt]


def _brief(s: dict[str, Any]) -> dict[str, Any]:
    return {k: s[k] for k in ("id", "strategy", "status", "finished", "correct", "started", "run_id")}


def facets(store: TraceStore) -> dict[str, Any]:
    """What the filters can choose from, and one line per run."""
    runs = _runs(store)
    summaries = episode_summaries(store)
    per_run: dict[str, dict[str, Any]] = {}
    for s in summaries:
        key = s["run_id"] or NO_RUN
        entry = per_run.setdefault(key, {**runs.get(key, {"id": key, "kind": None, "created": None, "status": None,
                                                          "dataset": None}), "episodes": 0, "scored": 0, "correct": 0})
        entry["episodes"] += 1
        entry["scored"] += s["correct"] is not None
        entry["correct"] += s["correct"] is True
    for key, run in runs.items():
        per_run.setdefault(key, {**run, "episodes": 0, "scored": 0, "correct": 0})
    return {
        "source": str(store.path),
        "strategies": sorted({s["strategy"] for s in summaries if s["strategy"]}),
        "datasets": sorted({s["dataset"] for s in summaries if s["dataset"]}),
        "labels": sorted({s["label"] for s in summaries if s["label"]}),
        "runs": sorted(per_run.values(), key=lambda r: (r["id"] == NO_RUN, -(r["created"] or 0), r["id"])),
    }


def _clip(value: Any, limit: int = MAX_TEXT) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f"… [{len(value) - limit} more characters]"
    if isinstance(value, list):
        return [_clip(v) for v in value]
    if isinstance(value, dict):
        return {k: _clip(v) for k, v in value.items()}
    return value


def _lane(kind: str, extra: list[str]) -> str:
    if kind not in LANES and kind not in extra:
        extra.append(kind)
    return kind


def episode_detail(store: TraceStore, episode_id: str,
                   by_prompt: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any] | None:
    """One episode for the page: summary, spans (timed, cost rolled up), graph, decisions, events,
    and the other episodes of the same task (``by_prompt``: precomputed, for bundles)."""
    row = store.episode(episode_id)
    if row is None:
        return None
    prompt = prompt_of(row)
    others = by_prompt.get(prompt, []) if by_prompt is not None else same_task(store, prompt)
    summary = _summary(row, _runs(store))
    t0 = row.started or 0.0
    raw_spans = store.spans(row.id)
    last = max([t0, row.ended or 0.0, *[(s.ended or s.started or 0.0) for s in raw_spans]])
    names = {s.id: s.name for s in raw_spans}
    extra: list[str] = []
    spans = []
    for s in raw_spans:
        start = (s.started or t0) - t0
        spans.append({
            "id": s.id, "parent_id": s.parent_id, "kind": s.kind, "name": s.name, "status": s.status,
            "start": start, "end": None if s.ended is None else s.ended - t0,
            "shown_end": (s.ended if s.ended is not None else last) - t0,
            "input_tokens": s.input_tokens or 0, "output_tokens": s.output_tokens or 0,
            "cost_usd": s.cost_usd, "cost_units": s.cost_units or 0,
            "lane": _lane(s.kind, extra), "attrs": _clip(loads(s.attrs) or {}),
        })
    _add_depth(spans)
    events = [{"id": e.id, "t": (e.ts or t0) - t0, "kind": e.kind, "span_id": e.span_id,
               "span_name": names.get(e.span_id or ""), "data": _clip(loads(e.data))}
              for e in store.events(row.id)]
    decisions = []
    for d in store.decisions(row.id):
        item: dict[str, Any] = {"id": d.id, "seq": d.seq, "attempt": d.attempt, "model": d.model,
                                "schema_name": d.schema_name, "output": d.output, "error": d.error,
                                "span_id": d.span_id}
        item.update(valid=bool(d.valid), t=(d.ts or t0) - t0, span_name=names.get(d.span_id or ""),
                    messages=_clip(loads(d.messages)), action=loads(d.action))
        item["facets"] = action_facets(item["action"]) if d.valid else None
        for key, text in (("prompt_token_ids", d.prompt_token_ids), ("token_ids", d.token_ids),
                          ("logprobs", d.logprobs)):
            value = loads(text)
            item["n_" + key] = len(value) if isinstance(value, list) else None
        decisions.append(item)
    return {
        "summary": summary,
        "task": loads(row.task), "answer": row.answer, "error": row.error,
        "meta": _clip(loads(row.meta)),
        "spans": spans, "lanes": [*LANES, *extra], "graph": plan_graph(spans, events) or span_graph(spans),
        "decisions": decisions, "events": events,
        "same_task": [o for o in others if o["id"] != row.id],
    }


def _add_depth(spans: list[dict[str, Any]]) -> None:
    by_id = {s["id"]: s for s in spans}
    for s in spans:
        depth, parent = 0, by_id.get(s["parent_id"] or "")
        while parent is not None and depth < 64:
            depth, parent = depth + 1, by_id.get(parent["parent_id"] or "")
        s["depth"] = depth


def _short(value: Any, limit: int = 40) -> str:
    text = " ".join(str(value or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plan_graph(spans: list[dict[str, Any]], events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The plan DAG(s) from node spans: one node per subtask, an edge per dependency.

    Dependencies resolve among nodes under the same parent span (one plan). Subtasks a
    plan event lists but that never ran (skipped after a failed dependency) are added
    from that event, so the graph shows the whole plan.
    """
    plans: dict[str, dict[str, dict[str, Any]]] = {}
    # a node span closes "ok" around a failed tool call: its call's status is the node's
    failed = {s["parent_id"]: s["status"] for s in spans if ended_badly(s["status"])}
    for s in spans:
        if s["kind"] == "node":
            status = failed.get(s["id"], s["status"]) if s["status"] == EpisodeStatus.OK else s["status"]
            plans.setdefault(s["parent_id"] or "", {})[s["name"]] = {
                "id": s["id"], "name": s["name"], "status": status, "tool": s["attrs"].get("tool"),
                "task": s["attrs"].get("task"), "deps": list(s["attrs"].get("deps") or []), "span_id": s["id"]}
    if not plans:
        return None
    for e in events:
        subtasks = e["data"].get("subtasks") if isinstance(e["data"], dict) else None
        plan = plans.get(e["span_id"] or "")
        if plan is None or not isinstance(subtasks, list):
            continue
        for sub in subtasks:
            if isinstance(sub, dict) and isinstance(sub.get("id"), str) and sub["id"] not in plan:
                plan[sub["id"]] = {"id": f"{e['span_id']}:{sub['id']}", "name": sub["id"], "status": sub.get("status"),
                                   "tool": sub.get("tool"), "task": sub.get("task"),
                                   "deps": list(sub.get("deps") or []), "span_id": None}
    by_id = {s["id"]: s for s in spans}
    nodes, edges = [], []
    for parent_id, plan in plans.items():
        parent = by_id.get(parent_id)
        prefix = f"{parent['name']} · " if parent is not None and len(plans) > 1 else ""
        for n in plan.values():
            nodes.append({"id": n["id"], "label": f"{prefix}{n['name']}\n{n['tool'] or ''}: {_short(n['task'])}",
                          "kind": "node", "status": n["status"], "span_id": n["span_id"], "group": parent_id,
                          "title": f"{n['name']} [{n['status']}] {n['tool'] or ''}: {_short(n['task'], 300)}"})
            for dep in n["deps"]:
                if dep in plan:
                    edges.append({"from": plan[dep]["id"], "to": n["id"]})
    return {"mode": "plan", "nodes": nodes, "edges": edges}


def span_graph(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """Without a plan: the span tree as the graph (episode → rounds → parallel calls …)."""
    kept = sorted(spans, key=lambda s: (s["depth"], s["start"]))[:MAX_TREE_NODES]
    ids = {s["id"] for s in kept}
    nodes = [{"id": s["id"], "label": f"{s['kind']}\n{_short(s['name'], 30)}", "kind": s["kind"], "status": s["status"],
              "span_id": s["id"], "level": s["depth"],
              "title": f"{s['kind']} {s['name']} [{s['status']}] {s['start']:.3f}s → {s['shown_end']:.3f}s"}
             for s in sorted(kept, key=lambda s: s["start"])]
    edges = [{"from": s["parent_id"], "to": s["id"]} for s in kept if s["parent_id"] in ids]
    return {"mode": "spans", "nodes": nodes, "edges": edges, "truncated": len(spans) - len(kept)}


def bundle(store: TraceStore, limit: int | None = None) -> dict[str, Any]:
    """Everything the static export embeds: facets, summaries and each episode's detail."""
    summaries = episode_summaries(store, limit=limit)
    runs = _runs(store)
    by_prompt: dict[str, list[dict[str, Any]]] = {}
    for row in store.episodes(newest_first=True):
        by_prompt.setdefault(prompt_of(row), []).append(_brief(_summary(row, runs)))
    details = {s["id"]: episode_detail(store, s["id"], by_prompt) for s in summaries}
    return {"static": True, "facets": facets(store), "episodes": summaries, "details": details,
            "charts": {by: charts(summaries, by) for by in ("time", "run")}}
