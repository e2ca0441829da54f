"""The ``@train`` arm table that ``bench/local_pool.py`` prints: what ``auto`` learned from, per task.

For each task, every history arm's accuracy on the ``@train`` sample, its difference from
``direct`` on the strongest model paired by example (the rule ``auto`` itself uses to leave
``direct``), and its compute units per episode as a multiple of that ``direct``'s. A reader can
check from it which arm ``auto`` should take on a family it has just met.

Under each task's arms, the **oracle** row picks, for every example all the arms ran, the best of
their scores: the accuracy that choosing an arm per example could reach at best, and so the room
there is above ``direct`` for ``auto`` (or a trained orchestrator) to win. When the oracle is not
above ``direct``, no choice among these arms can gain on that family.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from orchestrion import TraceStore, summarize
from orchestrion.strategies.auto import paired_difference

Runs = Mapping[str, Mapping[str, tuple[str, str]]]  # task -> label -> (run id, strategy)


def train_arm_lines(store: TraceStore, runs: Runs, base_label: str,
                    scores: Callable[[TraceStore, str, str], dict[str, float]]) -> list[str]:
    """The markdown table's lines; empty when no history has run."""
    lines = ["| task | arm | n | accuracy ± se | paired vs " + base_label + " | compute units × direct |",
             "|---|---|---|---|---|---|"]
    for task, labels in runs.items():
        base = labels.get(base_label)
        if base is not None and not base[0]:  # not run yet (--report-only mid-run): "" would match every run
            base = None
        base_scores = scores(store, *base) if base else {}
        base_units = _units(store, base[0]) if base else 0.0
        scored: list[dict[str, float]] = []
        for label, (run_id, strategy) in labels.items():
            if not run_id:
                continue
            arm = scores(store, run_id, strategy)
            scored.append(arm)
            for s in summarize(store, run_id):
                units = s.cost_units / max(1, s.episodes)
                paired = _paired(arm, base_scores) if base and label != base_label else "-"
                ratio = f"{units / base_units:.1f}×" if base_units else "-"
                lines.append(f"| {task} | {label} | {s.episodes} | {s.accuracy:.2f} ± {s.stderr:.2f} | {paired} "
                             f"| {ratio} |")
        best = oracle(scored)
        if len(scored) > 1 and best:
            acc, acc_se, n = paired_difference(best, dict.fromkeys(best, 0.0))  # its mean and se
            paired = _paired(best, base_scores) if base else "-"
            lines.append(f"| {task} | oracle: best of these {len(scored)} arms per example | {n} "
                         f"| {acc:.2f} ± {acc_se:.2f} | {paired} | - |")
    return lines if len(lines) > 2 else []


def _paired(scored: dict[str, float], base: dict[str, float]) -> str:
    diff, se, _ = paired_difference(scored, base)
    return f"{diff:+.2f} ± {se:.2f}"


def oracle(scored: list[dict[str, float]]) -> dict[str, float]:
    """The best score per example over the examples every run in ``scored`` scored."""
    if not scored:
        return {}
    common = set(scored[0]).intersection(*scored[1:])
    return {example: max(s[example] for s in scored) for example in sorted(common)}


def _units(store: TraceStore, run_id: str) -> float:
    summaries = summarize(store, run_id)
    return summaries[0].cost_units / max(1, summaries[0].episodes) if summaries else 0.0
