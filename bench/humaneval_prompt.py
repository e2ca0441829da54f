"""Does ``direct``'s prompt cost HumanEval answers? The same problems, the same GGUF file, two prompts.

``bench/humaneval.py`` runs ``direct``, whose prompt wraps every task in "Answer the question
below. Be brief: give the final answer on the last line." (``prompts/direct.md``). The
Qwen2.5-Coder report's harness (EvalPlus) sends the coding instruction and the function alone.
This script asks one model, greedy, with the same output limit, on the first ``--limit`` problems
of the same seeded sample as ``bench/humaneval.py`` (seed 7), once with ``direct``'s wrapped
prompt and once with the task's own instruction unwrapped, grades both by HumanEval's tests in the
sandbox (the project's own scorer), and prints pass@1 for each, the paired difference, and the
failed problems by kind. If the two agree, the gap to the report is not the prompt's.

Each answer is kept in ``OUT/answers.jsonl`` as it comes, so a second start skips what is done.
The calls go to the model directly (no episode, no trace): this is a diagnostic of the prompt.

    .venv/bin/python bench/humaneval_prompt.py --model qwen2.5-coder-0.5b --limit 40 \\
        --fragment docs/results/humaneval-prompt.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from _fragment import tee_fragment
from decision_counts import _mean, _se
from humaneval import FAILURE_KINDS, MODELS
from local_pool import run_main

from orchestrion import Pool
from orchestrion._prompts import render
from orchestrion.eval.datasets import load_dataset
from orchestrion.eval.scorers import CodeExecution
from orchestrion.models.types import GenerateConfig, msg

VARIANTS = {
    "direct's prompt (as bench/humaneval.py)": lambda prompt: render("direct", task=prompt),
    "the task's own instruction, unwrapped": lambda prompt: prompt,
}


def _kind(detail: str) -> str:
    return next((k for k, marks in FAILURE_KINDS if any(m in detail for m in marks)), "another exception")


def report(done: dict[tuple[str, str], dict[str, Any]], ids: list[str], model: str, max_tokens: int) -> list[str]:
    names = list(VARIANTS)
    both = [t for t in ids if all((v, t) in done for v in names)]
    lines = [f"**HumanEval, {model}, greedy, max_tokens {max_tokens}: {len(both)} problems answered with both "
             "prompts (seed 7 sample, as bench/humaneval.py)**", "",
             "| prompt | pass@1 ± se (%) | n | output tokens/problem | failed: wrong result / another exception / "
             "syntax / name / timeout |", "|---|---|---|---|---|"]
    for v in names:
        rows = [done[(v, t)] for t in both]
        passed = [float(r["correct"]) for r in rows]
        m, se = _mean(passed), _se(passed)
        kinds = [_kind(r["detail"]) for r in rows if not r["correct"]]
        order = [k for k, _ in FAILURE_KINDS]
        counts = [kinds.count(order[3]), kinds.count("another exception"), kinds.count(order[0]),
                  kinds.count(order[1]), kinds.count(order[2])]
        tokens = sum(r["output_tokens"] for r in rows) / max(1, len(rows))
        lines.append(f"| {v} | {100 * m:.1f} ± {100 * se:.1f} | {len(rows)} | {tokens:.0f} | "
                     + " / ".join(map(str, counts)) + " |")
    if both:
        diff = [float(done[(names[1], t)]["correct"]) - float(done[(names[0], t)]["correct"]) for t in both]
        d, se = _mean(diff), _se(diff)
        verdict = ("the unwrapped prompt passes more, by over 2 se" if d > 2 * se and d > 0 else
                   "direct's prompt passes more, by over 2 se" if d < -2 * se and d < 0 else
                   "no difference beyond 2 se")
        lines += ["", f"paired (unwrapped - direct's): {100 * d:+.1f} ± {100 * se:.1f} points; verdict: **{verdict}**"]
    return lines


async def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--model", default=MODELS[0], choices=MODELS)
    ap.add_argument("--limit", type=int, default=40, help="first N problems of the seed-7 sample (default 40)")
    ap.add_argument("--max-tokens", type=int, default=768)
    ap.add_argument("--out", type=Path, default=Path("bench/out/humaneval_prompt"))
    ap.add_argument("--report-only", action="store_true", help="print the table from the answers kept; ask nothing")
    ap.add_argument("--fragment", type=Path, default=None, metavar="PATH",
                    help="also write the table to PATH (markdown), headed by command, commit, date and machine")
    args = ap.parse_args()
    if args.limit < 1:
        ap.error("--limit must be 1 or more")
    tasks = load_dataset("humaneval", limit=args.limit, seed=7).tasks
    args.out.mkdir(parents=True, exist_ok=True)
    kept = args.out / f"answers-{args.model}-{args.max_tokens}.jsonl"
    done: dict[tuple[str, str], dict[str, Any]] = {}
    if kept.is_file():
        for line in kept.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[(row["variant"], row["task"])] = row
    if not args.report_only:
        pool, scorer = Pool.preset(args.model), CodeExecution()
        config = GenerateConfig(max_tokens=args.max_tokens, temperature=0.0)
        with kept.open("a") as fh:
            for i, task in enumerate(tasks, 1):
                for variant, wrap in VARIANTS.items():
                    if (variant, str(task.id)) in done:
                        continue
                    out = await pool.complete(args.model, [msg("user", wrap(task.prompt))], config)
                    score = await scorer(task, out.text)
                    row = {"variant": variant, "task": str(task.id), "correct": bool(score.correct),
                           "detail": score.detail, "output_tokens": out.usage.output_tokens}
                    done[(variant, str(task.id))] = row
                    fh.write(json.dumps(row) + "\n")
                    fh.flush()
                    print(f"[{i}/{len(tasks)}] {task.id} {variant}: {'pass' if score.correct else 'fail'}",
                          file=sys.stderr, flush=True)
    with tee_fragment(args.fragment):
        print("\n".join(report(done, [str(t.id) for t in tasks], args.model, args.max_tokens)))


if __name__ == "__main__":
    sys.exit(run_main(main))
