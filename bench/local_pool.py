"""Strategies on the local pool against `direct` on each single model: the results table.

For each BIG-bench task below, one evaluation run of the chosen strategies on the
``local`` pool (SmolLM2-135M, Qwen2.5-Coder-0.5B, -1.5B as tiers 1-3), and one run of
``direct`` on each model alone. Every run goes to one trace database; the script keeps
the run ids in ``OUT/state.json`` and, when started again, finishes unfinished runs
(``orchestrion eval --resume`` underneath) and skips finished ones, so a long table can
be built in parts. It prints markdown tables (per task, and averaged over tasks) and
writes ``OUT/accuracy_cost.png``.

``--kv-compare N`` first runs ``para`` on N 3-digit products twice in the same process:
with each model's prompt-state cache off (``state_cache: 0``: reuse only the previous
call's prefix, the old behaviour) and on (the default), and prints time and prompt tokens
per episode side by side.

Run from the repository root, after ``orchestrion models pull`` and
``orchestrion datasets fetch bigbench``::

    .venv/bin/python bench/local_pool.py                       # core strategies, 5 per task
    .venv/bin/python bench/local_pool.py --strategies all --limit 2
    .venv/bin/python bench/local_pool.py --kv-compare 4 --roles 5 --tasks none
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from orchestrion import EvalConfig, Pool, TraceStore, run_eval, summarize
from orchestrion.eval.summary import StrategySummary
from orchestrion.models.pool import PoolConfig
from orchestrion.models.presets import LOCAL_MODELS
from orchestrion.strategies.registry import get_strategy, strategies

TASKS = [
    "arithmetic/3_digit_multiplication", "arithmetic/2_digit_division",
    "object_counting", "word_sorting", "date_understanding", "logical_deduction",
]
CORE = ["direct", "cot", "para", "uno", "router"]
# bounded so that one slow episode cannot eat the run; a stop is recorded as budget_exceeded
BUDGET = {"wall_s": 300}
OPTIONS: dict[str, Any] = {"max_rounds": 4}


def _options(names: list[str]) -> dict[str, Any]:
    """OPTIONS that at least one of ``names`` declares (each strategy takes the ones it has)."""
    fields = {f for name in names for f in get_strategy(name).Options.model_fields}
    return {k: v for k, v in OPTIONS.items() if k in fields}


class PoolFactory:
    """The local pool, or one model of it alone, optionally with the state cache off."""

    def __init__(self, only: str | None = None, state_cache: int | None = None,
                 roles: dict[str, str] | None = None) -> None:
        self.only, self.state_cache, self.roles = only, state_cache, roles or {}

    def __call__(self) -> Pool:
        base = Pool.preset("local").config
        models = [m for m in base.models if self.only in (None, m.name)]
        if self.state_cache is not None:
            models = [m.model_copy(update={"state_cache": self.state_cache}) for m in models]
        if self.only is not None:
            config = PoolConfig(models=models)
        else:
            config = base.model_copy(update={"models": models, **self.roles})
        label = "local" if self.only is None else self.only
        return Pool(
            config,
            source=f"preset '{label}'" + ("" if self.state_cache is None else f" state_cache={self.state_cache}"),
        )


def _load_state(path: Path) -> dict[str, str]:
    return json.loads(path.read_text()) if path.is_file() else {}


async def _run(key: str, config: EvalConfig, factory: PoolFactory, store: TraceStore, state: dict[str, str],
               state_path: Path) -> str:
    """One eval run, resumed if it was started before; returns its run id."""
    run_id = state.get(key)
    if run_id is not None:
        rows = store.query("SELECT status FROM runs WHERE id = ?", (run_id,))
        if rows and rows[0]["status"] == "finished":
            print(f"[{key}] finished before: run {run_id}", file=sys.stderr)
            return run_id
        print(f"[{key}] resuming run {run_id}", file=sys.stderr)
        result = await run_eval(config, store, resume=run_id, pool=factory)
    else:
        started = time.perf_counter()
        result = await _fresh(key, config, factory, store, state, state_path)
        print(f"[{key}] {result.total} episodes in {time.perf_counter() - started:.0f}s", file=sys.stderr)
    return result.run_id


async def _fresh(key: str, config: EvalConfig, factory: PoolFactory, store: TraceStore, state: dict[str, str],
                 state_path: Path) -> Any:
    """Start a run and record its id as soon as it exists, so a kill mid-run can be resumed."""
    from orchestrion.eval.runner import Observer

    class Remember(Observer):
        def started(self, run_id: str, tally: Any, resumed: bool) -> None:
            state[key] = run_id
            state_path.write_text(json.dumps(state, indent=1))
            print(f"[{key}] run {run_id}", file=sys.stderr)

    return await run_eval(config, store, pool=factory, observer=Remember())


def _row(label: str, s: StrategySummary) -> dict[str, Any]:
    return {
        "label": label, "accuracy": s.accuracy, "stderr": s.stderr, "n": s.episodes,
        "grounding": s.grounding_rate, "grounded_n": s.grounded_episodes,
        "tokens": (s.input_tokens + s.output_tokens) / max(1, s.episodes),
        "wall": s.mean_wall_s, "cost": None if s.cost_usd is None else s.cost_usd / max(1, s.episodes),
        "statuses": s.statuses,
    }


def _fmt(rows: list[dict[str, Any]], title: str) -> str:
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


def _average(per_task: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
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


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
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


async def kv_compare(n: int, store: TraceStore, state: dict[str, str], state_path: Path) -> None:
    dataset = "bigbench:arithmetic/3_digit_multiplication"
    rows = []
    for label, cache in (("state cache off (before)", 0), ("state cache on (after)", None)):
        key = f"kv/{cache}/{n}"
        config = EvalConfig(dataset=dataset, strategies=["para"], limit=n, seed=7, concurrency=1,
                            pool="local", budget=BUDGET, options=_options(["para"]))
        run_id = await _run(key, config, PoolFactory(state_cache=cache), store, state, state_path)
        s = summarize(store, run_id)[0]
        rows.append(_row(label, s))
    print(_fmt(rows, f"KV reuse: para on {n} 3-digit products, same process, same pool"))
    before, after = rows[0]["wall"], rows[1]["wall"]
    if after:
        print(f"\nper-episode time, before / after: {before:.1f}s / {after:.1f}s = {before / after:.2f}x")


async def roles_compare(n: int, store: TraceStore, state: dict[str, str], state_path: Path) -> None:
    """para on n 3-digit products with each (orchestrator, synthesizer) pair of the two Qwen models."""
    dataset = "bigbench:arithmetic/3_digit_multiplication"
    rows = []
    for orch in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"):
        for synth in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"):
            roles = {"orchestrator": orch, "synthesizer": synth, "executor": orch}
            config = EvalConfig(dataset=dataset, strategies=["para"], limit=n, seed=7, concurrency=1,
                                pool="local", budget=BUDGET, options=_options(["para"]))
            run_id = await _run(f"roles/{orch}/{synth}/{n}", config, PoolFactory(roles=roles), store, state, state_path)
            rows.append(_row(f"orchestrator {orch}, synthesizer {synth}", summarize(store, run_id)[0]))
    print(_fmt(rows, f"Roles: para on {n} 3-digit products (executor = orchestrator)"))


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=5, help="examples per task (default 5)")
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated BIG-bench tasks, or 'none'")
    ap.add_argument("--strategies", default="core", help=f"'core' ({','.join(CORE)}), 'all', or a comma-separated list")
    ap.add_argument("--no-single", action="store_true", help="skip `direct` on each single model")
    ap.add_argument("--kv-compare", type=int, default=0, metavar="N",
                    help="first compare state cache off/on on N episodes")
    ap.add_argument("--roles", type=int, default=0, metavar="N",
                    help="first compare orchestrator/synthesizer pairs on N episodes")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path("bench/out/local_pool"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = TraceStore(args.out / "traces.db")
    state_path = args.out / "state.json"
    state = _load_state(state_path)
    if args.kv_compare:
        await kv_compare(args.kv_compare, store, state, state_path)
    if args.roles:
        await roles_compare(args.roles, store, state, state_path)
    names = (
        sorted(strategies())
        if args.strategies == "all"
        else CORE
        if args.strategies == "core"
        else args.strategies.split(",")
    )
    tasks = [] if args.tasks == "none" else args.tasks.split(",")
    per_task: dict[str, list[dict[str, Any]]] = {}
    for task in tasks:
        dataset = f"bigbench:{task}"
        rows: list[dict[str, Any]] = []
        if not args.no_single:
            for model in LOCAL_MODELS:
                config = EvalConfig(dataset=dataset, strategies=["direct"], limit=args.limit, seed=args.seed,
                                    concurrency=1, pool=model, budget=BUDGET, options=_options(["direct"]))
                run_id = await _run(f"{task}/direct@{model}/{args.limit}", config, PoolFactory(only=model), store,
                                    state, state_path)
                rows += [_row(f"direct on {model}", s) for s in summarize(store, run_id)]
        config = EvalConfig(dataset=dataset, strategies=names, limit=args.limit, seed=args.seed, concurrency=1,
                            pool="local", budget=BUDGET, options=_options(names))
        run_id = await _run(f"{task}/local/{','.join(names)}/{args.limit}", config, PoolFactory(), store, state,
                            state_path)
        rows += [_row(f"{s.strategy} (local pool)", s) for s in summarize(store, run_id)]
        per_task[task] = rows
        print(_fmt(rows, f"bigbench:{task}, {args.limit} examples, seed {args.seed}"), flush=True)
    if per_task:
        avg = _average(per_task)
        print(_fmt(avg, "Mean over tasks (se: combined from the per-task standard errors)"))
        _plot(avg, args.out / "accuracy_cost.png")
        print(f"\nplot: {args.out / 'accuracy_cost.png'}; traces: {args.out / 'traces.db'} (orchestrion view --db ...)")
    store.close()


if __name__ == "__main__":
    asyncio.run(main())
