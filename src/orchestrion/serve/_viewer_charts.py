"""The viewer's charts: accuracy, cost and latency per strategy over time, across episodes or runs.

:func:`charts` groups episode summaries (as the list filters them) into points, one per strategy
and x position, where the x position is either a time bucket (``by="time"``: the span from the
first to the last episode cut into at most ``MAX_BUCKETS`` equal parts) or a run (``by="run"``:
one point per run, placed at its first episode's start; episodes outside any run form a "(no run)"
group). Each point holds:

- ``accuracy``: correct / scored among its episodes (None when none was scored: unknown, never 0);
- ``cost_usd``: the mean cost of the episodes whose cost is known (None when none is known);
- ``wall_s``: the mean wall time of the finished episodes;
- ``n``, ``scored``, ``costed``: how many episodes each mean rests on.

The page draws the three series as plain SVG line charts (``static/charts.js``): no chart library.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

MAX_BUCKETS = 12
BY = ("time", "run")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _point(x: float, label: str, group: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [s["correct"] for s in group if s["correct"] is not None]
    costs = [float(s["cost_usd"]) for s in group if s["cost_usd"] is not None]
    walls = [float(s["wall_s"]) for s in group if s["wall_s"] is not None and s["finished"]]
    return {"x": x, "label": label, "n": len(group), "scored": len(scored), "costed": len(costs),
            "accuracy": (sum(1 for c in scored if c) / len(scored)) if scored else None,
            "cost_usd": _mean(costs), "wall_s": _mean(walls)}


def _bucket_keys(summaries: list[dict[str, Any]], by: str) -> dict[str, tuple[float, str]]:
    """Each episode id's (x, label) position."""
    timed = [s for s in summaries if s["started"] is not None]
    if by == "run":
        first: dict[str, float] = {}
        for s in timed:
            key = s["run_id"] or "-"
            first[key] = min(first.get(key, s["started"]), s["started"])
        return {s["id"]: (first[s["run_id"] or "-"], s["run_id"] or "(no run)") for s in timed}
    if not timed:
        return {}
    lo, hi = min(s["started"] for s in timed), max(s["started"] for s in timed)
    width = (hi - lo) / MAX_BUCKETS or 1.0
    out = {}
    for s in timed:
        i = min(int((s["started"] - lo) / width), MAX_BUCKETS - 1)
        out[s["id"]] = (lo + (i + 0.5) * width if hi > lo else lo, "")
    return out


def charts(summaries: list[dict[str, Any]], by: str = "time") -> dict[str, Any]:
    """Per strategy, the points of the accuracy, cost and latency charts (see the module doc)."""
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}; got '{by}'")
    where = _bucket_keys(summaries, by)
    groups: dict[str, dict[tuple[float, str], list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for s in summaries:
        if s["id"] in where:
            groups[s["strategy"] or "?"][where[s["id"]]].append(s)
    series = [{"strategy": name, "points": [_point(x, label, group) for (x, label), group in sorted(points.items())]}
              for name, points in sorted(groups.items())]
    return {"by": by, "episodes": len(where), "series": series,
            "metrics": [{"key": "accuracy", "title": "Accuracy (correct / scored)", "unit": "share"},
                        {"key": "cost_usd", "title": "Mean cost per episode (known costs)", "unit": "usd"},
                        {"key": "wall_s", "title": "Mean latency (wall time per episode)", "unit": "s"}]}
