"""HumanEval pass@1 of ``direct`` on Qwen2.5-Coder-0.5B and -1.5B, next to the Qwen2.5-Coder report's.

``direct`` (one call, the project's own prompt and code extraction, greedy, the pulled GGUF files)
runs on each model alone over HumanEval's problems through ``orchestrion eval``'s runner; each
answer is graded by running HumanEval's tests on it in the sandbox. It prints a table per model
(pass@1 ± se, n, tokens and seconds per episode, answers cut at the token limit, statuses) with
the Qwen2.5-Coder technical report's figure beside it (arXiv 2409.12186, instruct models,
EvalPlus harness: HumanEval pass@1 61.6 for the 0.5B, 70.7 for the 1.5B), the gap in points and a
verdict: "within 6 points", or "gap over 6 points: investigate" (prompt format, stop handling,
code extraction, quantization).

Runs are kept as ``bench/local_pool.py`` keeps its own: one trace database under ``--out``, the
run ids in ``OUT/state.json`` (helpers shared with it), so the same command started again skips
finished runs and resumes an interrupted one; a larger ``--limit`` later extends the smaller run
of the same seeded sample (only the new problems run). ``--split train|test`` takes one side of
the fixed split by id (``humaneval@train``: 118 problems, ``@test``: 46; docs/evaluation.md).

Run from the repository root, after ``orchestrion models pull``::

    .venv/bin/python bench/humaneval.py                      # all 164 problems, both models
    .venv/bin/python bench/humaneval.py --limit 2 --out /tmp/he_smoke
    .venv/bin/python bench/humaneval.py --report-only --fragment docs/results/humaneval.md

Since f50d585 ``direct`` asks a code task as written; the runs made before, with its prompt wrapped,
keep their own keys, and ``--report-only --wrapped`` prints them (docs/results/humaneval.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from _fragment import tee_fragment
from local_pool import BUDGET, PoolFactory, _load_state, _run, _smaller_run, run_main
from pool_report import row as _row

from orchestrion import EvalConfig, TraceStore, summarize
from orchestrion.eval.datasets import load_dataset
from orchestrion.eval.runner import Observer, Tally
from orchestrion.eval.summary import StrategySummary

MODELS = ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
# Qwen2.5-Coder technical report (arXiv 2409.12186), instruct models, EvalPlus harness: HumanEval pass@1, %
REPORTED = {"qwen2.5-coder-0.5b": 61.6, "qwen2.5-coder-1.5b": 70.7}
REPORT = "Qwen2.5-Coder report (arXiv 2409.12186; instruct, EvalPlus)"
TOLERANCE = 6.0  # points either way before the gap needs an explanation
COUNTED = "e.finished = 1 AND e.epoch = 0 AND e.status NOT IN ('interrupted', 'cancelled', 'retried')"


def dataset_spec(split: str) -> str:
    return "humaneval" if split == "all" else f"humaneval@{split}"


def verdict(ours: float, reported: float) -> str:
    """``within 6 points`` when |ours − reported| ≤ 6 (points of pass@1, in %), else investigate."""
    return "within 6 points" if abs(ours - reported) <= TOLERANCE + 1e-9 else "gap over 6 points: investigate"


class Progress(Observer):
    """One stderr line per finished problem: the running pass@1 and the time so far."""

    def __init__(self, label: str) -> None:
        self.label = label

    def episode(self, outcome: Any, tally: Tally) -> None:
        acc = "-" if tally.accuracy is None else f"{100 * tally.accuracy:.1f}%"
        mark = "pass" if outcome.correct else outcome.status if outcome.status != "ok" else "fail"
        print(f"[{self.label}] {tally.done}/{tally.total} {outcome.key[0]}: {mark} ({outcome.wall_s:.0f}s, "
              f"{outcome.input_tokens + outcome.output_tokens} tokens); pass@1 so far {acc}", file=sys.stderr,
              flush=True)


def _key(args: argparse.Namespace, model: str, limit: int) -> str:
    """``all/humaneval/direct@MODEL/164``: the run-id file's key, in bench/local_pool.py's shape
    (split/task/strategy@model/limit[/seedN]), so a larger limit extends a smaller run."""
    # since f50d585 direct asks a code task as written; the runs made before (its prompt wrapped in
    # "be brief: give the final answer on the last line") keep their keys (--wrapped), and no run is
    # extended with episodes of the other prompt
    row = "direct" + ("" if getattr(args, "wrapped", False) else "[as-written]") \
        + ("" if args.max_tokens is None else f"[max_tokens={args.max_tokens}]")
    return f"{args.split}/humaneval/{row}@{model}/{limit}" + ("" if args.seed == 7 else f"/seed{args.seed}")


def _cut(store: TraceStore, run_id: str) -> int:
    """Counted episodes whose model call stopped at its token limit (``finish_reason`` = length)."""
    rows = store.query(
        "SELECT COUNT(DISTINCT e.id) AS n FROM episodes e JOIN spans s ON s.episode_id = e.id "
        f"WHERE e.run_id = ? AND {COUNTED} AND s.kind = 'call' "
        "AND json_extract(s.attrs, '$.finish_reason') = 'length'", (run_id,))
    return int(rows[0]["n"] or 0) if rows else 0


# what a failed problem's score detail says, in the order checked: the kinds that point at the harness
# (code not found or not whole, cut at the limit) apart from the model's own wrong code
FAILURE_KINDS = [
    ("syntax error (extraction or cut-off code)", ("SyntaxError", "IndentationError")),
    ("name not defined (a missing import or helper)", ("NameError",)),
    ("timed out", ("timed out", "timeout", "TimeoutError")),
    ("an assertion of the tests failed (wrong result)", ("AssertionError",)),
]


def failures(store: TraceStore, run_id: str) -> dict[str, int]:
    """The counted failed problems of the run by kind (:data:`FAILURE_KINDS`, else "other error")."""
    rows = store.query(f"SELECT json_extract(e.meta, '$.score_detail') AS d FROM episodes e WHERE e.run_id = ? "
                       f"AND {COUNTED} AND json_extract(e.meta, '$.correct') = 0", (run_id,))
    out: dict[str, int] = {}
    for r in rows:
        detail = str(r["d"] or "")
        kind = next((k for k, marks in FAILURE_KINDS if any(m in detail for m in marks)), "another exception")
        out[kind] = out.get(kind, 0) + 1
    return out


def _run_row(store: TraceStore, run_id: str) -> tuple[str, int | None]:
    """The run's status and the ``limit`` it was started (or extended) with."""
    rows = store.query("SELECT status, json_extract(config, '$.limit') AS lim FROM runs WHERE id = ?", (run_id,))
    return (str(rows[0]["status"]), rows[0]["lim"]) if rows else ("missing", None)


def model_table(store: TraceStore, model: str, run_id: str, limit: int,
                args: argparse.Namespace) -> tuple[list[str], StrategySummary | None]:
    """One model's table as markdown lines (this harness's row, the report's, the gap and verdict),
    and the run's summary (None before it has run)."""
    found = [s for s in summarize(store, run_id) if s.strategy == "direct"] if run_id else []
    status, run_limit = _run_row(store, run_id) if run_id else ("missing", None)
    limit = run_limit or limit
    title = (f"**{model}: `direct` on {dataset_spec(args.split)}, {limit} problems"
             + (f" (seed {args.seed} sample)" if limit < args.available else "")
             + ("" if args.max_tokens is None else f", max_tokens {args.max_tokens}")
             + (", direct's prompt wrapped (before f50d585)" if args.wrapped else "") + "**")
    if not found:
        return ["", title, "", "nothing has run yet for this model."], None
    r = _row(f"direct on {model} (this harness)", found[0])
    ours, se, reported = 100 * r["accuracy"], 100 * r["stderr"], REPORTED[model]
    statuses = ", ".join(f"{k}×{v}" for k, v in sorted(r["statuses"].items()))
    lines = [
        "", title, "",
        "| source | pass@1 ± se (%) | n | tokens/episode | s/episode | cut at max_tokens | statuses |",
        "|---|---|---|---|---|---|---|",
        f"| {r['label']} | {ours:.1f} ± {se:.1f} | {r['n']} | {r['tokens']:.0f} | {r['wall']:.1f} | "
        f"{_cut(store, run_id)} | {statuses} |",
        f"| {REPORT} | {reported:.1f} | 164 | - | - | - | - |",
        "",
        f"gap (this harness − report): {ours - reported:+.1f} points; verdict: **{verdict(ours, reported)}**"
        + ("" if r["n"] >= 164 else f" (on {r['n']} of 164 problems; the report's figure is over all 164)")
        + ("" if status == "finished" else f"; run {run_id} is {status}, {r['n']} of {limit} counted so far"),
    ]
    failed = failures(store, run_id)
    if failed:
        lines += ["", "| failed problems, by what the tests said | n |", "|---|---|"]
        lines += [f"| {kind} | {n} |" for kind, n in sorted(failed.items(), key=lambda kv: -kv[1])]
    return lines, found[0]


def summary_table(rows: list[tuple[str, float, int, float]]) -> list[str]:
    """Both models side by side: ours, the report's, the gap, the verdict."""
    out = ["", "**Against the Qwen2.5-Coder report (HumanEval pass@1, %)**", "",
           "| model | this harness ± se | n | report | gap (points) | verdict |", "|---|---|---|---|---|---|"]
    for model, ours, n, se in rows:
        reported = REPORTED[model]
        out.append(f"| {model} | {ours:.1f} ± {se:.1f} | {n} | {reported:.1f} | {ours - reported:+.1f} | "
                   f"{verdict(ours, reported)} |")
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="problems per model (default: all of the split)")
    ap.add_argument("--split", choices=["all", "train", "test"], default="all",
                    help="all 164 problems (default), or one side of the fixed split by id")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--max-tokens", type=int, default=None, metavar="N",
                    help="direct's output-token limit (default: the strategy's own); a run of its own")
    ap.add_argument("--seed", type=int, default=7, help="the shuffle a --limit sample is drawn from (default 7)")
    ap.add_argument("--report-only", action="store_true", help="print the tables from what has run; run nothing")
    ap.add_argument("--wrapped", action="store_true",
                    help="with --report-only: the runs made before direct asked code tasks as written (f50d585)")
    ap.add_argument("--out", type=Path, default=Path("bench/out/humaneval"))
    ap.add_argument("--state", type=Path, default=None, help="the run-id file (default OUT/state.json)")
    ap.add_argument("--fragment", type=Path, default=None, metavar="PATH",
                    help="also write the printed tables to PATH (markdown) under a header naming the command, "
                         "commit, date and machine, e.g. docs/results/humaneval.md")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    if unknown := [m for m in models if m not in REPORTED]:
        ap.error(f"--models: no reported figure for {', '.join(unknown)}; use {', '.join(MODELS)}")
    if args.wrapped and not args.report_only:
        ap.error("--wrapped reports the runs made before direct asked code tasks as written; add --report-only")
    if args.limit is not None and args.limit < 1:
        ap.error("--limit must be 1 or more")
    args.available = len(load_dataset(dataset_spec(args.split)).tasks)
    limit = min(args.limit or args.available, args.available)
    args.out.mkdir(parents=True, exist_ok=True)
    store = TraceStore(args.out / "traces.db")
    state_path = args.state or args.out / "state.json"
    state = _load_state(state_path)
    options = {} if args.max_tokens is None else {"max_tokens": args.max_tokens}
    try:
        runs: dict[str, str] = {}
        for model in models:  # every run first, so the tables come out together at the end
            key = _key(args, model, limit)
            if args.report_only:  # this sample's run, else the largest smaller one of it (started with a --limit)
                state = _load_state(state_path)
                runs[model] = state.get(key) or _smaller_run(key, state) or ""
                continue
            config = EvalConfig(dataset=dataset_spec(args.split), strategies=["direct"], limit=limit, seed=args.seed,
                                concurrency=1, pool=model, budget=BUDGET, options=options)
            runs[model] = await _run(key, config, PoolFactory(only=model), store, state, state_path,
                                     progress=Progress(model))
        store.flush()
        with tee_fragment(args.fragment):
            print("**HumanEval pass@1: `direct` on each model alone, against the Qwen2.5-Coder report**")
            compared: list[tuple[str, float, int, float]] = []
            for model in models:
                lines, found = model_table(store, model, runs[model], limit, args)
                print("\n".join(lines), flush=True)
                if found is not None:
                    compared.append((model, 100 * found.accuracy, found.episodes, 100 * found.stderr))
            if compared:
                print("\n".join(summary_table(compared)))
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(run_main(main))
