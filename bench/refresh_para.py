"""Bring ``para``'s ``@test`` runs up to date after ``programs_by_coder``, rerunning only what it changes.

``programs_by_coder`` acts on one thing: a ``python`` call of the orchestrator whose program writes
no number of the task (it goes to the ``coder`` instead). An episode in which the orchestrator made
no such call cannot change: every prompt and decision before that point is the same, and decoding
is greedy. So, per task, this script forks the old ``para`` run (:func:`orchestrion.trace.fork_run`),
keeping the episodes without such a call, and resumes the fork: only the others run again, with
the new code. The old run stays as it was.

It prints, per task, how many episodes were kept and rerun, and the accuracy before and after.
The forks' ids go to ``--out-state`` (``--state`` as it is then, with the ``para`` keys replaced), so
``bench/local_pool.py --report-only --state OUT_STATE`` prints the table with the new ``para``.
Started again, it resumes unfinished forks and skips finished ones.

Run from the repository root::

    .venv/bin/python bench/refresh_para.py --state bench/out/local_pool/state_report.json \\
        --out-state bench/out/local_pool/state_para_v2.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from pool_report import scores as _scores  # the table's own reading of a run's scores

from orchestrion import EvalConfig, TraceStore, run_eval
from orchestrion.strategies.para import uses_task_numbers
from orchestrion.trace import fork_run

ORDER = ["object_counting", "word_sorting", "date_understanding", "logical_deduction", "penguins_in_a_table",
         "temporal_sequences", "arithmetic/3_digit_multiplication", "arithmetic/2_digit_division"]


def touched(store: TraceStore, episode_id: str, prompt: str) -> bool:
    """Whether the orchestrator made a python call whose program writes none of the task's numbers
    (a call inside an agent, such as the coder's own run, is not the orchestrator's)."""
    spans = store.spans(episode_id)
    kinds = {s.id: s.kind for s in spans}
    for s in spans:
        if s.kind != "tool" or s.name != "python" or kinds.get(s.parent_id or "") == "agent":
            continue
        code = (s.attrs_value().get("args") or {}).get("code")
        if isinstance(code, str) and not uses_task_numbers(code, prompt):
            return True
    return False


def accuracy(store: TraceStore, run_id: str) -> tuple[float, int]:
    """Mean score and count of the run's counted para episodes, as the table counts them."""
    scores = list(_scores(store, run_id, "para").values())
    return (sum(scores) / len(scores) if scores else 0.0), len(scores)


def need_table(state: Path, db: Path) -> None:
    """Exit with one line when the table's run-id file or trace database is missing."""
    for path in (state, db):
        if not path.is_file():
            sys.exit(f"{path}: not found; build the table first with bench/local_pool.py (its run-id file "
                     "and trace database)")


def write_merged(source: Path, own: dict[str, str], out: Path) -> None:
    """``out``: the run ids ``source`` has now (another process may still be adding some), with ``own`` over them."""
    out.write_text(json.dumps({**json.loads(source.read_text()), **own}, indent=1))


async def refresh(task: str, key: str, old: str, store: TraceStore, state: dict[str, str], source: Path,
                  out: Path) -> str:
    fork = state.get(key)
    if fork is None:
        episodes = store.query("SELECT id, task FROM episodes WHERE run_id = ? AND finished = 1", (old,))
        keep = [e["id"] for e in episodes if not touched(store, e["id"], json.loads(e["task"])["prompt"])]
        fork = fork_run(store, old, keep)
        state[key] = fork
        write_merged(source, state, out)
        print(f"[{task}] fork {fork} of {old}: {len(keep)} kept, {len(episodes) - len(keep)} to rerun",
              file=sys.stderr, flush=True)
    status = store.query("SELECT status FROM runs WHERE id = ?", (fork,))[0]["status"]
    if status != "finished":
        started = time.perf_counter()
        result = await run_eval(EvalConfig(dataset="unused", strategies=["para"]), store, resume=fork)
        print(f"[{task}] reran {result.ran} episodes in {time.perf_counter() - started:.0f}s", file=sys.stderr,
              flush=True)
    return fork


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, default=Path("bench/out/local_pool/traces.db"))
    ap.add_argument("--state", type=Path, required=True, help="bench/local_pool.py's run-id file with the old runs")
    ap.add_argument("--out-state", type=Path, required=True, help="where the run ids with the forks go")
    ap.add_argument("--limit", type=int, default=20, help="the para runs of this many examples")
    ap.add_argument("--tasks", default=",".join(ORDER), help="tasks, comma-separated, in the order they run")
    args = ap.parse_args()
    need_table(args.state, args.db)
    old_state = json.loads(args.state.read_text())
    earlier = json.loads(args.out_state.read_text()) if args.out_state.is_file() else {}
    state = {k: v for k, v in earlier.items() if "/para@" in k and v != old_state.get(k)}  # forks made before
    store = TraceStore(args.db)
    print("| task | kept | rerun | para before | para after |\n|---|---|---|---|---|")
    for task in args.tasks.split(","):
        key = f"test/{task}/para@local/{args.limit}"
        old = old_state.get(key)
        if old is None:
            print(f"[{task}] no para run in {args.state}; skipped", file=sys.stderr)
            continue
        fork = await refresh(task, key, old, store, state, args.state, args.out_state)
        write_merged(args.state, state, args.out_state)
        kept = store.query("SELECT COUNT(*) AS n FROM episodes e WHERE run_id = ? AND started < "
                           "(SELECT created FROM runs WHERE id = ?)", (fork, fork))[0]["n"]
        (before, n), (after, m) = accuracy(store, old), accuracy(store, fork)
        print(f"| {task} | {kept} | {m - kept} | {before:.2f} ({n}) | {after:.2f} ({m}) |", flush=True)
    store.close()


if __name__ == "__main__":
    asyncio.run(main())
