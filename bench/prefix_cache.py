"""Pinned static prefixes and load-aware threads, against today's behaviour, side by side.

Part 1 (``--episodes N``, default 3): ``orchestrion run`` of para on the local pool, each in a
fresh process, in three modes taken in turn for each task so that machine noise falls on all
of them alike:

* ``before``: prefix cache off and 1 thread (``ORCHESTRION_PREFIX_CACHE=off
  ORCHESTRION_THREADS=1``), the behaviour before pinned prefixes and load-aware threads
  (greedy decisions take the best-token-first path in every mode here; part 2 has it off);
* ``threads``: prefix cache off, threads chosen by load (what threads alone give);
* ``warm``: both on, with the pinned heads already on disk (one priming run writes them
  first, into the bench's own cache folder).

From each episode's trace it prints, per role (decision / synthesis / agent), the prompt
tokens evaluated and reused and the seconds spent, the first decision's prompt tokens
evaluated, and the episode's wall time, with the ratios ``before / warm``.

Part 2 (``--eval N``, default 0): ``orchestrion eval --strategies direct,para`` on N 3-digit
products (seed 7), as before (prefix cache off, and greedy decisions sampled through
llama-cpp-python's grammar chain) and now, both runs at once in one process with one thread
per model (so each has a core of a 2-core machine and outside load slows both alike; the
threads chosen by load are left out of this ratio, part 1 shows them). Prints accuracy, wall
time end to end and prompt tokens reused, and the speed-up. Resumable: run ids are kept in
``OUT/state.json``, and a run cut short is finished (``eval --resume``) when the script is
started again.

    .venv/bin/python bench/prefix_cache.py                   # part 1, 3 tasks
    .venv/bin/python bench/prefix_cache.py --episodes 0 --eval 20 --alone

``--fragment PATH`` also writes the printed tables to PATH, headed by the command, the commit,
the date and the machine (``bench/_fragment.py``), for ``docs/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
from _fragment import tee_fragment

from orchestrion import EvalConfig, Pool, TraceStore, run_eval, summarize
from orchestrion.models.llama_cpp import LlamaCppModel
from orchestrion.models.pool import PoolConfig

TASKS = ["What is 12*13?", "What is 347*29?", "What is 5832/24?", "What is 918-457+36?", "What is 64*64?"]
MODES: dict[str, dict[str, str]] = {
    "before": {"ORCHESTRION_PREFIX_CACHE": "off", "ORCHESTRION_THREADS": "1"},
    "threads": {"ORCHESTRION_PREFIX_CACHE": "off"},
    "warm": {"ORCHESTRION_PREFIX_CACHE": "on"},
}


def role(purpose: str) -> str:
    if purpose.startswith("round") or purpose.startswith("decision"):
        return "decision"
    return "synthesis" if purpose.startswith("synthesis") else "agent"


def run_episode(task: str, env: dict[str, str], db: Path) -> dict[str, Any]:
    """One para episode in a fresh process; its per-role prompt figures from the trace."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrion", "run", task, "--pool", "local", "--strategy", "para",
         "--set", "max_rounds=3", "--json"],
        capture_output=True, text=True, env={**os.environ, **env, "ORCHESTRION_DB": str(db)}, timeout=900)
    process_s = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"orchestrion run failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    out = json.loads(proc.stdout)
    store = TraceStore(db)
    try:
        calls = store.spans(out["trace_id"], kinds=["call"])
    finally:
        store.close()
    roles: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    first: int | None = None
    threads: set[int] = set()
    for span in calls:
        attrs = orjson.loads(span.attrs or "{}")
        r = roles[role(attrs.get("purpose", ""))]
        r["evaluated"] += attrs.get("prompt_evaluated", 0)
        r["reused"] += attrs.get("prompt_reused", 0)
        r["seconds"] += (span.ended or span.started) - span.started
        r["calls"] += 1
        if attrs.get("threads"):
            threads.add(int(attrs["threads"]))
        if first is None and role(attrs.get("purpose", "")) == "decision":
            first = int(attrs.get("prompt_evaluated", 0))
    return {"answer": out["answer"], "wall": out["wall_s"], "process": process_s, "roles": roles,
            "first_decision_evaluated": first or 0, "threads": sorted(threads)}


def part1(n: int, out: Path) -> None:
    kv = out / "kv"
    base = {"ORCHESTRION_PREFIX_CACHE_DIR": str(kv)}
    db = out / "episodes.db"
    print(f"priming the pinned heads in {kv} ...", file=sys.stderr)
    run_episode("What is 2*3?", {**base, **MODES["warm"]}, db)
    results: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for task in TASKS[:n]:
        for mode, env in MODES.items():
            res = run_episode(task, {**base, **env}, db)
            results[mode].append(res)
            print(f"  {mode:8s} {task!r}: wall {res['wall']:.1f}s, first decision evaluated "
                  f"{res['first_decision_evaluated']} tokens, threads {res['threads']}, answer {res['answer']!r}",
                  file=sys.stderr)
    print(f"\npara on the local pool, {n} tasks, each mode in fresh processes (sums over the tasks)\n")
    print("| mode | role | calls | prompt evaluated | prompt reused | seconds |")
    print("|---|---|---|---|---|---|")
    for mode, runs in results.items():
        for r in ("decision", "synthesis", "agent"):
            rows = [x["roles"][r] for x in runs if r in x["roles"]]
            if rows:
                print(f"| {mode} | {r} | {sum(x['calls'] for x in rows):.0f} | {sum(x['evaluated'] for x in rows):.0f} "
                      f"| {sum(x['reused'] for x in rows):.0f} | {sum(x['seconds'] for x in rows):.1f} |")
    print("\n| mode | first decision: prompt evaluated | episode wall (run line) | process wall | answers |")
    print("|---|---|---|---|---|")
    for mode, runs in results.items():
        print(f"| {mode} | {sum(x['first_decision_evaluated'] for x in runs)} | {sum(x['wall'] for x in runs):.1f}s "
              f"| {sum(x['process'] for x in runs):.1f}s | {', '.join(x['answer'] for x in runs)} |")
    b, w = results["before"], results["warm"]
    fb, fw = sum(x["first_decision_evaluated"] for x in b), sum(x["first_decision_evaluated"] for x in w)
    print(f"\nbefore / warm: first decision's prompt tokens evaluated {fb}/{fw} = {fb / max(1, fw):.1f}x fewer; "
          f"episode wall {sum(x['wall'] for x in b) / max(1e-9, sum(x['wall'] for x in w)):.2f}x; "
          f"process wall {sum(x['process'] for x in b) / max(1e-9, sum(x['process'] for x in w)):.2f}x")


def pool_factory(before: bool, one_thread: bool = True) -> Any:
    """The local pool, as before (prefix cache off, grammar run over the whole vocabulary at each
    greedy step) or now; with 1 thread per model, or (``one_thread=False``) threads by load."""
    def make() -> Pool:
        base = Pool.preset("local").config
        update: dict[str, Any] = {"prefix_cache": not before, **({"n_threads": 1} if one_thread else {})}
        models = [m.model_copy(update=update) for m in base.models]
        pool = Pool(PoolConfig.model_validate({**base.model_dump(), "models": [m.model_dump() for m in models]}),
                    source="preset 'local', 1 thread, " + ("as before" if before else "now"))
        for name in pool.names:
            model = pool.get(name)
            if isinstance(model, LlamaCppModel):
                model.fast_grammar = not before
        return pool
    return make


async def timed_run(key: str, before: bool, n: int, store: TraceStore, state: dict[str, Any],
                    state_path: Path, one_thread: bool = True) -> None:
    """One eval run (resumed when it was started before); its wall time is added to the state."""
    from orchestrion.eval.runner import Observer

    class Remember(Observer):
        def started(self, run_id: str, tally: Any, resumed: bool) -> None:
            state.setdefault(key, {"run_id": run_id, "wall_s": 0.0})
            state_path.write_text(json.dumps(state, indent=1))

    entry = state.get(key)
    if entry is not None and entry.get("done"):
        return
    config = EvalConfig(dataset="bigbench:arithmetic/3_digit_multiplication", strategies=["direct", "para"],
                        limit=n, seed=7, pool="local")
    started = time.perf_counter()
    try:
        await run_eval(config, store, resume=entry["run_id"] if entry else None, pool=pool_factory(before, one_thread),
                       observer=Remember())
        state[key]["done"] = True
    finally:  # the time of every part counts, a cut-short one included
        if key in state:
            state[key]["wall_s"] += time.perf_counter() - started
            state_path.write_text(json.dumps(state, indent=1))


async def part2(n: int, out: Path, alone: bool) -> None:
    """Both runs at once in this process, one thread per model each: on 2 cores each mode has a
    core, and whatever else runs on the machine slows both alike."""
    state_path = out / "state.json"
    state: dict[str, Any] = json.loads(state_path.read_text()) if state_path.is_file() else {}
    store = TraceStore(out / "eval.db")
    keys = {label: f"eval/{label}/{n}" for label in ("before", "warm")}
    await asyncio.gather(*(timed_run(keys[label], label == "before", n, store, state, state_path)
                           for label in keys))
    rows = [(label, state[key]["wall_s"], summarize(store, state[key]["run_id"])) for label, key in keys.items()]
    print(f"\neval direct,para on {n} 3-digit products (seed 7), local pool, before and now at once in one "
          "process, 1 thread per model\n")
    print("| mode | strategy | accuracy | episodes | episode wall total | prompt reused |")
    print("|---|---|---|---|---|---|")
    for label, _, summaries in rows:
        for s in summaries:
            reuse = "-" if s.reuse_rate is None else f"{s.reuse_rate:.0%}"
            print(f"| {label} | {s.strategy} | {s.accuracy:.2f} ± {s.stderr:.2f} | {s.episodes} | {s.wall_s:.0f}s "
                  f"| {reuse} |")
    (_, wb, _), (_, ww, _) = rows
    print(f"\nend to end: before {wb:.0f}s, warm {ww:.0f}s = {wb / max(1e-9, ww):.2f}x faster")
    if alone:  # now, alone on the machine with threads by load: what a user's eval gets
        key = f"eval/now-alone/{n}"
        await timed_run(key, False, n, store, state, state_path, one_thread=False)
        wa = state[key]["wall_s"]
        for s in summarize(store, state[key]["run_id"]):
            reuse = "-" if s.reuse_rate is None else f"{s.reuse_rate:.0%}"
            print(f"| now, alone, threads by load | {s.strategy} | {s.accuracy:.2f} ± {s.stderr:.2f} | {s.episodes} "
                  f"| {s.wall_s:.0f}s | {reuse} |")
        print(f"now alone on the machine: {wa:.0f}s end to end = {wb / max(1e-9, wa):.2f}x faster than before")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=3, help=f"part 1: tasks (at most {len(TASKS)}; 0 = skip)")
    ap.add_argument("--eval", type=int, default=0, metavar="N", help="part 2: eval on N 3-digit products (0 = skip)")
    ap.add_argument("--alone", action="store_true",
                    help="part 2: then run `now` alone with threads by load (what a user's eval gets)")
    ap.add_argument("--out", type=Path, default=Path("bench/out/prefix_cache"))
    ap.add_argument("--fragment", type=Path, default=None, metavar="PATH",
                    help="also write the printed tables to PATH (markdown), headed by the command, commit, date "
                         "and machine; written only when the run ends without an error")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tee_fragment(args.fragment):
        if args.episodes:
            part1(min(args.episodes, len(TASKS)), args.out)
        if args.eval:
            asyncio.run(part2(args.eval, args.out, args.alone))


if __name__ == "__main__":
    main()
