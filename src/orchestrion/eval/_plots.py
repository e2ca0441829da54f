"""The report's PNG plots, drawn with matplotlib's object API on the Agg canvas.

matplotlib is imported inside the functions (it is the ``eval`` extra and slow to
import); no pyplot global state is touched, so plotting is safe from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError

if TYPE_CHECKING:
    from .summary import StrategySummary

@dataclass(frozen=True)
class CostAxis:
    """What "cost" means for one report: the value per strategy and how to label it."""

    values: list[float]
    unit: str  # "usd" or "tokens"
    label: str  # the axis label
    note: str = ""  # why tokens stand in for dollars, when they do

    def format(self, value: float) -> str:
        return f"${value:.6f}" if self.unit == "usd" else f"{value:,.0f} tokens"


_FRONT_COLOUR = "#d62728"
_POINT_COLOUR = "#1f77b4"
_LABEL_DY = (6, -16, 20, -30, 34, -44)  # label offsets (points) for 1st, 2nd, ... of nearby points


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("plots need matplotlib; install it with `pip install 'orchestrion[eval]'`") from None
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")


def _label_points(ax: Any, xs: Sequence[float], ys: Sequence[float], names: Sequence[str]) -> None:
    """Name each point; labels of points that nearly coincide are stacked so they stay readable."""
    x_span = max([abs(x) for x in xs] + [0.0]) * 1.15 or 1.0  # the x axis runs from 0 to 1.15 x max
    placed: list[tuple[float, float]] = []
    for x, y, name in zip(xs, ys, names):
        near = sum(1 for px, py in placed if abs(px - x) / x_span < 0.1 and abs(py - y) < 0.06)
        placed.append((x, y))
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(6, _LABEL_DY[near % len(_LABEL_DY)]), fontsize=9)


def _accuracy_limits(ax: Any, ys: Sequence[float], errs: Sequence[float]) -> None:
    top = max([y + e for y, e in zip(ys, errs)] + [1.0])
    bottom = min([y - e for y, e in zip(ys, errs)] + [0.0])
    ax.set_ylim(bottom - 0.05, top + 0.08)


def accuracy_cost(summaries: Sequence[StrategySummary], axis: CostAxis, front: Sequence[int], path: Path,
                  failed: Sequence[str] = ()) -> None:
    """Accuracy against cost; Pareto-optimal strategies in red, joined by the frontier's steps,
    strategies that failed entirely as grey crosses."""
    fig = _figure(7.0, 4.8)
    ax = fig.add_subplot()
    xs, ys = axis.values, [s.accuracy for s in summaries]
    errs = [s.stderr for s in summaries]
    names = [s.strategy for s in summaries]
    lost = [i for i, s in enumerate(summaries) if s.strategy in failed]
    others = [i for i in range(len(summaries)) if i not in front and i not in lost]
    if others:
        ax.errorbar([xs[i] for i in others], [ys[i] for i in others], yerr=[errs[i] for i in others],
                    fmt="o", color=_POINT_COLOUR, ecolor="#9ecae1", capsize=3, label="dominated")
    if lost:
        ax.plot([xs[i] for i in lost], [ys[i] for i in lost], "x", color="grey", markersize=8,
                label="failed entirely")
    if front:
        fx, fy = [xs[i] for i in front], [ys[i] for i in front]
        ax.errorbar(fx, fy, yerr=[errs[i] for i in front], fmt="D", color=_FRONT_COLOUR,
                    ecolor="#f4a6a6", capsize=3, label="Pareto-optimal")
        ax.plot(fx, fy, drawstyle="steps-post", color=_FRONT_COLOUR, linewidth=1.2, alpha=0.7,
                label="Pareto frontier")
    _label_points(ax, xs, ys, names)
    _accuracy_limits(ax, ys, errs)
    ax.set_xlabel(axis.label if len(axis.label) < 70 else axis.label.replace(" (", "\n(", 1))
    ax.set_ylabel("accuracy (mean@k, ± stderr)")
    ax.set_title("Accuracy against cost")
    ax.set_xlim(left=0, right=max(xs + [0.0]) * 1.15 or 1.0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    _save(fig, path)


def accuracy_wall(summaries: Sequence[StrategySummary], path: Path) -> None:
    """Accuracy (± standard error) against mean wall time per episode."""
    fig = _figure(7.0, 4.8)
    ax = fig.add_subplot()
    xs = [s.mean_wall_s for s in summaries]
    ys = [s.accuracy for s in summaries]
    errs = [s.stderr for s in summaries]
    ax.errorbar(xs, ys, yerr=errs, fmt="o", color=_POINT_COLOUR, ecolor="#6baed6", capsize=4)
    _label_points(ax, xs, ys, [s.strategy for s in summaries])
    _accuracy_limits(ax, ys, errs)
    ax.set_xlim(left=0, right=max(xs + [0.0]) * 1.15 or 1.0)
    ax.set_xlabel("mean wall time per episode (s)")
    ax.set_ylabel("accuracy (mean@k, ± stderr)")
    ax.set_title("Accuracy against wall time")
    ax.grid(True, alpha=0.3)
    _save(fig, path)


def usage(summaries: Sequence[StrategySummary], path: Path) -> None:
    """Two panels of stacked bars: model calls and tool calls per strategy."""
    fig = _figure(max(8.0, 1.3 * len(summaries) + 5.0), 4.8)
    left, right = fig.subplots(1, 2)
    names = [s.strategy for s in summaries]
    _stacked(left, names, [s.models for s in summaries], "model calls", "no model calls recorded")
    _stacked(right, names, [s.tools for s in summaries], "tool and agent calls", "no tool calls recorded")
    fig.suptitle("Usage per strategy (total over the run)")
    _save(fig, path)


def _stacked(ax: Any, names: Sequence[str], counts: Sequence[dict[str, int]], title: str, empty: str) -> None:
    keys = sorted({k for c in counts for k in c}, key=lambda k: -sum(c.get(k, 0) for c in counts))
    ax.set_title(title)
    ax.set_ylabel("calls")
    positions = list(range(len(names)))
    ax.set_xticks(positions, names, rotation=30 if len(names) > 3 else 0, ha="right" if len(names) > 3 else "center")
    if not keys:
        ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center", va="center", color="grey")
        ax.set_yticks([])
        return
    bottom = [0.0] * len(names)
    colours = _colours(len(keys))
    for key, colour in zip(keys, colours):
        heights = [float(c.get(key, 0)) for c in counts]
        ax.bar(positions, heights, bottom=bottom, label=key, color=colour, width=0.6)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_ylim(0, max(bottom) * 1.1)


def _colours(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab20" if n > 10 else "tab10"]
    return [cmap(i % cmap.N) for i in range(n)]
