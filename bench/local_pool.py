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
import re
import shlex
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from _fragment import tee_fragment
from pool_report import STRONGEST, dataset_of, fmt, heldout_checks, report, row, scores
from train_arms import train_arm_lines

from orchestrion import ConfigError, EvalConfig, Pool, TraceStore, run_eval, summarize
from orchestrion.eval.runner import Observer
from orchestrion.models.pool import PoolConfig
from orchestrion.models.presets import LOCAL_MODELS
from orchestrion.strategies.registry import get_strategy

TASKS = [
    "arithmetic/3_digit_multiplication", "arithmetic/2_digit_division",
    "object_counting", "word_sorting", "date_understanding", "logical_deduction",
    "penguins_in_a_table", "temporal_sequences",
]
CORE = ["direct", "cot", "para", "uno", "router"]
# what auto learns from on @train (each on the local pool; direct also on every model alone)
HISTORY = ["program"]
# the @test table, in the order they run (the most wanted first: a short run still has those rows)
TABLE = ["auto", "program", "para", "cot"]
# bounded so that one slow episode cannot eat the run; a stop is recorded as budget_exceeded
BUDGET = {"wall_s": 300}
OPTIONS: dict[str, Any] = {"max_rounds": 4}
# a state key: split/task/strategy@model/limit, then /seedN for a sample of another seed
KEY = re.compile(r"^(?P<head>.+@[^/]+)/(?P<limit>\d+)(?P<tail>(/seed\d+)?)$")


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


async def kv_compare(n: int, store: TraceStore, state: dict[str, str], state_path: Path) -> None:
    dataset = "bigbench:arithmetic/3_digit_multiplication"
    rows = []
    for label, cache in (("state cache off (before)", 0), ("state cache on (after)", None)):
        key = f"kv/{cache}/{n}"
        config = EvalConfig(dataset=dataset, strategies=["para"], limit=n, seed=7, concurrency=1,
                            pool="local", budget=BUDGET, options=_options(["para"]))
        run_id = await _run(key, config, PoolFactory(state_cache=cache), store, state, state_path)
        s = summarize(store, run_id)[0]
        rows.append(row(label, s))
    print(fmt(rows, f"KV reuse: para on {n} 3-digit products, same process, same pool"))
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
            rows.append(row(f"orchestrator {orch}, synthesizer {synth}", summarize(store, run_id)[0]))
    print(fmt(rows, f"Roles: para on {n} 3-digit products (executor = orchestrator)"))


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
    by_task = report(store, runs, args)
    if getattr(args, "program_decides", None) is not None:  # a held-out list: its acceptance lines
        heldout_checks(by_task, args.program_decides)
    # one @train example per arm (--train 1, as with --history '') is a placeholder, not a history to read
    arms = train_arm_lines(store, learned, f"direct on {STRONGEST}", scores) if args.train > 1 else []
    if arms:
        print(f"\n**What auto learned from: each arm on the @train sample ({args.train} per task), paired by "
              "example against direct on the 1.5B model**\n")
        print("\n".join(arms), flush=True)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=20, help="@test examples per task (default 20)")
    ap.add_argument("--train", type=int, default=6, help="@train examples per task that auto learns from (default 6)")
    ap.add_argument("--more-train", type=int, default=0, metavar="N",
                    help="N more @train examples per task for the history, drawn with seed+1 (a shuffle of its own, "
                         "so examples may repeat); the --train runs are kept as they are")
    ap.add_argument("--history-only", action="store_true", help="run the @train history and stop")
    ap.add_argument("--tasks", default=",".join(TASKS),
                    help="comma-separated BIG-bench tasks, 'tuning' or 'heldout' (bench/families.py), "
                         "'heldout-rgym' (bench/families_rgym.py), or 'none'; "
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
    _expand_lists(args)
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


def _expand_lists(args: argparse.Namespace) -> None:
    """``--tasks tuning``, ``heldout`` or ``heldout-rgym`` as their families; a list made only of one
    held-out list's families (all or some) also gets that list's held-out acceptance lines."""
    import families
    import families_rgym

    if args.tasks in ("tuning", "heldout"):
        args.tasks = ",".join(families.HELD_OUT if args.tasks == "heldout" else
                              [*families.TUNING, *families.TUNING_EXTRA, *families.MOVED_TO_TUNING])
    elif args.tasks == "heldout-rgym":  # generated offline: no fetch needed
        args.tasks = ",".join(f"reasoning-gym:{name}" for name in families_rgym.RUN_ORDER)
    names = [t for t in args.tasks.split(",") if t and t != "none"]
    if names and all(t in families.HELD_OUT for t in names):
        args.program_decides = families.PROGRAM_DECIDES
    elif names and all(t.startswith("reasoning-gym:") and t.split(":", 1)[1] in families_rgym.HELD_OUT
                       for t in names):
        args.program_decides = families_rgym.PROGRAM_DECIDES


def run_main(entry: Callable[[], Coroutine[Any, Any, None]] | None = None) -> int:
    """``main()`` (or another bench's ``entry``) with Ctrl-C as a clean stop, like ``orchestrion
    eval``'s: the run in progress is marked interrupted (its finished episodes kept), one line says
    how to go on, exit 130. A configuration error (a bad dataset spec) is one line, exit 2."""
    try:
        asyncio.run((entry or main)())
    except ConfigError as exc:  # a bad --tasks spec, a missing dataset: one line, as the CLI prints it
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished episodes are kept.", file=sys.stderr)
        print(f"resume with the same command: {shlex.join([Path(sys.executable).name, *sys.argv])}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(run_main())
