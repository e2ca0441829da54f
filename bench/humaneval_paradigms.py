"""Seed paradigms on HumanEval with their own examples as feedback, paired against ``direct``.

On a code task whose docstring shows examples, ``topology`` and ``milestone`` write the function
and run those examples on it in the sandbox (``orchestrion.runtime.code_work``; HumanEval's hidden
tests never reach them): ``topology`` makes a parallel round of candidates (a repair of the
executor's first try, the other models' own tries) when the first fails an example and keeps the
one that passes the most; ``milestone`` implements, then tests and repairs, on one model;
``proactive``'s sub-agent implements and tests, and asks the orchestrator for a revision (another
step, then another model) when an example fails; ``para`` runs coder branches on the two coders in
parallel rounds, each checked by the sandbox, and repairs each failing one; ``spec`` has a coder, a
tester and a reviewer, the coder repairing with the review; ``uno``'s (model, direct) pairs write
one after another in utility order (the 1.5B, then the 0.5B), the next only when the examples
fail. All run on the local pool (the
executor and the orchestrator are the 1.5B).

Each row is paired, problem by problem, with ``direct`` on the 1.5B alone from ``bench/humaneval.py``
(same seeded sample, same ``--max-tokens``; run it first), and gets a computed verdict. Rows over
the whole sample and over its ``humaneval@test`` side (the fixed split by id) are printed apart.

    .venv/bin/python bench/humaneval.py --models qwen2.5-coder-1.5b --max-tokens 768 --limit 164
    .venv/bin/python bench/humaneval_paradigms.py --strategies topology --limit 100
    .venv/bin/python bench/humaneval_paradigms.py --report-only --fragment docs/results/humaneval-paradigms.md

Runs are resumable as ``bench/humaneval.py``'s (the same trace store and run-id file).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from _fragment import tee_fragment
from humaneval import COUNTED, Progress, dataset_spec
from humaneval import _key as direct_key
from local_pool import PoolFactory, _load_state, _run, _smaller_run, run_main
from pool_report import scores, verdict

from orchestrion import EvalConfig, TraceStore
from orchestrion.eval.datasets import load_dataset

STRATEGIES = ["topology", "milestone", "proactive", "para", "spec", "uno"]
BASELINE = "qwen2.5-coder-1.5b"
BUDGET = {"wall_s": 600}  # several 768-token calls of the 1.5B on 2 cores; a stop is recorded as budget_exceeded


def _key(args: argparse.Namespace, strategy: str, limit: int) -> str:
    """``all/humaneval/topology[max_tokens=768]@local/100``, in bench/local_pool.py's key shape."""
    return f"{args.split}/humaneval/{strategy}[max_tokens={args.max_tokens}]@local/{limit}" + (
        "" if args.seed == 7 else f"/seed{args.seed}")


def _paired(ours: dict[str, float], base: dict[str, float],
            ids: set[str] | None) -> tuple[int, float, float, float, float]:
    """n, the strategy's and direct's pass@1, their paired difference and its standard error."""
    common = sorted(t for t in ours if t in base and (ids is None or t in ids))
    n = len(common)
    if n == 0:
        return 0, math.nan, math.nan, math.nan, math.nan
    diffs = [ours[t] - base[t] for t in common]
    mean = sum(diffs) / n
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n > 1 else 0.0
    return n, sum(ours[t] for t in common) / n, sum(base[t] for t in common) / n, mean, se


def costs(store: TraceStore, run_id: str) -> dict[str, tuple[float, float, float, str]]:
    """Per counted problem of the run: tokens, seconds, compute units and status."""
    rows = store.query("SELECT e.task_id AS t, e.input_tokens + e.output_tokens AS tok, e.ended - e.started AS s, "
                       f"e.cost_units AS u, e.status AS st FROM episodes e WHERE e.run_id = ? AND {COUNTED}", (run_id,))
    return {str(r["t"]): (float(r["tok"] or 0), float(r["s"] or 0), float(r["u"] or 0), str(r["st"])) for r in rows}


def _cost_cells(ours: dict[str, tuple[float, float, float, str]], base: dict[str, tuple[float, float, float, str]],
                ids: list[str]) -> str:
    """tokens/ep, s/ep, units/ep with its ratio to direct's on the same problems, and the statuses."""
    n = max(1, len(ids))
    tok, sec, units = (sum(ours[t][0] for t in ids) / n, sum(ours[t][1] for t in ids) / n,
                       sum(ours[t][2] for t in ids) / n)
    base_units = sum(base[t][2] for t in ids if t in base) / n
    ratio = f" ({units / base_units:.1f}× direct)" if base_units else ""
    statuses: dict[str, int] = {}
    for t in ids:
        statuses[ours[t][3]] = statuses.get(ours[t][3], 0) + 1
    return (f"{tok:.0f} | {sec:.1f} | {units:.2f}{ratio} | "
            + ", ".join(f"{k}×{v}" for k, v in sorted(statuses.items())))


def report(store: TraceStore, runs: dict[str, str], direct_run: str, args: argparse.Namespace) -> None:
    base = scores(store, direct_run, "direct") if direct_run else {}
    base_costs = costs(store, direct_run) if direct_run else {}
    test_ids = {str(t.id) for t in load_dataset("humaneval@test").tasks}
    print(f"**HumanEval pass@1 with the docstring's examples as feedback, paired with `direct` on {BASELINE}**")
    print(f"\nmax_tokens {args.max_tokens}, seed {args.seed}; `direct`: run {direct_run or '(none yet)'}; "
          "HumanEval is a tuning family for this path (bench/families.py, CODE_TUNING).")
    for side, ids in (("the whole sample", None), ("its humaneval@test side", test_ids)):
        print(f"\n**{side}**\n")
        print("| row | n | pass@1 | direct (1.5B) | paired diff ± se | verdict | tokens/ep | s/ep | units/ep "
              "| statuses |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        rows: list[tuple[float, str]] = []  # (paired difference, line): weak rows first
        for strategy, run_id in runs.items():
            ours = scores(store, run_id, strategy) if run_id else {}
            n, acc, dacc, diff, se = _paired(ours, base, ids)
            if n == 0:
                why = "nothing has run yet" if not run_id else "no problem paired with direct"
                rows.append((math.inf, f"| {strategy} | 0 | - | - | - | {why} | - | - | - | - |"))
                continue
            paired = sorted(t for t in ours if t in base and (ids is None or t in ids))
            rows.append((diff, f"| {strategy} | {n} | {acc:.3f} | {dacc:.3f} | {diff:+.3f} ± {se:.3f} | "
                               f"{verdict(diff, se, n)} | {_cost_cells(costs(store, run_id), base_costs, paired)} |"))
        for _, line in sorted(rows, key=lambda r: r[0]):
            print(line)


async def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help=f"comma-separated, of {', '.join(STRATEGIES)}")
    ap.add_argument("--limit", type=int, default=100, help="problems of the seeded sample (default 100)")
    ap.add_argument("--split", choices=["all", "train", "test"], default="all")
    ap.add_argument("--max-tokens", type=int, default=768, metavar="N", help="output-token limit of each call")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--report-only", action="store_true", help="print the table from what has run; run nothing")
    ap.add_argument("--out", type=Path, default=Path("bench/out/humaneval"))
    ap.add_argument("--fragment", type=Path, default=None, metavar="PATH",
                    help="also write the printed table to PATH (markdown) under a header naming the command")
    args = ap.parse_args()
    strategies = [s for s in args.strategies.split(",") if s]
    if unknown := [s for s in strategies if s not in STRATEGIES]:
        ap.error(f"--strategies: {', '.join(unknown)} has no code-task path; use {', '.join(STRATEGIES)}")
    if args.limit < 1:
        ap.error("--limit must be 1 or more")
    available = len(load_dataset(dataset_spec(args.split)).tasks)
    limit = min(args.limit, available)
    args.out.mkdir(parents=True, exist_ok=True)
    store = TraceStore(args.out / "traces.db")
    state_path = args.out / "state.json"
    try:
        runs: dict[str, str] = {}
        for strategy in strategies:
            key = _key(args, strategy, limit)
            if args.report_only:
                state = _load_state(state_path)
                runs[strategy] = state.get(key) or _smaller_run(key, state) or ""
                continue
            config = EvalConfig(dataset=dataset_spec(args.split), strategies=[strategy], limit=limit, seed=args.seed,
                                concurrency=1, pool="local", budget=BUDGET, options={"max_tokens": args.max_tokens})
            runs[strategy] = await _run(key, config, PoolFactory(), store, _load_state(state_path), state_path,
                                        progress=Progress(strategy))
        store.flush()
        state = _load_state(state_path)
        # direct on the 1.5B over all 164 problems (bench/humaneval.py), else its run of this limit
        direct_args = argparse.Namespace(split="all", max_tokens=args.max_tokens, seed=args.seed, wrapped=False)
        direct_run = state.get(direct_key(direct_args, BASELINE, 164)) or state.get(
            direct_key(direct_args, BASELINE, limit)) or ""
        with tee_fragment(args.fragment):
            report(store, runs, direct_run, args)
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(run_main(main))
