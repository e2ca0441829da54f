"""One strategy's decisions per episode, before and after a change, on the same examples.

A change to an orchestrator's prompt or loop should change how many decisions its episodes take
without costing answers. This compares two trace stores that ran the same strategy on the same
datasets and examples (``orchestrion eval`` with the same ``--limit`` and ``--seed``): one made by
the code before the change (a git worktree of the older commit on ``PYTHONPATH``), one by the code
after it. Per dataset it prints, for each side, accuracy, orchestrator decisions per episode, model
and tool calls per episode, wall seconds per episode and how the loops stopped; then the paired
accuracy difference (after - before) ± its standard error, and the change in decisions.

The run behind docs/results/para-stop.md (``para``'s stopping line, ANSWERED_HINT)::

    git worktree add /tmp/wt_before 4693342
    for fam in arithmetic/3_digit_multiplication physics; do
      PYTHONPATH=/tmp/wt_before/src .venv/bin/python -m orchestrion eval -d bigbench:$fam@test --limit 8 \\
          --seed 7 -s para --pool local --db bench/out/para-hint/before.db --concurrency 1 \\
          --budget wall_s=300 --set max_rounds=4
      .venv/bin/orchestrion eval -d bigbench:$fam@test --limit 8 --seed 7 -s para --pool local \\
          --db bench/out/para-hint/after.db --concurrency 1 --budget wall_s=300 --set max_rounds=4
    done
    .venv/bin/python bench/decision_counts.py --before bench/out/para-hint/before.db \\
        --after bench/out/para-hint/after.db --fragment docs/results/para-stop.md
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from _fragment import tee_fragment

from orchestrion import TraceStore

EPISODES = (
    "SELECT e.id, json_extract(e.task, '$.metadata.dataset') AS dataset, json_extract(e.task, '$.id') AS task, "
    "json_extract(e.meta, '$.correct') AS correct, json_extract(e.meta, '$.result.stop') AS stop, "
    "e.ended - e.started AS wall, "
    "(SELECT COUNT(*) FROM decisions d WHERE d.episode_id = e.id) AS decisions, "
    "(SELECT COUNT(*) FROM spans s WHERE s.episode_id = e.id AND s.kind = 'call') AS calls, "
    "(SELECT COUNT(*) FROM spans s WHERE s.episode_id = e.id AND s.kind IN ('tool', 'agent')) AS tools "
    "FROM episodes e WHERE e.finished = 1 AND e.strategy = ? AND e.status NOT IN ('interrupted', 'cancelled') "
    "ORDER BY e.started"
)


def episodes(db: Path, strategy: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Per dataset, per task id: the latest finished episode's counts."""
    store = TraceStore(db)
    try:
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for r in store.query(EPISODES, (strategy,)):
            out.setdefault(str(r["dataset"]), {})[str(r["task"])] = dict(r)
        return out
    finally:
        store.close()


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def _se(xs: list[float]) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1) / n)


def side_row(label: str, rows: list[dict[str, Any]]) -> str:
    acc = [float(r["correct"] or 0) for r in rows]
    stops = Counter(str(r["stop"]) for r in rows)
    said = ", ".join(f"{k}×{v}" for k, v in stops.most_common())
    decisions = _mean([r["decisions"] for r in rows])
    return (f"| {label} | {len(rows)} | {_mean(acc):.2f} ± {_se(acc):.2f} | {decisions:.2f} "
            f"| {_mean([r['calls'] for r in rows]):.2f} | {_mean([r['tools'] for r in rows]):.2f} "
            f"| {_mean([r['wall'] for r in rows]):.1f} | {said} |")


def report(before: dict[str, dict[str, dict[str, Any]]], after: dict[str, dict[str, dict[str, Any]]],
           strategy: str) -> list[str]:
    lines = [f"**`{strategy}` before and after, on the same examples** (decisions: orchestrator decisions per "
             "episode; calls: model calls per episode; tools: tool and agent calls per episode)"]
    summary = ["", "**Paired by example (after - before)**", "",
               "| dataset | n | accuracy difference ± se | decisions per episode | verdict |", "|---|---|---|---|---|"]
    for dataset in sorted(set(before) & set(after)):
        shared = sorted(set(before[dataset]) & set(after[dataset]))
        if not shared:
            continue
        b = [before[dataset][t] for t in shared]
        a = [after[dataset][t] for t in shared]
        lines += ["", f"**{dataset}, {len(shared)} examples run on both sides**", "",
                  "| side | n | accuracy ± se | decisions | calls | tools | s/episode | stops |",
                  "|---|---|---|---|---|---|---|---|", side_row("before", b), side_row("after", a)]
        diff = [float(x["correct"] or 0) - float(y["correct"] or 0) for x, y in zip(a, b)]
        d, se = _mean(diff), _se(diff)
        db, da = _mean([r["decisions"] for r in b]), _mean([r["decisions"] for r in a])
        verdict = "not below before minus 1 se" if d >= -se - 1e-12 else "below before by more than 1 se"
        summary.append(f"| {dataset} | {len(shared)} | {d:+.3f} ± {se:.3f} | {db:.2f} → {da:.2f} | {verdict} |")
    return lines + summary


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="trace store of the runs before the change")
    ap.add_argument("--after", type=Path, required=True, help="trace store of the runs after it")
    ap.add_argument("--strategy", default="para")
    ap.add_argument("--fragment", type=Path, default=None, metavar="PATH",
                    help="also write the tables to PATH (markdown), headed by command, commit, date and machine")
    args = ap.parse_args()
    for path in (args.before, args.after):
        if not path.is_file():
            ap.error(f"no trace store at {path}")
    with tee_fragment(args.fragment):
        print("\n".join(report(episodes(args.before, args.strategy), episodes(args.after, args.strategy),
                               args.strategy)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
