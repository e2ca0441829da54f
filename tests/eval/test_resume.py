"""Resume after a cancellation, a real SIGKILL and a real Ctrl-C: nothing re-run, nothing duplicated."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrion import Pool, ScriptedModel, TraceStore
from orchestrion.eval.runner import EvalConfig, Observer, Tally, run_eval
from tests.fake_openai_server import run_in_process

N_TASKS = 8
ROWS = [{"id": f"t{i}", "prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(N_TASKS)]
EXE = str(Path(sys.executable).parent / "orchestrion")


def write_jsonl(path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return path


def episodes(db: Path, run_id: str | None = None) -> list[dict[str, Any]]:
    store = TraceStore(db)
    try:
        if run_id is None:
            return store.query("SELECT * FROM episodes")
        return store.query("SELECT * FROM episodes WHERE run_id = ?", (run_id,))
    finally:
        store.close()


def check_complete(rows: list[dict[str, Any]], strategies: list[str], epochs: int) -> list[dict[str, Any]]:
    """Every (task, strategy, epoch) finished and counted exactly once; the rest is interrupted."""
    counted = [r for r in rows if r["finished"] == 1 and r["status"] not in ("interrupted", "cancelled")]
    keys = Counter((r["task_id"], r["strategy"], r["epoch"]) for r in counted)
    assert keys == Counter({(f"t{i}", s, e): 1 for i in range(N_TASKS) for s in strategies for e in range(epochs)})
    assert all(r["status"] == "interrupted" for r in rows if r not in counted)
    assert all("score" in json.loads(r["meta"]) for r in counted)
    return counted


# -- in process: cancel the run part-way, then resume ------------------------------------------
class StopAfter(Observer):
    def __init__(self, n: int, stop: Callable[[], None]) -> None:
        self.n, self.stop, self.run_id = n, stop, ""

    def started(self, run_id: str, tally: Tally, resumed: bool) -> None:
        self.run_id = run_id

    def episode(self, outcome: Any, tally: Tally) -> None:
        if tally.done == self.n:
            self.stop()


async def test_cancel_then_resume_in_process(tmp_path: Path, store: TraceStore) -> None:
    data = write_jsonl(tmp_path / "d.jsonl")
    config = EvalConfig(dataset=str(data), strategies=["direct", "cot"], epochs=2, concurrency=4)

    def pool() -> Pool:
        return Pool.from_models([ScriptedModel(["Answer: 4"], name="m", delay_s=0.05)])

    task: asyncio.Task[Any] | None = None
    observer = StopAfter(5, lambda: task.cancel() if task else None)
    task = asyncio.create_task(run_eval(config, store, pool=pool, observer=observer))
    with pytest.raises(asyncio.CancelledError):
        await task
    run_id = observer.run_id
    before = store.query("SELECT * FROM episodes WHERE run_id = ?", (run_id,))
    finished_before = {r["id"]: r for r in before if r["finished"] == 1 and r["status"] == "ok"}
    assert len(finished_before) >= 5
    assert len(before) < 32  # it really stopped part-way
    assert {r["status"] for r in before} <= {"ok", "interrupted"}  # in-flight ones: interrupted, never "cancelled"
    assert store.query("SELECT status FROM runs WHERE id = ?", (run_id,)) == [{"status": "interrupted"}]

    resumed = Observer()
    run = await run_eval(EvalConfig(dataset="ignored", strategies=["x"]), store, resume=run_id[:8], pool=pool,
                         observer=resumed)
    assert run.run_id == run_id and run.skipped == len(finished_before) and run.ran == 32 - len(finished_before)
    after = store.query("SELECT * FROM episodes WHERE run_id = ?", (run_id,))
    counted = check_complete(after, ["direct", "cot"], 2)
    for eid, row in finished_before.items():  # the episodes finished before are untouched
        assert next(r for r in counted if r["id"] == eid) == row
    assert store.query("SELECT status FROM runs WHERE id = ?", (run_id,)) == [{"status": "finished"}]
    # resuming a finished run runs nothing
    again = await run_eval(config, store, resume=run_id, pool=pool)
    assert (again.skipped, again.ran) == (32, 0)
    assert len(store.query("SELECT id FROM episodes WHERE run_id = ?", (run_id,))) == len(after)


async def test_a_finished_run_extends_to_a_larger_sample(tmp_path: Path, store: TraceStore) -> None:
    """--resume RUN --limit N: the first examples keep their episodes, only the new ones run."""
    data = write_jsonl(tmp_path / "d.jsonl")

    def pool() -> Pool:
        return Pool.from_models([ScriptedModel(["Answer: 4"], name="m")])

    small = await run_eval(EvalConfig(dataset=str(data), strategies=["direct"], limit=3, seed=5), store, pool=pool)
    first = store.query("SELECT id, task_id FROM episodes WHERE run_id = ?", (small.run_id,))
    grown = await run_eval(EvalConfig(dataset="ignored", strategies=["x"]), store, resume=small.run_id,
                           pool=pool, extend_to=6)
    assert grown.run_id == small.run_id and (grown.skipped, grown.ran) == (3, 3)
    fresh = await run_eval(EvalConfig(dataset=str(data), strategies=["direct"], limit=6, seed=5), store, pool=pool)
    def config_of(run_id: str) -> dict[str, Any]:
        return dict(json.loads(store.query("SELECT config FROM runs WHERE id = ?", (run_id,))[0]["config"]))

    stored, fresh_ids = config_of(small.run_id), config_of(fresh.run_id)["task_ids"]
    assert stored["limit"] == 6 and stored["task_ids"] == fresh_ids  # the same six a new run would draw
    after = store.query("SELECT id, task_id FROM episodes WHERE run_id = ?", (small.run_id,))
    assert all(row in after for row in first) and sorted(r["task_id"] for r in after) == sorted(fresh_ids)
    from orchestrion import ConfigError

    with pytest.raises(ConfigError, match="a larger limit is needed"):
        await run_eval(EvalConfig(dataset="x", strategies=["direct"]), store, resume=small.run_id, extend_to=6)
    with pytest.raises(ConfigError, match="extend_to makes an earlier run larger: it needs resume"):
        await run_eval(EvalConfig(dataset=str(data), strategies=["direct"]), store, extend_to=6)
    other = tmp_path / "other.jsonl"  # a different file whose first examples are not the run's
    other.write_text("".join(json.dumps({**r, "id": "x" + r["id"]}) + "\n" for r in ROWS), encoding="utf-8")
    changed = await run_eval(EvalConfig(dataset=str(other), strategies=["direct"], limit=2, seed=5), store, pool=pool)
    write_jsonl(other)
    with pytest.raises(ConfigError, match="not the first 2"):
        await run_eval(EvalConfig(dataset="x", strategies=["direct"]), store, resume=changed.run_id, extend_to=4)


async def test_resume_refuses_a_dataset_that_changed(tmp_path: Path, store: TraceStore) -> None:
    data = write_jsonl(tmp_path / "d.jsonl")
    run = await run_eval(EvalConfig(dataset=str(data), strategies=["direct"]), store,
                         pool=lambda: Pool.from_models([ScriptedModel(["0"])]))
    data.write_text(json.dumps({"id": "new", "prompt": "p", "answer": "1"}) + "\n", encoding="utf-8")
    from orchestrion import ConfigError

    with pytest.raises(ConfigError, match="no longer gives the same tasks"):
        await run_eval(EvalConfig(dataset="x", strategies=["direct"]), store, resume=run.run_id)


# -- real processes against a slow server -------------------------------------------------------
@pytest.fixture
def slow_server() -> Iterator[str]:
    with run_in_process("--delay-ms", "400", "--reply", "Answer: 4") as url:
        yield url


def start_eval(tmp_path: Path, url: str, *extra: str) -> tuple[subprocess.Popen[str], Path]:
    pool = tmp_path / "pool.yaml"
    pool.write_text(f"models:\n  - name: fake\n    base_url: {url}\n    max_concurrency: 16\n    max_retries: 0\n",
                    encoding="utf-8")
    db = tmp_path / "t.db"
    data = write_jsonl(tmp_path / "d.jsonl")
    cmd = [EXE, "eval", "--dataset", str(data), "--strategies", "direct,cot", "--epochs", "2", "--concurrency", "2",
           "--pool", str(pool), "--db", str(db), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, db


def wait_finished(db: Path, n: int, proc: subprocess.Popen[str], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        if db.exists():
            try:
                done = [r for r in episodes(db) if r["finished"] == 1]
            except Exception:  # noqa: BLE001 - the schema may not be there yet
                done = []
            if len(done) >= n:
                return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} episodes finished in {timeout_s}s")


def resume(db: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, "eval", "--resume", run_id, "--db", str(db), "--json"], capture_output=True, text=True,
                          timeout=300)


def test_sigkill_then_resume(tmp_path: Path, slow_server: str) -> None:
    proc, db = start_eval(tmp_path, slow_server)
    wait_finished(db, 3, proc)
    proc.send_signal(signal.SIGKILL)
    _, stderr = proc.communicate(timeout=30)
    (run,) = TraceStore(db).query("SELECT * FROM runs")
    assert run["status"] == "running"  # nobody could close it
    assert f"run {run['id']} started" in stderr  # the id was printed at the start, for resuming
    before = episodes(db, run["id"])
    finished_before = {r["id"]: r for r in before if r["finished"] == 1}
    assert 3 <= len(finished_before) < 32

    done = resume(db, run["id"])
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["run_id"] == run["id"]
    assert [s["strategy"] for s in summary["summaries"]] == ["direct", "cot"]
    assert all(s["episodes"] == 16 for s in summary["summaries"])
    after = episodes(db, run["id"])
    counted = check_complete(after, ["direct", "cot"], 2)
    for eid, row in finished_before.items():
        assert next(r for r in counted if r["id"] == eid) == row  # same id, same row
    unfinished_before = {r["id"] for r in before if r["finished"] == 0}
    assert {r["id"] for r in after if r["status"] == "interrupted"} == unfinished_before
    assert len(after) == 32 + len(unfinished_before)
    assert TraceStore(db).query("SELECT status FROM runs")[0]["status"] == "finished"


def test_ctrl_c_marks_the_run_interrupted(tmp_path: Path, slow_server: str) -> None:
    proc, db = start_eval(tmp_path, slow_server)
    wait_finished(db, 2, proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    (run,) = TraceStore(db).query("SELECT * FROM runs")
    assert run["status"] == "interrupted"
    # issue 36 row 23: one line says how many episodes finished and how to go on
    match = re.search(r"interrupted: (\d+) of 32 episodes finished and kept; "
                      r"continue with: orchestrion eval --resume (\w+) --db (\S+)", stderr)
    assert match and match.group(2) == run["id"] and match.group(3) == str(db), stderr
    rows = episodes(db, run["id"])
    assert int(match.group(1)) == sum(r["status"] == "ok" for r in rows)
    assert all(r["status"] in ("ok", "interrupted") for r in rows)  # none left running or cancelled
    assert "Traceback" not in stderr
    done = resume(db, run["id"])
    assert done.returncode == 0, done.stderr
    check_complete(episodes(db, run["id"]), ["direct", "cot"], 2)



# -- one process per run -------------------------------------------------------------------------
HOLD = """
import sys, time
from pathlib import Path
from orchestrion.eval._lock import run_lock
with run_lock(Path(sys.argv[1]), sys.argv[2]):
    print("holding", flush=True)
    time.sleep(60)
"""


async def test_a_live_holder_is_named_and_a_dead_ones_lock_is_taken_over(tmp_path: Path, store: TraceStore) -> None:
    from orchestrion._errors import RunLockedError
    from orchestrion.eval._lock import lock_path

    data = write_jsonl(tmp_path / "d.jsonl")
    config = EvalConfig(dataset=str(data), strategies=["direct"])

    def pool() -> Pool:
        return Pool.from_models([ScriptedModel(["Answer: 4"], name="m")])

    run = await run_eval(config, store, pool=pool)
    assert not lock_path(store.path, run.run_id).exists()  # released after a normal finish
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(store.path), run.run_id], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        with pytest.raises(RunLockedError, match=rf"run {run.run_id} is already being run by pid {holder.pid} "
                                                 r"on host \S+ since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d; wait"):
            await run_eval(config, store, resume=run.run_id, pool=pool)
        holder.send_signal(signal.SIGKILL)  # dies holding it: the file stays, the flock goes with the process
        holder.wait(10)
        assert lock_path(store.path, run.run_id).exists()
        again = await run_eval(config, store, resume=run.run_id, pool=pool)
        assert again.ran == 0 and again.skipped == N_TASKS  # taken over; nothing was run twice
    finally:
        holder.kill()
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()
    assert not lock_path(store.path, run.run_id).exists()


async def test_a_fork_keeps_chosen_episodes_and_resume_runs_the_rest(tmp_path: Path, store: TraceStore) -> None:
    """fork_run: the kept episodes are copied whole under new ids; --resume on the fork reruns the others."""
    from orchestrion.trace import fork_run

    data = write_jsonl(tmp_path / "d.jsonl")
    old = await run_eval(EvalConfig(dataset=str(data), strategies=["direct"], limit=4, seed=5), store,
                         pool=lambda: Pool.from_models([ScriptedModel(["Answer: 4"], name="m")]))
    episodes = store.query("SELECT id, task_id, answer FROM episodes WHERE run_id = ? ORDER BY task_id", (old.run_id,))
    kept = episodes[:2]
    fork = fork_run(store, old.run_id, [e["id"] for e in kept])
    copies = store.query("SELECT id, task_id, answer FROM episodes WHERE run_id = ? ORDER BY task_id", (fork,))
    assert [(c["task_id"], c["answer"]) for c in copies] == [(k["task_id"], k["answer"]) for k in kept]
    assert not {c["id"] for c in copies} & {e["id"] for e in episodes}  # copies, not moves
    for c, k in zip(copies, kept):  # the whole episode came along: its spans (with their tree) and decisions
        spans, old_spans = store.spans(c["id"]), store.spans(k["id"])
        assert [s.name for s in spans] == [s.name for s in old_spans] and spans
        ids = {s.id for s in spans}
        assert all(s.parent_id is None or s.parent_id in ids for s in spans)
    done = await run_eval(EvalConfig(dataset="ignored", strategies=["x"]), store, resume=fork,
                          pool=lambda: Pool.from_models([ScriptedModel(["Answer: 5"], name="m")]))
    assert (done.skipped, done.ran) == (2, 2)
    after = store.query("SELECT task_id, answer FROM episodes WHERE run_id = ? ORDER BY task_id", (fork,))
    assert [a["answer"] for a in after] == ["Answer: 4", "Answer: 4", "Answer: 5", "Answer: 5"]
    assert [a["task_id"] for a in after] == [e["task_id"] for e in episodes]
    assert len(store.query("SELECT id FROM episodes WHERE run_id = ?", (old.run_id,))) == 4  # the old run is intact
    from orchestrion import TraceError

    with pytest.raises(TraceError, match="not one of its episodes"):
        fork_run(store, old.run_id, ["nope"])
