"""Grow some rows of the local-pool table to a larger sample, leaving the smaller runs as they were.

For each task and each ``--rows`` entry, the run of ``--from`` examples (a key of
``bench/local_pool.py``'s run-id file, ``test/<task>/<row>/<from>``) is forked whole
(:func:`orchestrion.trace.fork_run`) and the fork is extended to ``--to`` examples of the same
shuffle (``orchestrion eval --resume FORK --limit TO``): only the new examples run. The forks'
ids go to ``--out-state`` under ``test/<task>/<row>/<to>``, so ``bench/local_pool.py --limit TO
--report-only --state OUT_STATE`` prints the larger table, and the smaller one stays printable
from ``--state``. Started again, it resumes unfinished forks and skips finished ones.

Run from the repository root::

    .venv/bin/python bench/grow_runs.py --state bench/out/local_pool/state_para_v2.json \\
        --out-state bench/out/local_pool/state_40.json --from 20 --to 40
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from local_pool import PoolFactory  # the pool a run names: "local", or one of its models alone
from refresh_para import need_table, write_merged

from orchestrion import EvalConfig, TraceStore, run_eval
from orchestrion.trace import fork_run

TASKS = ["arithmetic/3_digit_multiplication", "arithmetic/2_digit_division", "object_counting", "word_sorting",
         "date_understanding", "logical_deduction", "penguins_in_a_table", "temporal_sequences"]
ROWS = "direct@qwen2.5-coder-1.5b,auto@local"


async def grow(key: str, old: str, store: TraceStore, state: dict[str, str], source: Path, out: Path,
               to: int) -> None:
    fork = state.get(key)
    if fork is None:
        episodes = store.query("SELECT id FROM episodes WHERE run_id = ?", (old,))
        fork = fork_run(store, old, [e["id"] for e in episodes])
        state[key] = fork
        write_merged(source, state, out)
        print(f"[{key}] fork {fork} of {old}", file=sys.stderr, flush=True)
    config = json.loads(store.query("SELECT config FROM runs WHERE id = ?", (fork,))[0]["config"])
    done = store.query("SELECT status FROM runs WHERE id = ?", (fork,))[0]["status"] == "finished"
    if done and config.get("limit") == to:
        print(f"[{key}] finished before: run {fork}", file=sys.stderr)
        return
    started = time.perf_counter()
    unused = EvalConfig(dataset="unused", strategies=["direct"])
    pool = PoolFactory(only=None if config["pool"] == "local" else config["pool"])
    grown = config.get("limit") == to  # extended before, then interrupted: finish it
    result = await run_eval(unused, store, resume=fork, pool=pool, extend_to=None if grown else to)
    print(f"[{key}] {result.ran} new episodes in {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, default=Path("bench/out/local_pool/traces.db"))
    ap.add_argument("--state", type=Path, required=True, help="bench/local_pool.py's run-id file with the smaller runs")
    ap.add_argument("--out-state", type=Path, required=True, help="where the run ids with the grown forks go")
    ap.add_argument("--from", dest="small", type=int, default=20, help="the runs' present number of examples")
    ap.add_argument("--to", type=int, default=40, help="the number of examples to grow them to")
    ap.add_argument("--rows", default=ROWS, help="rows as strategy@model, comma-separated (in this order per task)")
    ap.add_argument("--tasks", default=",".join(TASKS), help="tasks, comma-separated")
    args = ap.parse_args()
    if args.to <= args.small:
        sys.exit(f"--to {args.to} must be larger than --from {args.small}")
    need_table(args.state, args.db)
    old_state = json.loads(args.state.read_text())
    earlier = json.loads(args.out_state.read_text()) if args.out_state.is_file() else {}
    state = {k: v for k, v in earlier.items() if k.endswith(f"/{args.to}")}  # the forks made before
    store = TraceStore(args.db)
    for task in args.tasks.split(","):  # task by task: a run stopped early leaves whole tasks, every row grown
        for row in args.rows.split(","):
            old = old_state.get(f"test/{task}/{row}/{args.small}")
            if old is None:
                print(f"[{task}] no {row} run of {args.small} in {args.state}; skipped", file=sys.stderr)
                continue
            await grow(f"test/{task}/{row}/{args.to}", old, store, state, args.state, args.out_state, args.to)
    write_merged(args.state, state, args.out_state)
    store.close()


if __name__ == "__main__":
    asyncio.run(main())
