"""Choose ``auto``'s ``k``, ``prior_weight`` and ``relative_similarity`` by leave-one-out on ``@train``.

For every past ``@train`` prompt that each candidate arm ran, ``auto``'s rule
(:func:`orchestrion.strategies.auto.choose_arm`) picks an arm from the history *without that
prompt's episodes*; the chosen arm's own score on that prompt is what ``auto`` would have got.
Per task, it prints the paired difference from the first arm (``direct`` on the 1.5B model by
default) with its standard error, the tasks where it falls more than one se below, and the
mean over tasks, for every setting of the grid. Only ``@train`` episodes are read (the split
filter is in the SQL), so the ``@test`` table stays untouched by the choice.

Run from the repository root, after ``bench/local_pool.py`` has built the history::

    .venv/bin/python bench/auto_loo.py --k 12 --prior-weight 2,6,10 --relative-similarity 0.8,0.6,0.5 --safe-z none,1,2

``--test-choices N`` then prints, for each setting, the arms ``auto`` would pick on the first N
``@test`` examples of each task (the sample ``bench/local_pool.py`` runs, same seed) and how many
differ from the first setting's. Only the ``@test`` *prompts* are read, as ``auto`` reads them
when it runs; no ``@test`` episode or score is. It shows which rows of the table a new setting
can change, before any episode is run::

    .venv/bin/python bench/auto_loo.py --k 12 --prior-weight 6 --relative-similarity 0.5 \
        --safe-z none,2 --test-choices 80
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

from orchestrion import TraceStore
from orchestrion.strategies.auto import Outcome, choose_arm, paired_difference, parse_outcomes

sys.path.insert(0, str(Path(__file__).parent))
from local_pool import TASKS  # noqa: E402  (the table's eight tasks)

ARMS = "direct:qwen2.5-coder-1.5b,program:qwen2.5-coder-1.5b,direct:smollm2-135m,direct:qwen2.5-coder-0.5b"


def task_name(task_id: str) -> str:
    """``arithmetic/2_digit_division/17`` -> ``arithmetic/2_digit_division``."""
    return task_id.rsplit("/", 1)[0]


Setting = tuple[int, float, float, float | None]  # k, prior_weight, relative_similarity, safe_z
Paired = dict[str, tuple[dict[str, float], dict[str, float]]]  # task -> (auto's scores, the baseline's)


def leave_one_out(history: list[Outcome], tasks: dict[str, str], arms: list[str], k: int,
                  prior_weight: float, relative_similarity: float, safe_z: float | None = None) -> Paired:
    """Per task: what auto scored on each prompt, and what the first arm scored there."""
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for h in history:
        scores[h.prompt][h.arm].append(h.score)
    out: Paired = defaultdict(lambda: ({}, {}))
    for prompt, by_arm in scores.items():
        if not all(a in by_arm for a in arms):
            continue  # judged only where every arm has a score to fall back on
        rest = [h for h in history if h.prompt != prompt]
        arm = choose_arm(prompt, rest, arms, k=k, prior_weight=prior_weight,
                         relative_similarity=relative_similarity, safe_z=safe_z).arm
        got, base = out[tasks[prompt]]
        got[prompt] = sum(by_arm[arm]) / len(by_arm[arm])
        base[prompt] = sum(by_arm[arms[0]]) / len(by_arm[arms[0]])
    return out


def picks(prompts: list[str], history: list[Outcome], arms: list[str], setting: Setting) -> list[str]:
    """The arm auto's rule picks for each new prompt under one setting, from the whole history."""
    k, pw, rel, z = setting
    return [choose_arm(p, history, arms, k=k, prior_weight=pw, relative_similarity=rel, safe_z=z).arm
            for p in prompts]


def print_test_choices(history: list[Outcome], arms: list[str], grid: list[Setting], tasks: list[str], limit: int,
                 seed: int) -> None:
    """Per task, the arms each setting picks on the @test sample, and how many prompts changed arm."""
    from orchestrion.eval.datasets import load_dataset

    print("\n| task | setting | arms chosen on @test | changed from the first setting |\n|---|---|---|---|")
    for task in tasks:
        prompts = [t.prompt for t in load_dataset(f"bigbench:{task}@test", limit=limit, seed=seed).tasks]
        first: list[str] = []
        for setting in grid:
            picked = picks(prompts, history, arms, setting)
            first = first or picked
            counts = Counter(picked).most_common()
            changed = sum(a != b for a, b in zip(picked, first, strict=True))
            print(f"| {task} | {_label(*setting)} | {', '.join(f'{a} ×{n}' for a, n in counts)} "
                  f"| {changed} of {len(prompts)} |", flush=True)


def _z(z: float | None) -> str:
    return "none" if z is None else f"{z:g}"


def _label(k: int, pw: float, rel: float, z: float | None) -> str:
    return f"k {k}, prior_weight {pw:g}, relative_similarity {rel:g}, safe_z {_z(z)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, default=Path("bench/out/local_pool/traces.db"))
    ap.add_argument("--arms", default=ARMS, help="candidate arms in preference order; the first is the baseline")
    ap.add_argument("--k", default="8,12", help="neighbour counts to try, comma-separated")
    ap.add_argument("--prior-weight", default="2,6,10", help="prior weights to try, comma-separated")
    ap.add_argument("--relative-similarity", default="0.8,0.6", help="neighbour cutoffs to try, comma-separated")
    ap.add_argument("--safe-z", default="none", help="guards of the first arm to try (auto's safe_z), comma-"
                                                     "separated; none = no guard")
    ap.add_argument("--test-choices", type=int, default=0, metavar="N",
                    help="also print the arms each setting picks on the first N @test examples per task")
    ap.add_argument("--tasks", default=",".join(TASKS), help="tasks for --test-choices, comma-separated")
    ap.add_argument("--seed", type=int, default=7, help="the @test sample's seed (bench/local_pool.py's)")
    args = ap.parse_args()
    if not args.db.exists():
        sys.exit(f"{args.db}: no trace database; build the history first with bench/local_pool.py --history-only")
    arms = args.arms.split(",")
    rows = TraceStore(args.db).scored_history(10**6, "train")
    tasks = {r.task_value()["prompt"]: task_name(r.task_id or "?") for r in rows if isinstance(r.task_value(), dict)}
    history = [h for h in parse_outcomes(rows) if h.arm in arms]
    print(f"{len(history)} @train outcomes of {len(arms)} arms over {len(set(tasks.values()))} tasks", file=sys.stderr)
    print("| k | prior_weight | relative_similarity | safe_z | mean difference | tasks below -1 se | per task |\n"
          "|---|---|---|---|---|---|---|")
    guards = [None if z.strip() == "none" else float(z) for z in args.safe_z.split(",")]
    grid: list[Setting] = [(int(k), float(pw), float(rel), z) for k in args.k.split(",")
                           for pw in args.prior_weight.split(",")
                           for rel in args.relative_similarity.split(",") for z in guards]
    for k, pw, rel, z in grid:
        per_task = leave_one_out(history, tasks, arms, k, pw, rel, z)
        diffs = {t: paired_difference(got, base) for t, (got, base) in sorted(per_task.items())}
        below = [t for t, (d, se, _) in diffs.items() if d < -se - 1e-9]
        mean = sum(d for d, _, _ in diffs.values()) / max(1, len(diffs))
        cells = ", ".join(f"{t.split('/')[-1]} {d:+.2f} ± {se:.2f}" for t, (d, se, _) in diffs.items())
        print(f"| {k} | {pw:g} | {rel:g} | {_z(z)} | {mean:+.3f} | {len(below)} "
              f"| {cells} |", flush=True)
    if args.test_choices:
        print_test_choices(history, arms, grid, args.tasks.split(","), args.test_choices, args.seed)


if __name__ == "__main__":
    main()
