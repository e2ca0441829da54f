"""Per-strategy summaries of an evaluation run, read back from the trace store.

Only counted episodes enter a summary: finished (closing update committed) and not
interrupted. If a (task, strategy, epoch) somehow has more than one, the first
one to start counts. Scores come from the top level of the episode meta
(``score``, ``correct``), written there by the runner's scorer.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigError
from ..trace.rows import EpisodeRow
from ..trace.store import TraceStore

# Dataset kinds scored by running code: their summaries carry pass@k.
CODE_KINDS = frozenset({"humaneval"})


@dataclass
class StrategySummary:
    """One strategy's results over one run."""

    strategy: str
    episodes: int
    tasks: int
    epochs: int
    accuracy: float
    stderr: float
    pass_at_k: dict[int, float]
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    cost_units: float
    wall_s: float
    mean_wall_s: float
    invalid_action_rate: float
    models: dict[str, int] = field(default_factory=dict)
    tools: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    # grounding: of the episodes in which some tool/agent result was itself a correct answer,
    # how many ended with a correct final answer (None: no such episode)
    grounded_episodes: int = 0
    grounding_rate: float | None = None
    # prompt tokens reused from a cached prefix / evaluated, over calls whose backend reports them
    prompt_reused: int = 0
    prompt_evaluated: int = 0

    @property
    def reuse_rate(self) -> float | None:
        """Share of prompt tokens not evaluated again (None when no backend reported it)."""
        total = self.prompt_reused + self.prompt_evaluated
        return self.prompt_reused / total if total else None


def run_info(store: TraceStore, run_id: str) -> dict[str, Any]:
    """The ``runs`` row (an id prefix is enough) with ``config`` decoded."""
    rows = store.runs_matching(run_id)
    if not rows:
        raise ConfigError(f"no run '{run_id}' in {store.path}; `orchestrion eval` prints the run id when it starts")
    if len(rows) > 1:
        raise ConfigError(f"run id prefix '{run_id}' matches {len(rows)} runs in {store.path}; give more characters")
    return {**dataclasses.asdict(rows[0]), "config": rows[0].config_value()}


def counted_episodes(store: TraceStore, run_id: str) -> list[EpisodeRow]:
    """The run's counted episodes, one per (task, strategy, epoch) (used by the runner for resume too)."""
    return store.counted_episodes(run_id)


def summarize(store: TraceStore, run_id: str) -> list[StrategySummary]:
    """One summary per strategy, in the order the run lists its strategies."""
    info = run_info(store, run_id)
    config = info["config"]
    episodes = counted_episodes(store, info["id"])
    by_strategy: dict[str, list[EpisodeRow]] = defaultdict(list)
    for ep in episodes:
        by_strategy[ep.strategy].append(ep)
    order = [s for s in config.get("strategies", []) if s in by_strategy]
    order += [s for s in by_strategy if s not in order]
    ids = {ep.id for ep in episodes}
    invalid, attempts = _decision_counts(store, info["id"], ids)
    models = _span_counts(store, info["id"], ids, ("call",), "model")
    tools = _span_counts(store, info["id"], ids, ("tool", "agent"), "tool")
    code = config.get("dataset_kind") in CODE_KINDS
    reuse = store.prompt_reuse(info["id"])
    return [_summary(name, by_strategy[name], invalid, attempts, models, tools, code, reuse) for name in order]


def _summary(name: str, eps: list[EpisodeRow], invalid: Counter[str], attempts: Counter[str],
             models: dict[str, Counter[str]], tools: dict[str, Counter[str]], code: bool,
             reuse: dict[str, tuple[int, int]]) -> StrategySummary:
    per_task: dict[str | None, list[EpisodeRow]] = defaultdict(list)
    for ep in eps:
        per_task[ep.task_id].append(ep)
    means = [sum(_score(e) for e in group) / len(group) for group in per_task.values()]
    accuracy = sum(means) / len(means) if means else 0.0
    stderr = _stderr(means)
    epochs = len({ep.epoch for ep in eps})
    walls = [max(0.0, (ep.ended or ep.started) - ep.started) for ep in eps]
    costs = [ep.cost_usd for ep in eps]
    ids = [ep.id for ep in eps]
    had = [ep for ep in eps if ep.meta_value().get("evidence_correct")]
    n_attempts = sum(attempts[i] for i in ids)
    return StrategySummary(
        strategy=name, episodes=len(eps), tasks=len(per_task), epochs=epochs,
        accuracy=accuracy, stderr=stderr,
        pass_at_k=_pass_at_k(per_task, epochs) if code else {},
        input_tokens=sum(ep.input_tokens or 0 for ep in eps),
        output_tokens=sum(ep.output_tokens or 0 for ep in eps),
        cost_usd=None if any(c is None for c in costs) else float(sum(c for c in costs if c is not None)),
        cost_units=float(sum(ep.cost_units or 0 for ep in eps)),
        wall_s=sum(walls), mean_wall_s=sum(walls) / len(walls) if walls else 0.0,
        invalid_action_rate=sum(invalid[i] for i in ids) / n_attempts if n_attempts else 0.0,
        models=_merge(models, ids), tools=_merge(tools, ids),
        statuses=dict(Counter(ep.status for ep in eps).most_common()),
        grounded_episodes=len(had),
        grounding_rate=sum(1 for ep in had if ep.meta_value().get("correct")) / len(had) if had else None,
        prompt_reused=sum(reuse.get(i, (0, 0))[0] for i in ids),
        prompt_evaluated=sum(reuse.get(i, (0, 0))[1] for i in ids),
    )


def _score(ep: EpisodeRow) -> float:
    value = ep.meta_value().get("score")
    return float(value) if isinstance(value, (int, float)) else 0.0


def _stderr(values: list[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return math.sqrt(var / n)


def _pass_at_k(per_task: dict[str | None, list[EpisodeRow]], epochs: int) -> dict[int, float]:
    from .scorers import pass_at_k

    result: dict[int, float] = {}
    for k in sorted({1, max(1, epochs)}):
        values = [pass_at_k(len(g), sum(1 for e in g if e.meta_value().get("correct")), k)
                  for g in per_task.values() if len(g) >= k]
        if values:
            result[k] = sum(values) / len(values)
    return result


def _decision_counts(store: TraceStore, run_id: str, ids: set[str]) -> tuple[Counter[str], Counter[str]]:
    invalid: Counter[str] = Counter()
    attempts: Counter[str] = Counter()
    for ep, (bad, n) in store.decision_counts(run_id).items():
        if ep in ids:
            invalid[ep], attempts[ep] = bad, n
    return invalid, attempts


def _span_counts(store: TraceStore, run_id: str, ids: set[str], kinds: tuple[str, ...],
                 attr: str) -> dict[str, Counter[str]]:
    """Per counted episode: span labels (``attrs[attr]``, else the span name) of the given kinds."""
    return {ep: c for ep, c in store.span_label_counts(run_id, kinds, attr).items() if ep in ids}


def _merge(counts: dict[str, Counter[str]], ids: list[str]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for i in ids:
        total.update(counts.get(i, Counter()))
    return dict(total.most_common())


# -- the table ------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """A column of a :class:`TextTable`: its header, and how the terminal shows it."""

    header: str
    right: bool = False  # numbers: right-aligned
    bold: bool = False


@dataclass
class TextTable:
    """A table as plain text cells (no markup): ``orchestrion eval`` prints it (the CLI draws it
    with rich) and ``report.md`` holds it as markdown."""

    columns: list[Column]
    rows: list[list[str]] = field(default_factory=list)
    title: str = ""


def summary_table(summaries: list[StrategySummary], *, title: str = "") -> TextTable:
    """The summary table: one row per strategy."""
    code = any(s.pass_at_k for s in summaries)
    ks = sorted({k for s in summaries for k in s.pass_at_k})
    columns = [Column("strategy", bold=True), Column("episodes", right=True),
               Column("accuracy (mean@k ± se)", right=True)]
    if code:
        columns += [Column(f"pass@{k}", right=True) for k in ks]
    columns += [Column(name, right=True)
                for name in ("grounding", "tokens in/out", "reused", "cost", "wall total / mean", "invalid actions")]
    columns += [Column("models"), Column("tools"), Column("statuses")]
    table = TextTable(columns, title=title)
    for s in summaries:
        row = [s.strategy, f"{s.episodes} ({s.tasks}×{s.epochs})", f"{s.accuracy:.3f} ± {s.stderr:.3f}"]
        if code:
            row += [f"{s.pass_at_k[k]:.3f}" if k in s.pass_at_k else "-" for k in ks]
        row += [
            "-" if s.grounding_rate is None else f"{s.grounding_rate:.2f} ({s.grounded_episodes})",
            f"{s.input_tokens}/{s.output_tokens}",
            "-" if s.reuse_rate is None else f"{s.reuse_rate:.0%}",
            "unknown" if s.cost_usd is None else f"${s.cost_usd:.6f}",
            f"{s.wall_s:.1f}s / {s.mean_wall_s:.2f}s",
            f"{s.invalid_action_rate:.1%}",
            _counts(s.models), _counts(s.tools), _counts(s.statuses),
        ]
        table.rows.append(row)
    return table


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}×{v}" for k, v in counts.items()) or "-"
