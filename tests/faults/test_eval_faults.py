"""`orchestrion eval` and `train export` under faults: per-task statuses, kill -9 then --resume
(none lost, none run twice), one process per run, and an export killed midway."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from .conftest import FaultServer, assert_user_message, cli, episodes

EVAL_CASES = {  # fault tag -> status each episode of that task must end with
    "500@eval": "error",
    "503:once@eval": "ok",
    "hang@eval": "error",
    "drop@eval": "error",
    "half_body@eval": "error",
    "invalid_json@eval": "error",
    "429:once@eval": "ok",
    "none@eval": "ok",
}


def write_tasks(path: Path, tags: list[str]) -> Path:
    rows = [{"id": f"t{i}", "prompt": f"What is 2+2? fault:{tag}", "answer": "4"} for i, tag in enumerate(tags)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def counted(db: Path) -> list[dict[str, object]]:
    return [r for r in episodes(db) if r["finished"] == 1 and r["status"] not in ("interrupted", "cancelled")]


def test_eval_records_every_fault_once(fault_server: FaultServer, tmp_path: Path) -> None:
    tags = list(EVAL_CASES)
    data = write_tasks(tmp_path / "d.jsonl", tags)
    db = tmp_path / "t.db"
    res = cli("eval", "--dataset", f"jsonl:{data}", "--strategies", "direct", "--concurrency", "8",
              "--pool", str(fault_server.pool(tmp_path)), db=db, timeout=60)
    assert res.returncode == 1, res.stderr  # some episodes ended in error: the run is not complete
    assert_user_message(res.stderr)
    assert res.stderr.strip().splitlines()[-1].endswith("--retry-errors")
    rows = episodes(db)
    assert Counter(r["task_id"] for r in rows) == Counter(f"t{i}" for i in range(len(tags)))  # none lost or doubled
    by_task = {r["task_id"]: r for r in rows}
    got = {tag: by_task[f"t{i}"]["status"] for i, tag in enumerate(tags)}
    assert got == EVAL_CASES
    assert all(r["finished"] == 1 for r in rows)


def test_eval_in_which_nothing_succeeded_exits_non_zero(fault_server: FaultServer, tmp_path: Path) -> None:
    data = write_tasks(tmp_path / "d.jsonl", ["500@all-fail", "invalid_json@all-fail"])
    db = tmp_path / "t.db"
    res = cli("eval", "--dataset", f"jsonl:{data}", "--pool", str(fault_server.pool(tmp_path)), db=db)
    assert res.returncode == 1, res.stderr
    assert_user_message(res.stderr)
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: run ") and "no episode succeeded (2 error); first error: model 'fault'" in last
    assert [r["status"] for r in episodes(db)] == ["error", "error"]


def _wait_for(predicate: object, limit_s: float = 30) -> None:
    deadline = time.monotonic() + limit_s
    while True:
        try:
            if predicate():  # type: ignore[operator]
                return
        except sqlite3.OperationalError:  # the database is still being created
            pass
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _run_id(db: Path) -> str | None:
    if not db.exists():
        return None
    conn = sqlite3.connect(db)
    try:
        row = conn.execute("SELECT id FROM runs WHERE kind = 'eval'").fetchone()
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()
    return None if row is None else str(row[0])


def test_kill_9_then_resume_one_process_at_a_time(fault_server: FaultServer, tmp_path: Path) -> None:
    n = 12
    data = write_tasks(tmp_path / "d.jsonl", ["slow@kill"] * n)
    db = tmp_path / "t.db"
    pool = str(fault_server.pool(tmp_path))
    env = {**os.environ, "ORCHESTRION_DB": str(db)}
    first = subprocess.Popen([sys.executable, "-m", "orchestrion", "eval", "--dataset", f"jsonl:{data}",
                              "--concurrency", "2", "--pool", pool], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: db.exists() and len(counted(db)) >= 2)
        run_id = _run_id(db)
        assert run_id
        second = cli("eval", "--resume", run_id, db=db, timeout=30)  # while the first still runs
        assert second.returncode == 2, second.stderr
        assert_user_message(second.stderr)
        assert f"run {run_id} is already being run by pid {first.pid} on host " in second.stderr
        os.kill(first.pid, signal.SIGKILL)
    finally:
        first.kill()
        first.wait(10)
    done_before = {r["id"] for r in counted(db)}
    assert 2 <= len(done_before) < n
    resumed = cli("eval", "--resume", run_id, db=db, timeout=60)  # takes over the dead process's lock
    assert resumed.returncode == 0, resumed.stderr
    assert_user_message(resumed.stderr)
    rows = episodes(db)
    final = counted(db)
    assert Counter(r["task_id"] for r in final) == Counter(f"t{i}" for i in range(n))  # none lost, none twice
    assert done_before <= {r["id"] for r in final}  # finished work was not run again
    assert all(r["status"] == "interrupted" for r in rows if r not in final)
    assert not list(tmp_path.glob("*.lock"))  # released


def test_train_export_killed_midway_leaves_no_partial_file(fault_server: FaultServer, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    data = write_tasks(tmp_path / "d.jsonl", [f"none@export{i}" for i in range(4)])
    db = tmp_path / "t.db"
    res = cli("eval", "--dataset", f"jsonl:{data}", "--strategies", "para", "--pool",
              str(fault_server.pool(tmp_path)), db=db, timeout=60)
    assert res.returncode == 0, res.stderr
    run_id = _run_id(db)
    assert run_id
    out = tmp_path / "out"
    env = {**os.environ, "ORCHESTRION_DB": str(db)}
    args = [sys.executable, "-m", "orchestrion", "train", "export", "--run", run_id, "--out", str(out),
            "--format", "verl", "--all"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("records read:")  # it is working: kill it now
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    import pyarrow.parquet as pq

    target = out / "train.parquet"
    before = pq.read_table(target).num_rows if target.exists() else None  # whole, or absent
    again = cli("train", "export", "--run", run_id, "--out", str(out), "--format", "verl", "--all", db=db)
    assert again.returncode == 0, again.stderr
    rows = pq.read_table(target).num_rows
    assert rows > 0 and before in (None, rows)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    assert len(episodes(db)) == 4


def test_resume_retry_errors_runs_the_failed_episodes_again(fault_server: FaultServer, tmp_path: Path) -> None:
    data = write_tasks(tmp_path / "d.jsonl", ["401:once@retry", "none@retry"])  # t0 fails once, not retried
    db = tmp_path / "t.db"
    first = cli("eval", "--dataset", f"jsonl:{data}", "--pool", str(fault_server.pool(tmp_path)), db=db)
    assert first.returncode == 1, first.stderr
    assert_user_message(first.stderr)
    run_id = _run_id(db)
    last = first.stderr.strip().splitlines()[-1]
    assert last == (f"error: run {run_id}: 1 episode(s) ended in error; once the cause is fixed, run them again "
                    f"with: orchestrion eval --resume {run_id} --retry-errors")
    plain = cli("eval", "--resume", str(run_id), db=db)  # without the flag an error is done: nothing runs
    assert plain.returncode == 1 and "0 episodes ran, 2 were done before" in plain.stderr
    retried = cli("eval", "--resume", str(run_id), "--retry-errors", db=db)
    assert retried.returncode == 0, retried.stderr
    assert_user_message(retried.stderr)
    assert "1 episodes ran, 1 were done before" in retried.stderr
    by_status = Counter((r["task_id"], r["status"]) for r in episodes(db))
    assert by_status == Counter({("t0", "retried"): 1, ("t0", "ok"): 1, ("t1", "ok"): 1})  # the error is kept
    assert Counter(r["task_id"] for r in counted(db) if r["status"] != "retried") == Counter(["t0", "t1"])
    assert fault_server.seen["401:once@retry"] == 2


def test_retry_errors_needs_resume(tmp_path: Path) -> None:
    res = cli("eval", "--dataset", "jsonl:x.jsonl", "--retry-errors", db=tmp_path / "t.db")
    assert res.returncode == 2 and "--retry-errors re-runs the failed episodes" in res.stderr
    assert_user_message(res.stderr)


def test_run_stores_an_absolute_pool_path_so_resume_works_anywhere(fault_server: FaultServer,
                                                                   tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    fault_server.pool(work)  # work/pool.yaml
    data = write_tasks(work / "d.jsonl", ["401:once@abs"])  # fails once: the resume must reach the pool again
    db = tmp_path / "t.db"
    env = {**os.environ, "ORCHESTRION_DB": str(db)}
    res = subprocess.run([sys.executable, "-m", "orchestrion", "eval", "--dataset", f"jsonl:{data}",
                          "--pool", "pool.yaml"], cwd=work, capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 1, res.stderr
    conn = sqlite3.connect(db)
    config = json.loads(conn.execute("SELECT config FROM runs WHERE kind = 'eval'").fetchone()[0])
    conn.close()
    assert config["pool"] == str(work / "pool.yaml")
    elsewhere = subprocess.run([sys.executable, "-m", "orchestrion", "eval", "--resume", str(_run_id(db)),
                                "--retry-errors"], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert "1 episodes ran, 0 were done before" in elsewhere.stderr
