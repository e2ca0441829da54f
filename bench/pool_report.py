"""The tables ``bench/local_pool.py`` prints (and ``bench/humaneval.py`` borrows): per-task rows,
the mean over tasks, the paired difference from ``direct`` on the strongest model with a verdict,
the count of answers out of their task's format, and the accuracy-against-cost plot."""

from __future__ import annotations

import argparse
import math
from collections import Counter
from pathlib import Path
from typing import Any

from orchestrion import TraceStore, summarize
from orchestrion.eval.summary import StrategySummary
from orchestrion.strategies.auto import paired_difference

STRONGEST = "qwen2.5-coder-1.5b"


def dataset_of(task: str) -> str:
    """The dataset spec of a ``--tasks`` entry: a BIG-bench task name, or a whole spec (it has a
    ``:``) with ``+`` for the commas it cannot hold, e.g. ``bigbench-mix:3:strategyqa+physics+word_unscrambling``."""
    return task.replace("+", ",") if ":" in task else f"bigbench:{task}"


def row(label: str, s: StrategySummary) -> dict[str, Any]:
    return {
        "label": label, "accuracy": s.accuracy, "stderr": s.stderr, "n": s.episodes,
        "grounding": s.grounding_rate, "grounded_n": s.grounded_episodes,
        "tokens": (s.input_tokens + s.output_tokens) / max(1, s.episodes),
        "wall": s.mean_wall_s, "cost": None if s.cost_usd is None else s.cost_usd / max(1, s.episodes),
        "statuses": s.statuses,
    }


def fmt(rows: list[dict[str, Any]], title: str) -> str:
    out = [
        f"\n**{title}**\n",
        "| strategy | accuracy ± se | n | grounding (n) | tokens/episode | s/episode | $/episode (compute) "
        "| statuses |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        grounding = "-" if r["grounding"] is None else f"{r['grounding']:.2f} ({r['grounded_n']})"
        cost = "unknown" if r["cost"] is None else f"{r['cost']:.6f}"
        statuses = ", ".join(f"{k}×{v}" for k, v in r["statuses"].items())
        out.append(f"| {r['label']} | {r['accuracy']:.2f} ± {r['stderr']:.2f} | {r['n']} | {grounding} | "
                   f"{r['tokens']:.0f} | {r['wall']:.1f} | {cost} | {statuses} |")
    return "\n".join(out)


def average(per_task: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    labels: dict[str, list[dict[str, Any]]] = {}
    for rows in per_task.values():
        for r in rows:
            labels.setdefault(r["label"], []).append(r)
    out = []
    for label, rows in labels.items():
        k = len(rows)
        g = [r for r in rows if r["grounding"] is not None]
        grounded_n = sum(r["grounded_n"] for r in g)
        costs = [r["cost"] for r in rows]
        out.append({
            "label": f"{label} ({k} tasks)", "accuracy": sum(r["accuracy"] for r in rows) / k,
            "stderr": math.sqrt(sum(r["stderr"] ** 2 for r in rows)) / k, "n": sum(r["n"] for r in rows),
            "grounding": (sum(r["grounding"] * r["grounded_n"] for r in g) / grounded_n) if grounded_n else None,
            "grounded_n": grounded_n, "tokens": sum(r["tokens"] for r in rows) / k,
            "wall": sum(r["wall"] for r in rows) / k,
            "cost": None if any(c is None for c in costs) else sum(costs) / k, "statuses": _sum_statuses(rows),
        })
    return out


def _sum_statuses(rows: list[dict[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for r in rows:
        for k, v in r["statuses"].items():
            total[k] = total.get(k, 0) + v
    return total


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        if r["cost"] is None:
            continue
        ax.errorbar(r["cost"], r["accuracy"], yerr=r["stderr"], fmt="o", capsize=3)
        ax.annotate(r["label"].split(" (")[0], (r["cost"], r["accuracy"]), textcoords="offset points", xytext=(5, 4),
                    fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("compute cost per episode ($, local models priced by CPU time)")
    ax.set_ylabel("accuracy (mean over tasks)")
    ax.set_title("Local pool: accuracy vs cost")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def scores(store: TraceStore, run_id: str, strategy: str) -> dict[str, float]:
    """Score per task id of the run's counted episodes of ``strategy`` (first epoch)."""
    rows = store.query(
        "SELECT task_id, json_extract(meta, '$.score') AS score FROM episodes WHERE run_id = ? AND strategy = ? "
        "AND finished = 1 AND epoch = 0 AND status NOT IN ('interrupted', 'cancelled', 'retried')", (run_id, strategy))
    return {r["task_id"]: float(r["score"] or 0.0) for r in rows}


def verdict(diff: float, se: float, n: int) -> str:
    if n < 2:
        return "too few examples to judge"
    if diff > 2 * se + 1e-9:  # the bar a claim of a paradigm's gain is held to
        return f"above direct by more than 2 se ({diff:+.3f} ± {se:.3f})"
    if diff > se + 1e-9:  # strictly more than one se (float rounding aside)
        return f"above direct by more than 1 se ({diff:+.2f} ± {se:.2f})"
    if diff >= -se - 1e-9:  # equal counts as not below (a difference of -1/n with se 1/n is exactly -se)
        return f"not below direct minus 1 se ({diff:+.2f} ± {se:.2f})"
    return f"BELOW direct minus 1 se ({diff:+.2f} ± {se:.2f})"


def report(store: TraceStore, runs: dict[str, dict[str, tuple[str, str]]],
           args: argparse.Namespace) -> dict[str, dict[str, tuple[float, float]]]:
    """Print the tables; return each row's paired difference from direct on the 1.5B, by task
    (and, under direct on the 1.5B's own label, its accuracy)."""
    base_label = f"direct on {STRONGEST}"
    by_task: dict[str, dict[str, tuple[float, float]]] = {}
    per_task: dict[str, list[dict[str, Any]]] = {}
    verdicts: list[str] = []
    diffs: dict[str, list[tuple[float, float]]] = {}
    units: dict[str, list[float]] = {}
    for task, labels in runs.items():
        rows = []
        base = scores(store, *labels[base_label]) if base_label in labels else {}
        if base:  # direct's own accuracy (no difference): how much room a family leaves for a gain
            by_task.setdefault(base_label, {})[task] = (sum(base.values()) / len(base), 0.0)
        for label, (run_id, strategy) in labels.items():
            for s in summarize(store, run_id):
                entry = row(label, s)
                entry["units"] = s.cost_units / max(1, s.episodes)
                rows.append(entry)
                units.setdefault(label, []).append(entry["units"])
            if label != base_label and base and label in units:  # a run with no episode yet has no difference
                diff, se, n = paired_difference(scores(store, run_id, strategy), base)
                if n >= 2:  # a run with one example so far (cut short, to be resumed) has no verdict to average
                    diffs.setdefault(label, []).append((diff, se))
                    by_task.setdefault(label, {})[task] = (diff, se)
                if strategy != "direct":
                    verdicts.append(f"| {task} | {label} | {verdict(diff, se, n)} |")
        per_task[task] = rows
        print(fmt(rows, f"{dataset_of(task)}@test, {args.limit} examples (fewer where n says so), seed {args.seed}"),
              flush=True)
    if not per_task:
        return by_task
    avg = average(per_task)
    print(fmt(avg, "Mean over tasks (se: combined from the per-task standard errors)"))
    print("\n**Against direct on the 1.5B model, paired by example** (mean over tasks of the per-task "
          "difference; se combined from the per-task paired standard errors; compute units per episode "
          "as a multiple of direct's)\n")
    print("| strategy | tasks | mean difference ± se | compute units × direct |\n|---|---|---|---|")
    base_units = sum(units.get(base_label, [0.0])) / max(1, len(units.get(base_label, [])))
    for label, ds in diffs.items():
        k = len(ds)
        mean = sum(d for d, _ in ds) / k
        se = mean_se([e for _, e in ds])
        ratio = (sum(units[label]) / len(units[label])) / base_units if base_units else math.inf
        print(f"| {label} | {k} | {mean:+.3f} ± {se:.3f} | {ratio:.1f}× |")
    _print_out_of_format(store, runs)
    print_decisions(store, runs)
    print("\n**Per-task verdicts (each strategy against direct on the 1.5B model)**\n")
    print("| task | strategy | verdict |\n|---|---|---|")
    print("\n".join(verdicts))
    plot(avg, args.out / "accuracy_cost.png")
    return by_task


def mean_se(ses: list[float]) -> float:
    """The se of a mean over tasks, combined from the per-task standard errors (an infinite one,
    from a task too small to judge, is left out)."""
    return math.sqrt(sum(e ** 2 for e in ses if math.isfinite(e))) / len(ses)


def heldout_checks(by_task: dict[str, dict[str, tuple[float, float]]], program_decides: set[str]) -> None:
    """The held-out acceptance lines, computed: no family below direct by more than 1 se, a mean gain of
    at least +0.10, and at least +0.20 on each family whose answer a short program computes. A
    family where direct on the 1.5B already scores above 0.80 leaves no room for +0.20: it is named
    apart, with direct's accuracy (``by_task`` holds that under direct's label, see :func:`report`)."""
    direct = {t: acc for t, (acc, _) in by_task.get(f"direct on {STRONGEST}", {}).items()}
    print("\n**Held-out checks** (each row against direct on the 1.5B model, paired; families run so far)\n")
    print("| row | families | below direct by > 1 se | mean gain ± se (≥ +0.10) "
          "| program-decides families at ≥ +0.20 |")
    print("|---|---|---|---|---|")
    for label, per in by_task.items():
        if label.startswith("direct on "):
            continue
        below = [t for t, (d, se) in per.items() if d < -se - 1e-9]  # as verdict(): exactly -1 se is not below
        mean = sum(d for d, _ in per.values()) / len(per)
        se = mean_se([e for _, e in per.values()])
        decides = {t: d for t, (d, _) in per.items() if t.split(":")[-1] in program_decides}
        full = {t: direct[t] for t in decides if direct.get(t, 0.0) > 0.80 + 1e-9 and decides[t] < 0.20}
        high = sum(1 for d in decides.values() if d >= 0.20)
        room = "".join(f"; no room at {t.split(':')[-1]} (direct {acc:.2f})" for t, acc in full.items())
        print(f"| {label} | {len(per)} | {', '.join(below) or 'none'} | {mean:+.3f} ± {se:.3f} "
              f"({'met' if mean >= 0.10 else 'not met'}) | {high} of {len(decides)}{room} |")


def _print_out_of_format(store: TraceStore, runs: dict[str, dict[str, tuple[str, str]]]) -> None:
    """How many final answers of each row do not fit their task's format (its options, a number),
    read from the trace store. Only direct's own answers may: an arm's or a synthesis's is replaced."""
    from orchestrion.runtime.fit import AnswerFormat
    from orchestrion.runtime.types import Task

    counts: dict[str, list[int]] = {}
    for labels in runs.values():
        for label, (run_id, _) in labels.items():
            for ep in store.episodes(run_id=run_id):
                if not ep.finished:
                    continue
                task = ep.task_value()
                fmt = AnswerFormat.of(Task.model_validate(task)) if isinstance(task, dict) else None
                seen = counts.setdefault(label, [0, 0, 0])
                seen[0] += 1
                if not (ep.answer or "").strip():  # ended with no answer (a budget, an error): nothing was accepted
                    seen[2] += 1
                else:
                    seen[1] += int(fmt is not None and fmt.misfit(ep.answer or "") is not None)
    print("\n**Final answers out of their task's format** (a query over the trace store; episodes that ended "
          "with no answer are counted apart)\n")
    print("| row | episodes | out of format | no answer |\n|---|---|---|---|")
    for label, (n, bad, empty) in counts.items():
        print(f"| {label} | {n} | {bad} | {empty} |")


DECISIONS = (
    "SELECT COUNT(*) AS episodes, SUM((SELECT COUNT(*) FROM decisions d WHERE d.episode_id = e.id)) AS decisions, "
    "GROUP_CONCAT(COALESCE(json_extract(e.meta, '$.result.stop'), '-'), ' ') AS stops "
    "FROM episodes e WHERE e.run_id = ? AND e.finished = 1 AND e.status NOT IN ('interrupted', 'cancelled', 'retried')"
)


def print_decisions(store: TraceStore, runs: dict[str, dict[str, tuple[str, str]]]) -> None:
    """Orchestrator decisions per episode of each row that makes any, over all its tasks, and how
    its loops stopped (``meta.result.stop``), read from the trace store."""
    totals: dict[str, list[int]] = {}
    stops: dict[str, Counter[str]] = {}
    for labels in runs.values():
        for label, (run_id, _) in labels.items():
            (r,) = store.query(DECISIONS, (run_id,))
            seen = totals.setdefault(label, [0, 0])
            seen[0] += int(r["episodes"] or 0)
            seen[1] += int(r["decisions"] or 0)
            stops.setdefault(label, Counter()).update(str(r["stops"] or "").split())
    deciding = {label: t for label, t in totals.items() if t[1]}
    if not deciding:
        return
    print("\n**Orchestrator decisions per episode** (a query over the trace store; stops: how the loops ended)\n")
    print("| row | episodes | decisions per episode | stops |\n|---|---|---|---|")
    for label, (n, d) in deciding.items():
        ends = ", ".join(f"{k}×{v}" for k, v in stops[label].most_common())
        print(f"| {label} | {n} | {d / max(1, n):.2f} | {ends} |")
