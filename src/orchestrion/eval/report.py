"""Eval reports: a markdown summary of one eval run plus PNG plots.

``write_report(store, run_id)`` reads the run's episodes through
:func:`orchestrion.eval.summary.summarize` and writes, into one folder:

- ``report.md``: the run's configuration, the per-strategy summary table (the
  same columns ``orchestrion eval`` prints), the Pareto-optimal strategies on
  accuracy against cost, and the strategies that failed entirely;
- ``accuracy_cost.png``: accuracy against cost with the Pareto frontier marked;
- ``accuracy_wall.png``: accuracy (± standard error) against mean wall time;
- ``usage.png``: model calls and tool calls per strategy, as stacked bars.

Cost is in dollars only when every strategy's dollar cost is known and some is
non-zero; otherwise it is total tokens, and the axis and the report say why.
An unknown dollar cost is never drawn as 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import ConfigError
from ..trace.store import TraceStore
from . import _plots
from ._plots import CostAxis

if TYPE_CHECKING:
    from .summary import StrategySummary, TextTable

PLOTS = ("accuracy_cost.png", "accuracy_wall.png", "usage.png")
_LIST_SHOWN = 8  # longer lists in the run config (e.g. task ids) are cut in the report


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the ``(cost, accuracy)`` points no other point dominates.

    A point is dominated when another costs no more and scores no less, and is
    strictly better on one of the two. Identical points are all kept. Points with
    a NaN coordinate are never on the front. The result is ordered by cost, then
    by accuracy (highest first), then by index.
    """
    valid = [i for i, (c, a) in enumerate(points) if not (math.isnan(c) or math.isnan(a))]
    front = []
    for i in valid:
        ci, ai = points[i]
        dominated = any(
            points[j][0] <= ci and points[j][1] >= ai and (points[j][0] < ci or points[j][1] > ai)
            for j in valid
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i][0], -points[i][1], i))


def cost_axis(summaries: Sequence[StrategySummary]) -> CostAxis:
    """Dollars when every strategy's cost is known and some is non-zero, else total tokens."""
    dollars = [s.cost_usd for s in summaries]
    if summaries and all(d is not None for d in dollars) and any(d for d in dollars):
        return CostAxis([float(d or 0.0) for d in dollars], "usd", "cost (US dollars, total over the run)")
    tokens = [float(s.input_tokens + s.output_tokens) for s in summaries]
    unknown = [s.strategy for s in summaries if s.cost_usd is None]
    if unknown:
        note = f"the dollar cost is unknown for {', '.join(unknown)}"
    else:
        note = "every model used is priced at $0"
    return CostAxis(tokens, "tokens", f"total tokens, input + output ({note})", note)


def failed_strategies(summaries: Sequence[StrategySummary], planned: Sequence[str] = ()) -> list[str]:
    """Strategies with no successful episode, and planned strategies with no episode at all."""
    failed = [s.strategy for s in summaries if s.episodes == 0 or not s.statuses.get("ok")]
    seen = {s.strategy for s in summaries}
    return failed + [name for name in planned if name not in seen]


def resolve_run(store: TraceStore, run_id: str) -> str:
    """The full id of the run ``run_id`` names (an id or a unique prefix of one)."""
    ids = sorted(r.id for r in store.runs_matching(run_id))
    if run_id in ids:
        return run_id
    if len(ids) > 1:
        raise ConfigError(f"run id prefix '{run_id}' matches {len(ids)} runs; give more characters")
    if not ids:
        recent = store.runs(kind="eval", newest_first=True, limit=3)
        hint = ", ".join(r.id for r in recent)
        more = f"recent eval runs: {hint}; " if hint else ""
        raise ConfigError(
            f"no run '{run_id}' in {store.path}; {more}"
            "list runs with `orchestrion view` (or pass --db for another trace database)"
        )
    return str(ids[0])


@dataclass
class Report:
    """What :func:`write_report` wrote."""

    run_id: str
    out_dir: Path
    markdown: Path
    plots: list[Path] = field(default_factory=list)
    pareto: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        return [self.markdown, *self.plots]


def write_report(store: TraceStore, run_id: str, out_dir: str | Path | None = None) -> Report:
    """Write ``report.md`` and the plots for one run; ``out_dir`` defaults to ``report-<id prefix>``."""
    from .summary import run_info, summarize, summary_table

    full_id = resolve_run(store, run_id)
    info = run_info(store, full_id)
    summaries = summarize(store, full_id)
    if not summaries:
        raise ConfigError(f"run '{full_id}' has no episodes to report; run or resume it with `orchestrion eval`")
    out = Path(out_dir) if out_dir is not None else Path(f"report-{full_id[:8]}")
    out.mkdir(parents=True, exist_ok=True)
    axis = cost_axis(summaries)
    failed = failed_strategies(summaries, _planned(info))
    candidates = [i for i, s in enumerate(summaries) if s.strategy not in failed]
    front = [candidates[i] for i in pareto_front([(axis.values[i], summaries[i].accuracy) for i in candidates])]
    plots = [out / name for name in PLOTS]
    _plots.accuracy_cost(summaries, axis, front, plots[0], failed)
    _plots.accuracy_wall(summaries, plots[1])
    _plots.usage(summaries, plots[2])
    text = render_markdown(full_id, info, summaries, summary_table(summaries), axis, front, failed, plots)
    markdown = out / "report.md"
    markdown.write_text(text, encoding="utf-8")
    return Report(full_id, out, markdown, plots, [summaries[i].strategy for i in front], failed)


def _planned(info: dict[str, Any]) -> list[str]:
    config = info.get("config")
    names = config.get("strategies") if isinstance(config, dict) else None
    if isinstance(names, str):
        return [n.strip() for n in names.split(",") if n.strip()]
    return [str(n) for n in names] if isinstance(names, list) else []


# -- markdown ----------------------------------------------------------------------
def render_markdown(
    run_id: str,
    info: dict[str, Any],
    summaries: Sequence[StrategySummary],
    table: TextTable,
    axis: CostAxis,
    front: Sequence[int],
    failed: Sequence[str],
    plots: Sequence[Path],
) -> str:
    """The text of ``report.md``."""
    lines = [f"# Eval report: run `{run_id}`", "", "## Run", ""]
    lines += _config_lines(info)
    lines += ["", "## Results per strategy", "", markdown_table(table), ""]
    lines.append("Accuracy is mean@k: the mean over tasks of each task's mean score over its epochs, "
                 "± the standard error across tasks.")
    lines += ["", f"## Pareto-optimal strategies (accuracy against {_axis_name(axis)})", ""]
    if axis.note:
        lines += [f"Cost is counted in tokens because {axis.note}.", ""]
    for i in front:
        s = summaries[i]
        lines.append(f"- **{s.strategy}**: accuracy {s.accuracy:.3f} ± {s.stderr:.3f} at {axis.format(axis.values[i])}")
    if not front:
        lines.append("- none (every strategy failed entirely)")
    lines += ["", "## Strategies that failed entirely", ""]
    lines += [f"- {name}" for name in failed] or ["- none"]
    lines += ["", "## Plots", ""]
    lines += [f"![{p.stem.replace('_', ' ')}]({p.name})" for p in plots]
    return "\n".join(lines) + "\n"


def _axis_name(axis: CostAxis) -> str:
    return "dollar cost" if axis.unit == "usd" else "total tokens"


def _config_lines(info: dict[str, Any]) -> list[str]:
    config = info.get("config")
    rows: list[tuple[str, Any]] = [(k, info[k]) for k in ("kind", "status", "created") if info.get(k) is not None]
    if isinstance(config, dict):
        rows += sorted(config.items())
    lines = ["| setting | value |", "| --- | --- |"]
    for key, value in rows:
        if isinstance(value, list) and len(value) > _LIST_SHOWN:
            value = [*value[:_LIST_SHOWN], f"... {len(value)} in all"]
        shown = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
        if key == "created" and isinstance(value, (int, float)):
            import datetime as dt

            shown = dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        lines.append(f"| {_cell(str(key))} | {_cell(shown)} |")
    if len(lines) == 2:
        lines.append("| (no recorded configuration) | |")
    return lines


def markdown_table(table: TextTable) -> str:
    """A table as a GitHub markdown table (one line per row; a short row is padded with empty cells)."""
    width = len(table.columns)
    lines = ["| " + " | ".join(_cell(c.header) for c in table.columns) + " |", "|" + " --- |" * width]
    for row in table.rows:
        cells = [*row[:width], *[""] * (width - len(row))]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
