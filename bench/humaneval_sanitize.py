"""Is part of a HumanEval gap the grading? The answers ``bench/humaneval.py`` kept, graded twice.

``bench/humaneval.py`` runs a model's whole code block with HumanEval's tests after it. A small
model often appends its own checks to the function (``assert f(...) == ...`` with an expected
value it got wrong, a ``print``, a loop over examples), and those run first: one wrong
self-check fails the problem even when the function is right, and an answer cut at the token
limit inside such a tail does not parse at all. The EvalPlus harness, behind the Qwen2.5-Coder
report's figures, sanitizes an answer before testing it, keeping the code that defines things.

This script asks no model. From the trace store of ``bench/humaneval.py`` it takes each kept
answer of ``direct`` (as written, 164 problems) on each model and grades it again in the sandbox
with the same tests after keeping only the top-level imports, definitions (functions, classes)
and assignments of its program; where the program does not parse (an answer cut at the token
limit), its last lines are dropped until it does. It prints pass@1 both ways, the paired
difference, the problems that changed, and the gap to the report with either grading.

    .venv/bin/python bench/humaneval_sanitize.py --fragment docs/results/humaneval-sanitize.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from _fragment import tee_fragment
from decision_counts import _mean, _se
from humaneval import COUNTED, MODELS, REPORTED, _key, verdict

from orchestrion import TraceStore
from orchestrion.eval.datasets import load_dataset
from orchestrion.eval.scorers import CodeExecution, build_program
from orchestrion.runtime.code_examples import sanitize
from orchestrion.runtime.types import Task


async def grade(program: str, task: Task) -> bool:
    """HumanEval's tests on ``program``, by the scorer ``bench/humaneval.py`` graded with (the
    program as its one code block: it defines the entry point, so the scorer keeps it whole)."""
    return (await CodeExecution()(task, f"```python\n{program}```")).correct


def _answers(store: TraceStore, run_id: str) -> dict[str, tuple[str, bool]]:
    """The run's counted episodes (as ``bench/humaneval.py`` counts them): answer and grade per problem."""
    rows = store.query("SELECT e.task_id AS t, e.answer AS a, json_extract(e.meta, '$.correct') AS c "
                       f"FROM episodes e WHERE e.run_id = ? AND {COUNTED}", (run_id,))
    return {str(r["t"]): (str(r["a"] or ""), bool(r["c"])) for r in rows}


async def report(model: str, answers: dict[str, tuple[str, bool]], tasks: dict[str, Task]) -> list[str]:
    graded, cleaned, changed = [], [], []
    for task_id in sorted(answers, key=lambda t: int(t.rsplit("/", 1)[-1])):
        answer, as_graded = answers[task_id]
        after = await grade(sanitize(build_program(answer, tasks[task_id])), tasks[task_id])
        graded.append(float(as_graded))
        cleaned.append(float(after))
        if after != as_graded:
            changed.append(f"{task_id} ({'fail → pass' if after else 'pass → fail'})")
    diff = [b - a for a, b in zip(graded, cleaned, strict=True)]
    d, se = _mean(diff), _se(diff)
    reported = REPORTED[model]
    lines = [f"**{model}: `direct` (as written), {len(graded)} problems, graded as run and sanitized**", "",
             "| grading | pass@1 ± se (%) | n | report | gap (points) | verdict |", "|---|---|---|---|---|---|"]
    for name, values in (("as run (the whole code block, then the tests)", graded),
                         ("sanitized (imports, definitions and assignments only)", cleaned)):
        m = 100 * _mean(values)
        lines.append(f"| {name} | {m:.1f} ± {100 * _se(values):.1f} | {len(values)} | {reported} | "
                     f"{m - reported:+.1f} | {verdict(m, reported)} |")
    lines += ["", f"paired (sanitized − as run): {100 * d:+.1f} ± {100 * se:.1f} points; "
              f"{len(changed)} problems changed: {', '.join(changed) or 'none'}", ""]
    return lines


async def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench/out/humaneval"),
                    help="bench/humaneval.py's --out (its traces.db and state.json)")
    ap.add_argument("--max-tokens", type=int, default=768, help="the run's --max-tokens (default 768)")
    ap.add_argument("--fragment", type=Path, default=None, metavar="PATH",
                    help="also write the tables to PATH (markdown), headed by command, commit, date and machine")
    args = ap.parse_args()
    state_path = args.out / "state.json"
    if not state_path.is_file():
        ap.error(f"--out: {state_path} not found; run bench/humaneval.py --limit 164 first")
    state: dict[str, Any] = json.loads(state_path.read_text())
    tasks = {str(t.id): t for t in load_dataset("humaneval").tasks}
    store = TraceStore(args.out / "traces.db")
    run = argparse.Namespace(split="all", wrapped=False, max_tokens=args.max_tokens, seed=7)
    with tee_fragment(args.fragment):
        print("**HumanEval pass@1: the kept answers graded as run and sanitized, against the "
              "Qwen2.5-Coder report**\n")
        for model in MODELS:
            key = _key(run, model, 164)
            if key not in state:
                print(f"{model}: no run of all 164 problems in {state_path} (key {key})\n")
                continue
            print("\n".join(await report(model, _answers(store, state[key]), tasks)))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
