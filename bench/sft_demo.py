"""What SFT, then GRPO, do to the small orchestrator: a demonstration, not a test.

Task family: multi-step arithmetic (``37 * 89 - 412 + 15 * 23``) where the right move for
the para orchestrator is one call to the ``python`` tool, then stop. SmolLM2-135M left to
itself rarely does that (it writes prose, invents tools or asks a reasoner agent).

1. Expert trajectories come from a **rule-based expert planner**, not from a model: it knows
   the decomposition of these tasks (one python call, then final). It runs as the pool's
   orchestrator behind the same prompts the embedded model sees (same model listing); only
   scored-correct episodes are exported.
   The answer is written by a rule-based **relay** (the number the first call returned),
   in every run alike: SmolLM2-135M as synthesizer garbles even a correct tool result, which
   would hide what the orchestrator learned. Accuracy here therefore measures the
   orchestrator's routing: did its calls produce the right number?
2. ``orchestrion train export`` + ``orchestrion train sft`` train a LoRA adapter on them.
3. The held-out split (different numbers) is evaluated with para, before and after (the
   runner of ``orchestrion eval``, with the adapter applied as ``--orchestrator-adapter``
   does): valid-action rate, accuracy, python calls per episode.
4. GRPO (``orchestrion.train.grpo.train_grpo``, what ``orchestrion train grpo`` runs) continues
   from the SFT adapter for a few seeds, with the same pool and relay; each result is evaluated
   the same way and the spread over seeds is printed.

Run: ``.venv/bin/python bench/sft_demo.py`` (about 30-60 minutes on 2 CPU cores; see --help
for smaller settings). Every step prints the exact command it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrion import GenerateConfig, Message, Pool, ScriptedModel, TraceStore
from orchestrion.eval.runner import EvalConfig, run_eval
from orchestrion.eval.summary import summarize
from orchestrion.train.grpo import train_grpo
from orchestrion.train.settings import GRPOSettings

BIN = Path(sys.executable).parent / "orchestrion"


def make_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b, c, d, e = (rng.randint(11, 99), rng.randint(11, 99), rng.randint(100, 999), rng.randint(11, 99),
                         rng.randint(11, 99))
        expr = f"{a} * {b} - {c} + {d} * {e}"
        rows.append({"id": f"s{seed}-{i}", "prompt": f"Compute {expr}. Reply with the number.",
                     "answer": str(eval(expr))})
    return rows


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def expert(messages: Sequence[Message], config: GenerateConfig) -> str:
    """The rule-based planner: one python call with the task's expression, then final."""
    text = messages[-1]["content"]
    if "Results so far" in text:
        return json.dumps({"thought": "the code result answers the task", "calls": [], "final": True})
    match = re.search(r"Compute ([0-9 *+\-]+)\.", text)
    expr = match.group(1).strip() if match else "0"
    return json.dumps({"thought": "compute it exactly with code",
                       "calls": [{"tool": "python", "input": f"print({expr})"}], "final": False})


def relay(messages: Sequence[Message], config: GenerateConfig) -> str:
    """The rule-based synthesizer: the first number in the first call's result."""
    results = messages[-1]["content"].partition("Results:")[2].strip().splitlines()
    first = results[0].partition(":")[2] if results else ""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", first)
    return f"The final answer is {numbers[0]}." if numbers else "I could not compute it."


def demo_pool() -> Pool:
    return Pool.default().with_hidden(ScriptedModel(relay, name="relay"))


OPTIONS = {"max_rounds": 3, "synthesizer": "relay"}


def sh(*args: str) -> str:
    cmd = [str(BIN), *args]
    print("$ orchestrion " + " ".join(args), flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"command failed ({res.returncode}): {res.stderr.strip()[-800:]}")
    return res.stdout


async def evaluate(data: Path, db: Path, label: str, adapter: Path | None, limit: int) -> dict[str, float]:
    pool = demo_pool() if adapter is None else demo_pool().with_orchestrator_adapter(adapter)
    config = EvalConfig(dataset=f"jsonl:{data}", strategies=["para"], limit=limit, epochs=1, concurrency=2, seed=0,
                        options=OPTIONS)
    store = TraceStore(db)
    run = await run_eval(config, store, pool=lambda: pool)
    (s,) = summarize(store, run.run_id)
    row = {"accuracy": s.accuracy, "stderr": s.stderr, "valid_action_rate": 1.0 - s.invalid_action_rate,
           "python_calls": s.tools.get("python", 0) / max(1, s.episodes)}
    print(f"  {label} (run {run.run_id}): " + "  ".join(f"{k}={v:.3f}" for k, v in row.items()), flush=True)
    return row


async def expert_run(train: Path, db: Path, n: int) -> str:
    pool = demo_pool().with_orchestrator(ScriptedModel(expert, name="expert"))
    config = EvalConfig(dataset=f"jsonl:{train}", strategies=["para"], limit=n, epochs=1, concurrency=2,
                        options=OPTIONS)
    store = TraceStore(db)
    result = await run_eval(config, store, pool=lambda: pool)
    (s,) = summarize(store, result.run_id)
    print(f"  expert run {result.run_id}: accuracy {s.accuracy:.3f} over {s.episodes} episodes", flush=True)
    return result.run_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench/out/sft_demo"))
    ap.add_argument("--train", type=int, default=24, help="expert episodes (train split)")
    ap.add_argument("--test", type=int, default=12, help="held-out tasks")
    ap.add_argument("--sft-steps", type=int, default=60)
    ap.add_argument("--grpo-steps", type=int, default=2)
    ap.add_argument("--grpo-seeds", default="0,1")
    ap.add_argument("--grpo-limit", type=int, default=2, help="training tasks per GRPO step")
    ap.add_argument("--lr", type=float, default=1e-3)
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    db = out / "traces.db"
    train = write_jsonl(make_tasks(args.train, seed=1), out / "train.jsonl")
    test = write_jsonl(make_tasks(args.test, seed=2), out / "test.jsonl")
    t0 = time.time()
    results: dict[str, Any] = {}
    print("1. expert trajectories (rule-based planner)", flush=True)
    run_id = asyncio.run(expert_run(train, db, args.train))
    print("2. export + SFT", flush=True)
    sh("train", "export", "--run", run_id, "--format", "trl", "--out", str(out / "sft-data"), "--db", str(db))
    sft = out / "adapter-sft"
    sh("train", "sft", "--data", str(out / "sft-data"), "--steps", str(args.sft_steps), "--lr", str(args.lr),
       "--out", str(sft))
    print("3. held-out evaluation, before and after SFT", flush=True)
    results["base"] = asyncio.run(evaluate(test, db, "base", None, args.test))
    results["sft"] = asyncio.run(evaluate(test, db, "sft ", sft, args.test))
    print("4. GRPO on top of SFT, per seed", flush=True)
    grpo_rows = []
    for seed in [int(s) for s in args.grpo_seeds.split(",") if s]:
        adapter = out / f"adapter-grpo-{seed}"
        print(f"$ train_grpo(jsonl:{train}, limit={args.grpo_limit}, group=4, steps={args.grpo_steps}, adapter={sft}, "
              f"seed={seed}, pool=demo pool, options={OPTIONS})", flush=True)
        settings = GRPOSettings(engine="loop", out=adapter, limit=args.grpo_limit, group=4, steps=args.grpo_steps,
                                adapter=sft, seed=seed, options=OPTIONS, lr=args.lr)
        train_grpo(f"jsonl:{train}", settings, pool=demo_pool(), store=TraceStore(db))
        grpo_rows.append(asyncio.run(evaluate(test, db, f"grpo seed {seed}", adapter, args.test)))
    results["grpo"] = grpo_rows
    if grpo_rows:
        for key in ("accuracy", "valid_action_rate"):
            vals = [r[key] for r in grpo_rows]
            spread = statistics.pstdev(vals) if len(vals) > 1 else 0.0
            print(f"  grpo {key}: mean {statistics.mean(vals):.3f} ± {spread:.3f} over {len(vals)} seeds")
    results["wall_s"] = round(time.time() - t0, 1)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {out / 'results.json'} in {results['wall_s']} s")


if __name__ == "__main__":
    main()
