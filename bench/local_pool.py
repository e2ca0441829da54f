"""Strategies on the local pool against `direct` on each single model: the results table.

Eight BIG-bench tasks, in two phases. First the history ``auto`` learns from: on the
``@train`` side, ``direct`` on each model alone and ``--history`` (``program``) on the
``local`` pool (SmolLM2-135M, Qwen2.5-Coder-0.5B, -1.5B as tiers 1-3). Then the table, on the
``@test`` side: ``direct`` on the 1.5B model alone, then ``--table`` (``auto``, ``program``,
``para``, ``cot``) on the local pool, then ``direct`` on the other models, one row at a time over
every task. It prints per-task
tables, the mean over tasks, the difference from ``direct`` on the 1.5B model paired by example
with its standard error and compute-unit ratio, and a per-task verdict for each strategy. A
``--tasks`` entry may be another dataset spec, such as a multi-part ``bigbench-mix`` one.

Every run goes to one trace database; the script keeps
the run ids in ``OUT/state.json`` and, when started again, finishes unfinished runs
(``orchestrion eval --resume`` underneath) and skips finished ones, so a long table can
be built in parts. A larger ``--limit`` or ``--limit-for`` later extends the smaller run of the
same sample (``orchestrion eval --resume RUN --limit N``): only the new examples run. It prints
markdown tables (per task, and averaged over tasks) and writes ``OUT/accuracy_cost.png``.

``--kv-compare N`` first runs ``para`` on N 3-digit products twice in the same process:
with each model's prompt-state cache off (``state_cache: 0``: reuse only the previous
call's prefix, the old behaviour) and on (the default), and prints time and prompt tokens
per episode side by side.

Run from the repository root, after ``orchestrion models pull`` and
``orchestrion datasets fetch bigbench``::

    .venv/bin/python bench/local_pool.py                       # 6 @train + 20 @test per task
    .venv/bin/python bench/local_pool.py --train 3 --limit 4 --table program,auto,para
    .venv/bin/python bench/local_pool.py --kv-compare 4 --roles 5 --tasks none

``--fragment PATH`` also writes what it prints on stdout (the tables) to PATH, under a header
naming the command, the commit, the date and the machine (``bench/_fragment.py``): a results page
of ``docs/results/`` that the bench writes, not a paste.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import shlex
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from _fragment import tee_fragment
from train_arms import train_arm_lines

from orchestrion import EvalConfig, Pool, TraceStore, run_eval, summarize
from orchestrion.eval.runner import Observer
from orchestrion.eval.summary import StrategySummary
from orchestrion.models.pool import PoolConfig
from orchestrion.models.presets import LOCAL_MODELS
from orchestrion.strategies.auto import paired_difference
from orchestrion.strategies.registry import get_strategy

TASKS = [
    "arithmetic/3_digit_multiplication", "arithmetic/2_digit_division",
    "object_counting", "word_sorting", "date_understanding", "logical_deduction",
    "penguins_in_a_table", "temporal_sequences",
]
CORE = ["direct", "cot", "para", "uno", "router"]
STRONGEST = "qwen2.5-coder-1.5b"
# what auto learns from on @train (each on the local pool; direct also on every model alone)
HISTORY = ["program"]
# the @test table, in the order they run (the most wanted first: a short run still has those rows)
TABLE = ["auto", "program", "para", "cot"]
# bounded so that one slow episode cannot eat the run; a stop is recorded as budget_exceeded
BUDGET = {"wall_s": 300}
OPTIONS: dict[str, Any] = {"max_rounds": 4}
# a state key: split/task/strategy@model/limit, then /seedN for a sample of another seed
KEY = re.compile(r"^(?P<head>.+@[^/]+)/(?P<limit>\d+)(?P<tail>(/seed\d+)?)$")


def dataset_of(task: str) -> str:
    """The dataset spec of a ``--tasks`` entry: a BIG-bench task name, or a whole spec (it has a
    ``:``) with ``+`` for the commas it cannot hold, e.g. ``bigbench-mix:3:strategyqa+physics+word_unscrambling``."""
    return task.replace("+", ",") if ":" in task else f"bigbench:{task}"


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
               state_path: Path, progress: Observer | None = None) -> str:
    """One eval run, resumed if it was started before; returns its run id. The run-id file is read
    again here: another process may have started this run since this one began. ``progress``
    hears of each episode as it ends (bench/humaneval.py prints a line)."""
    run_id = _load_state(state_path).get(key, state.get(key))
    if run_id is not None:
        rows = store.query("SELECT status FROM runs WHERE id = ?", (run_id,))
        if rows and rows[0]["status"] == "finished":
            print(f"[{key}] finished before: run {run_id}", file=sys.stderr)
            return run_id
        print(f"[{key}] resuming run {run_id}", file=sys.stderr)
        result = await run_eval(config, store, resume=run_id, pool=factory, observer=progress)
    elif (smaller := _smaller_run(key, state)) is not None:  # its examples are the head of this sample
        print(f"[{key}] extending run {smaller} to {config.limit} examples", file=sys.stderr)
        state[key] = smaller
        state_path.write_text(json.dumps({**_load_state(state_path), key: smaller}, indent=1))
        result = await run_eval(config, store, resume=smaller, pool=factory, extend_to=config.limit,
                                observer=progress)
    else:
        started = time.perf_counter()
        result = await _fresh(key, config, factory, store, state, state_path, progress)
        print(f"[{key}] {result.total} episodes in {time.perf_counter() - started:.0f}s", file=sys.stderr)
    return result.run_id


def _smaller_run(key: str, state: dict[str, str]) -> str | None:
    """The run of the same split, task, strategy, model and seed with the most examples under
    ``key``'s limit, if any (``test/word_sorting/para@local/10`` for ``.../para@local/20``)."""
    match = KEY.match(key)
    if match is None:
        return None
    found = [(int(m["limit"]), run_id) for k, run_id in state.items() if (m := KEY.match(k)) is not None
             and (m["head"], m["tail"]) == (match["head"], match["tail"]) and int(m["limit"]) < int(match["limit"])]
    return max(found)[1] if found else None


async def _fresh(key: str, config: EvalConfig, factory: PoolFactory, store: TraceStore, state: dict[str, str],
                 state_path: Path, progress: Observer | None = None) -> Any:
    """Start a run and record its id as soon as it exists, so a kill mid-run can be resumed."""

    class Remember(Observer):
        def started(self, run_id: str, tally: Any, resumed: bool) -> None:
            state[key] = run_id  # merged into the file as it is now: another process may have added runs
            state_path.write_text(json.dumps({**_load_state(state_path), key: run_id}, indent=1))
            print(f"[{key}] run {run_id}", file=sys.stderr)

        def episode(self, outcome: Any, tally: Any) -> None:
            if progress is not None:
                progress.episode(outcome, tally)

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



def _scores(store: TraceStore, run_id: str, strategy: str) -> dict[str, float]:
    """Score per task id of the run's counted episodes of ``strategy`` (first epoch)."""
    rows = store.query(
        "SELECT task_id, json_extract(meta, '$.score') AS score FROM episodes WHERE run_id = ? AND strategy = ? "
        "AND finished = 1 AND epoch = 0 AND status NOT IN ('interrupted', 'cancelled', 'retried')", (run_id, strategy))
    return {r["task_id"]: float(r["score"] or 0.0) for r in rows}


def _verdict(diff: float, se: float, n: int) -> str:
    if n < 2:
        return "too few examples to judge"
    if diff > se + 1e-9:  # strictly more than one se (float rounding aside)
        return f"above direct by more than 1 se ({diff:+.2f} ± {se:.2f})"
    if diff >= -se - 1e-9:  # equal counts as not below (a difference of -1/n with se 1/n is exactly -se)
        return f"not below direct minus 1 se ({diff:+.2f} ± {se:.2f})"
    return f"BELOW direct minus 1 se ({diff:+.2f} ± {se:.2f})"


async def table(args: argparse.Namespace, store: TraceStore, state: dict[str, str], state_path: Path) -> None:
    """History on @train, then the @test table, then verdicts against direct on the strongest model."""
    tasks = [] if args.tasks == "none" else args.tasks.split(",")
    auto_opts = {"arm_options": {"para": _options(["para"])} if "para" in args.history else {}, "arms": [
        f"direct:{STRONGEST}", f"program:{STRONGEST}", *(f"direct:{m}" for m in LOCAL_MODELS if m != STRONGEST),
        *([f"cot:{STRONGEST}"] if "cot" in args.history else []), *(["para"] if "para" in args.history else [])]}

    async def one(task: str, split: str, limit: int, strategy: str, model: str | None,
                  seed: int | None = None) -> tuple[str, str]:
        label = f"direct on {model}" if model else f"{strategy} (local pool)"
        if split == "test":  # a strategy, or a strategy on one model alone: direct@smollm2-135m
            limit = min(limit, args.limit_for.get(f"{strategy}@{model}" if model else strategy, limit))
        opts = auto_opts if strategy == "auto" else _options([strategy])
        seed = args.seed if seed is None else seed
        config = EvalConfig(dataset=f"{dataset_of(task)}@{split}", strategies=[strategy], limit=limit, seed=seed,
                            concurrency=1, pool=model or "local", budget=BUDGET, options=opts)
        key = f"{split}/{task}/{strategy}@{model or 'local'}/{limit}" + ("" if seed == args.seed else f"/seed{seed}")
        if args.report_only:  # what has run so far, finished or not; nothing new is started
            return label, state.get(key, "")
        return label, await _run(key, config, PoolFactory(only=model), store, state, state_path)

    history = [(s, None) for s in args.history] + [("direct", m) for m in LOCAL_MODELS]
    learned: dict[str, dict[str, tuple[str, str]]] = {t: {} for t in tasks}
    for task in tasks:  # phase 1: what auto learns from
        for strategy, model in history:
            label, run_id = await one(task, "train", args.train, strategy, model)
            learned[task][label] = (run_id, strategy)
            if args.more_train:  # a second @train sample (another shuffle): more history without rerunning the first
                await one(task, "train", args.more_train, strategy, model, seed=args.seed + 1)
    if args.history_only:
        return
    runs: dict[str, dict[str, tuple[str, str]]] = {t: {} for t in tasks}
    # direct on the strongest model first (every verdict is against it), the other single models last
    plan = ([("direct", STRONGEST)] + [(s, None) for s in args.table]
            + [("direct", m) for m in LOCAL_MODELS if m != STRONGEST and not args.strongest_only])
    for strategy, model in plan:  # phase 2: the table, one row at a time over every task
        for task in tasks:
            label, run_id = await one(task, "test", args.limit, strategy, model)
            if run_id:
                runs[task][label] = (run_id, strategy)
    _report(store, runs, args)
    arms = train_arm_lines(store, learned, f"direct on {STRONGEST}", _scores)
    if arms:
        print(f"\n**What auto learned from: each arm on the @train sample ({args.train} per task), paired by "
              "example against direct on the 1.5B model**\n")
        print("\n".join(arms), flush=True)


def _report(store: TraceStore, runs: dict[str, dict[str, tuple[str, str]]], args: argparse.Namespace) -> None:
    base_label = f"direct on {STRONGEST}"
    per_task: dict[str, list[dict[str, Any]]] = {}
    verdicts: list[str] = []
    diffs: dict[str, list[tuple[float, float]]] = {}
    units: dict[str, list[float]] = {}
    for task, labels in runs.items():
        rows = []
        base = _scores(store, *labels[base_label]) if base_label in labels else {}
        for label, (run_id, strategy) in labels.items():
            for s in summarize(store, run_id):
                row = _row(label, s)
                row["units"] = s.cost_units / max(1, s.episodes)
                rows.append(row)
                units.setdefault(label, []).append(row["units"])
            if label != base_label and base:
                diff, se, n = paired_difference(_scores(store, run_id, strategy), base)
                diffs.setdefault(label, []).append((diff, se))
                if strategy != "direct":
                    verdicts.append(f"| {task} | {label} | {_verdict(diff, se, n)} |")
        per_task[task] = rows
        print(_fmt(rows, f"{dataset_of(task)}@test, {args.limit} examples (fewer where n says so), seed {args.seed}"),
              flush=True)
    if not per_task:
        return
    avg = _average(per_task)
    print(_fmt(avg, "Mean over tasks (se: combined from the per-task standard errors)"))
    print("\n**Against direct on the 1.5B model, paired by example** (mean over tasks of the per-task "
          "difference; se combined from the per-task paired standard errors; compute units per episode "
          "as a multiple of direct's)\n")
    print("| strategy | tasks | mean difference ± se | compute units × direct |\n|---|---|---|---|")
    base_units = sum(units.get(base_label, [0.0])) / max(1, len(units.get(base_label, [])))
    for label, ds in diffs.items():
        k = len(ds)
        mean = sum(d for d, _ in ds) / k
        se = math.sqrt(sum(e ** 2 for _, e in ds if math.isfinite(e))) / k
        ratio = (sum(units[label]) / len(units[label])) / base_units if base_units else math.inf
        print(f"| {label} | {k} | {mean:+.3f} ± {se:.3f} | {ratio:.1f}× |")
    _print_out_of_format(store, runs)
    print("\n**Per-task verdicts (each strategy against direct on the 1.5B model)**\n")
    print("| task | strategy | verdict |\n|---|---|---|")
    print("\n".join(verdicts))
    _plot(avg, args.out / "accuracy_cost.png")


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
                seen = counts.setdefault(label, [0, 0])
                seen[0] += 1
                seen[1] += int(fmt is not None and fmt.misfit(ep.answer or "") is not None)
    print("\n**Final answers out of their task's format** (a query over the trace store)\n")
    print("| row | episodes | out of format |\n|---|---|---|")
    for label, (n, bad) in counts.items():
        print(f"| {label} | {n} | {bad} |")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=20, help="@test examples per task (default 20)")
    ap.add_argument("--train", type=int, default=6, help="@train examples per task that auto learns from (default 6)")
    ap.add_argument("--more-train", type=int, default=0, metavar="N",
                    help="N more @train examples per task for the history, drawn with seed+1 (a shuffle of its own, "
                         "so examples may repeat); the --train runs are kept as they are")
    ap.add_argument("--history-only", action="store_true", help="run the @train history and stop")
    ap.add_argument("--tasks", default=",".join(TASKS),
                    help="comma-separated BIG-bench tasks, 'tuning' or 'heldout' (bench/families.py), or 'none'; "
                         "an entry with a ':' is a whole dataset spec, '+' for its commas "
                         "(bigbench-mix:3:strategyqa+physics+word_unscrambling)")
    ap.add_argument("--history", default=",".join(HISTORY),
                    help="strategies run on @train for auto's history, besides direct on each model")
    ap.add_argument("--table", default=",".join(TABLE), help="strategies of the @test table, besides direct "
                                                              "on each model, in the order they run")
    ap.add_argument("--limit-for", default="", metavar="STRATEGY=N,...",
                    help="fewer @test examples for some rows, e.g. para=10 or direct@smollm2-135m=20 (the first N "
                         "of the same sample; a larger N later extends that run)")
    ap.add_argument("--strongest-only", action="store_true",
                    help="of the single models, run direct on the strongest only in the @test table")
    ap.add_argument("--report-only", action="store_true",
                    help="print the tables from what has run so far (e.g. while a run is still going); run nothing")
    ap.add_argument("--kv-compare", type=int, default=0, metavar="N",
                    help="first compare state cache off/on on N episodes")
    ap.add_argument("--roles", type=int, default=0, metavar="N",
                    help="first compare orchestrator/synthesizer pairs on N episodes")
    ap.add_argument("--state", type=Path, default=None,
                    help="the run-id file (default OUT/state.json); a second process may use its own")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path("bench/out/local_pool"))
    ap.add_argument("--fragment", type=Path, default=None, metavar="PATH",
                    help="also write the printed tables to PATH (markdown), headed by the command, commit, date "
                         "and machine; written only when the run ends without an error")
    args = ap.parse_args()
    if args.tasks in ("tuning", "heldout"):  # the lists of bench/families.py
        from families import HELD_OUT, MOVED_TO_TUNING, TUNING, TUNING_EXTRA

        args.tasks = ",".join(HELD_OUT if args.tasks == "heldout" else [*TUNING, *TUNING_EXTRA, *MOVED_TO_TUNING])
    args.history = [s for s in args.history.split(",") if s]
    args.table = [s for s in args.table.split(",") if s]
    args.limit_for = {k: int(v) for k, _, v in (p.partition("=") for p in args.limit_for.split(",") if p)}
    args.out.mkdir(parents=True, exist_ok=True)
    store = TraceStore(args.out / "traces.db")
    state_path = args.state or args.out / "state.json"
    state = _load_state(state_path)
    try:
        with tee_fragment(args.fragment):
            if args.kv_compare:
                await kv_compare(args.kv_compare, store, state, state_path)
            if args.roles:
                await roles_compare(args.roles, store, state, state_path)
            await table(args, store, state, state_path)
    finally:
        store.close()


def run_main(entry: Callable[[], Coroutine[Any, Any, None]] | None = None) -> int:
    """``main()`` (or another bench's ``entry``) with Ctrl-C as a clean stop, like ``orchestrion
    eval``'s: the run in progress is marked interrupted (its finished episodes kept), one line says
    how to go on, exit 130."""
    try:
        asyncio.run((entry or main)())
    except KeyboardInterrupt:
        print("interrupted; finished episodes are kept.", file=sys.stderr)
        print(f"resume with the same command: {shlex.join([Path(sys.executable).name, *sys.argv])}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(run_main())
