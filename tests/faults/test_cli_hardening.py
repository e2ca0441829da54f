"""Hardening III for the CLI (issue 36): outputs that are special files (row 7), trace databases
that are devices or someone else's SQLite file (rows 8, 9), ids that are not UTF-8 (row 11),
``--strategies`` and ``--set`` values that used to pass silently (row 16), and ``orchestrion run``
stopped by SIGTERM, kill -9 or a full disk (row 19). Every command runs as a real subprocess."""

from __future__ import annotations

import os
import resource
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrion import TraceStore

from .conftest import TIMEOUT_S, FaultServer, assert_user_message, cli, episodes


def device(path: Path, minor: int) -> Path:
    """A character device of the kernel's memory driver (1, minor: 3 null, 7 full) at ``path``, so
    that a regression replaces a node in the test's folder, never the machine's own /dev file."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


def one_line_error(res: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert_user_message(res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.fixture
def db_with_an_episode(tmp_path: Path) -> Path:
    db = tmp_path / "t.db"
    store = TraceStore(db)
    try:
        store.submit("INSERT INTO episodes (id, status, task, finished) VALUES (?, ?, ?, 1)", ("e1", "ok", "hi"))
        store.flush()
    finally:
        store.close()
    return db


# -- row 7: an output path that is a device or a FIFO is refused, never replaced -------------------

@pytest.mark.parametrize("command", [
    ["trace", "export", "--out", "{target}"],
    ["models", "serve", "--out", "{target}"],
])
@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_output_that_is_a_special_file_is_refused(db_with_an_episode: Path, tmp_path: Path,
                                                  command: list[str], kind: str) -> None:
    target = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(target)
    else:
        device(target, 7)
    args = [a.replace("{target}", str(target)) for a in command]
    line = one_line_error(cli(*args, db=db_with_an_episode, timeout=30))
    what = "a device" if kind == "device" else "a pipe (FIFO)"
    assert f"--out {target}: is {what}, not a regular file" in line
    mode = target.stat().st_mode
    assert stat.S_ISCHR(mode) if kind == "device" else stat.S_ISFIFO(mode)  # left as it was


@pytest.mark.parametrize("command", [["report", "RUN", "--out", "{target}"],
                                     ["train", "export", "--run", "RUN", "--out", "{target}"]])
def test_output_folder_that_is_a_file_is_refused(db_with_an_episode: Path, tmp_path: Path,
                                                 command: list[str]) -> None:
    target = tmp_path / "existing.txt"
    target.write_text("mine")
    args = [a.replace("{target}", str(target)) for a in command]
    line = one_line_error(cli(*args, db=db_with_an_episode, timeout=30))
    assert f"--out {target}: is a file, not a folder" in line
    assert target.read_text() == "mine"


# -- rows 8 and 9: the trace database must be a regular file holding our tables (or new) ------------

def test_device_as_trace_database_is_refused_before_sqlite_opens_it(tmp_path: Path) -> None:
    null = device(tmp_path / "null", 3)
    line = one_line_error(cli("run", "hi", "--strategy", "direct", "--pool", "tiny", "--db", str(null),
                              db=tmp_path / "unused.db"))
    assert f"--db {null}: is a device, not a regular file" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]  # no null-journal, no default database
    assert null.is_char_device()


def test_someone_elses_sqlite_file_is_left_as_it_was(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("INSERT INTO users VALUES ('ada')")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    line = one_line_error(cli("run", "hi", "--strategy", "direct", "--pool", "tiny", "--db", str(other),
                              db=tmp_path / "unused.db"))
    assert "an SQLite database of something else (it holds users)" in line
    assert other.read_bytes() == before  # no trace tables, no WAL switch
    assert not Path(f"{other}-wal").exists()


# -- row 11: an id that is not UTF-8 is one line, exit 2 --------------------------------------------

@pytest.mark.parametrize("command", [
    [b"trace", b"show", b"\xff"],
    [b"trace", b"export", b"\xffab", b"--out", b"{tmp}/x.jsonl"],
    [b"report", b"\xff"],
    [b"eval", b"--resume", b"\xff"],
    [b"train", b"export", b"--run", b"\xff", b"--out", b"{tmp}/o"],
])
def test_an_id_that_is_not_utf8_is_one_line(db_with_an_episode: Path, tmp_path: Path, command: list[bytes]) -> None:
    args = [a.replace(b"{tmp}", os.fsencode(tmp_path)) for a in command]
    env = {**os.environ, "ORCHESTRION_DB": str(db_with_an_episode), "COLUMNS": "200"}
    res = subprocess.run([sys.executable.encode(), b"-m", b"orchestrion", *args], capture_output=True, text=True,
                         errors="replace", timeout=60, env=env)
    line = one_line_error(res)
    assert "is not valid UTF-8 text (an undecodable byte)" in line


# -- row 16: --strategies and --set values that used to be taken silently --------------------------

@pytest.mark.parametrize(("args", "expected"), [
    (["--strategies", "direct,direct"], "direct given more than once"),
    (["--strategies", ""], "give at least one strategy name"),
    (["--strategies", "direct,,cot"], "a blank name between commas"),
    (["--strategies", "para", "--set", "max_rounds=true"], "option 'max_rounds' = True"),
])
def test_eval_refuses_duplicate_blank_and_boolean_values(tmp_path: Path, args: list[str], expected: str) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "prompt": "2+2?", "answer": "4"}\n')
    db = tmp_path / "t.db"
    res = cli("eval", "--dataset", f"jsonl:{data}", "--pool", "tiny", *args, db=db)
    line = one_line_error(res)
    assert expected in line
    assert not db.exists() or not episodes(db)  # refused before any episode


# -- row 19: `run` stopped by SIGTERM, or killed with nothing recorded ------------------------------

def _start_hanging_run(fault_server: FaultServer, tmp_path: Path, label: str) -> tuple[subprocess.Popen[str], Path]:
    db = tmp_path / "t.db"
    env = {**os.environ, "ORCHESTRION_DB": str(db), "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrion", "run", f"What is 2+2? fault:hang@{label}", "--strategy", "direct",
         "--pool", str(fault_server.pool(tmp_path))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if fault_server.seen[f"hang@{label}"] and db.exists() and episodes(db):
            return proc, db
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the run never started its episode")


def test_sigterm_cancels_the_episode_and_records_it(fault_server: FaultServer, tmp_path: Path) -> None:
    proc, db = _start_hanging_run(fault_server, tmp_path, "term")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=8 * TIMEOUT_S)
    assert proc.returncode == 143, stderr
    assert_user_message(stderr)
    (row,) = episodes(db)
    assert row["status"] == "cancelled" and row["finished"] == 1
    assert f"terminated (SIGTERM); episode {row['id']} is recorded cancelled" in stderr


def test_a_killed_run_is_marked_interrupted_by_the_next_command(fault_server: FaultServer, tmp_path: Path) -> None:
    proc, db = _start_hanging_run(fault_server, tmp_path, "kill")
    proc.kill()
    proc.wait(timeout=10)
    (left,) = episodes(db)
    assert left["status"] == "running"  # nobody closed it
    res = cli("run", "What is 2+2?", "--strategy", "direct", "--pool", str(fault_server.pool(tmp_path)), db=db)
    assert res.returncode == 0, res.stderr
    assert "note: marked the unfinished episodes of 1 stopped run(s) interrupted" in res.stderr
    by_id = {r["id"]: r for r in episodes(db)}
    assert by_id[left["id"]]["status"] == "interrupted"
    assert [r["status"] for r in by_id.values() if r["id"] != left["id"]] == ["ok"]


@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs Linux prlimit")
def test_run_on_a_full_disk_is_one_line_and_the_next_command_marks_it(fault_server: FaultServer,
                                                                      tmp_path: Path) -> None:
    # the disk fills while the episode runs: its files may not grow any more (a 1-byte file-size limit),
    # so the run cannot record how the episode ended; it says so in one line, and the next command closes it
    proc, db = _start_hanging_run(fault_server, tmp_path, "full")
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    stdout, stderr = proc.communicate(timeout=8 * TIMEOUT_S)
    line = one_line_error(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    assert f"trace store {db}: writes are failing (" in line and "the episode could not be closed" in line
    assert "the next `orchestrion run` or `eval` marks it interrupted" in line
    (left,) = episodes(db)
    assert left["status"] == "running"
    res = cli("run", "What is 2+2?", "--strategy", "direct", "--pool", str(fault_server.pool(tmp_path)), db=db)
    assert res.returncode == 0, res.stderr
    assert "note: marked the unfinished episodes of 1 stopped run(s) interrupted" in res.stderr
    assert {r["id"]: r["status"] for r in episodes(db)}[left["id"]] == "interrupted"
