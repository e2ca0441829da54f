"""The CLI as a user runs it: a real subprocess, a real loopback server, a real trace file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake_openai_server import run_in_process  # noqa: E402

ROUND1 = json.dumps({"thought": "compute", "calls": [{"tool": "calculator", "input": "12*13"},
                                                     {"tool": "reasoner", "input": "12 times 13", "model": "fake"}]})
ROUND2 = json.dumps({"thought": "done", "calls": [], "final": True})


def cli(*args: str, env_db: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "ORCHESTRION_DB": str(env_db)}
    return subprocess.run([sys.executable, "-m", "orchestrion", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture
def server_pool(tmp_path: Path) -> Iterator[Path]:
    with run_in_process("--reply", ROUND1, "--reply", "12*13 = 156", "--reply", ROUND2, "--reply", "156") as url:
        pool = tmp_path / "pool.yaml"
        pool.write_text(
            "models:\n"
            f"  - name: fake\n    backend: openai-api\n    base_url: {url}\n    description: loopback test server\n"
            "    price: {input_per_mtok: 1.0, output_per_mtok: 2.0}\n"
        )
        yield pool


def test_run_json_then_trace_show(server_pool: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    res = cli("run", "What is 12*13?", "--strategy", "para", "--pool", str(server_pool), "--json", env_db=db)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert {"answer", "strategy", "usage", "cost_usd", "wall_s", "trace_id"} <= set(data)
    assert set(data["usage"]) >= {"input_tokens", "output_tokens"}
    assert data["strategy"] == "para" and data["answer"] == "156"
    assert data["cost_usd"] > 0 and "cost" not in data
    shown = cli("trace", "show", data["trace_id"], env_db=db)
    assert shown.returncode == 0, shown.stderr
    assert "decision round 1" in shown.stdout
    assert "tool calculator" in shown.stdout and "agent reasoner" in shown.stdout
    assert "status=ok" in shown.stdout and "→" in shown.stdout
    listed = cli("trace", "list", env_db=db)
    assert data["trace_id"][:8] in listed.stdout


def test_plain_run_prints_answer_cost_and_trace_id(server_pool: Path, tmp_path: Path) -> None:
    res = cli("run", "What is 12*13?", "--pool", str(server_pool), env_db=tmp_path / "t.db")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "156"
    assert "trace_id=" in res.stderr and "cost=$" in res.stderr


def test_unreachable_server_is_one_line_and_recorded(tmp_path: Path) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text("models:\n  - {name: gone, base_url: 'http://127.0.0.1:9/v1', max_retries: 0, timeout_s: 2}\n")
    res = cli("run", "hi", "--strategy", "direct", "--pool", str(pool), "--json", env_db=tmp_path / "t.db")
    assert res.returncode == 1
    data = json.loads(res.stdout)
    assert data["status"] == "error" and "unreachable" in data["error"]
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "hi", "--pool", "missing.yaml"], "pool file not found"),
        (["run", "hi", "--strategy", "nosuch"], "unknown strategy 'nosuch'"),
        (["run", "hi", "--budget", "bogus=1"], "expected NAME=VALUE"),
        (["trace", "show", "0000"], "no episode with trace id"),
        (["tool", "nosuch", "{}"], "unknown tool 'nosuch'"),
    ],
)
def test_user_errors_are_one_line_without_traceback(tmp_path: Path, args: list[str], needle: str) -> None:
    from orchestrion import TraceStore

    TraceStore(tmp_path / "t.db").close()  # an existing, empty database: `trace show` finds no such episode
    res = cli(*args, env_db=tmp_path / "t.db")
    assert res.returncode == 2
    assert needle in res.stderr
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_bad_yaml_names_file_and_line(tmp_path: Path) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text("models: [\n  - name: x\n  bad")
    res = cli("pool", "--pool", str(pool), env_db=tmp_path / "t.db")
    assert res.returncode == 2 and str(pool) in res.stderr and "line" in res.stderr


def test_tool_command_prints_envelope(tmp_path: Path) -> None:
    res = cli("tool", "calculator", '{"expression": "12*13"}', env_db=tmp_path / "t.db")
    assert res.returncode == 0, res.stderr
    env = json.loads(res.stdout)
    assert env["status"] == "ok" and env["output"].strip() == "156"
    bad = cli("tool", "calculator", '{"expr": 1}', env_db=tmp_path / "t.db")
    assert json.loads(bad.stdout)["status"] == "invalid_args"


def test_pool_command_shows_default_and_unknown_prices(tmp_path: Path) -> None:
    res = cli("pool", env_db=tmp_path / "t.db")
    assert res.returncode == 0 and "smollm2-135m" in res.stdout and "llama-cpp" in res.stdout
    pool = tmp_path / "pool.yaml"
    pool.write_text("models:\n  - {name: vllm-qwen, base_url: 'http://127.0.0.1:8000/v1'}\n")
    res = cli("pool", "--pool", str(pool), env_db=tmp_path / "t.db")
    assert "vllm-qwen" in res.stdout and "unknown" in res.stdout


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    import typer.main

    cmd = typer.main.get_command(group) if not hasattr(group, "commands") else group
    found = [prefix]
    for name, sub in getattr(cmd, "commands", {}).items():
        found += _commands(sub, (*prefix, name)) if hasattr(sub, "commands") else [(*prefix, name)]
    return found


def test_every_command_has_working_help() -> None:
    """Help texts are rich markup: a stray [/...] in one of them crashes --help."""
    from typer.testing import CliRunner

    from orchestrion.cli import app

    commands = _commands(app)
    assert ("train", "grpo") in commands and ("eval",) in commands and ("datasets", "fetch") in commands
    for cmd in commands:
        res = CliRunner().invoke(app, [*cmd, "--help"])
        assert res.exit_code == 0, (cmd, res.output, res.exception)
        assert "Usage" in res.output


# -- user errors and damaged files: one line, non-zero, never a traceback ----------------------------
def _one_line_error(res: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def _damaged_db(tmp_path: Path) -> Path:
    """A real trace database with an episode, then 16 KB of garbage written over its middle."""
    import os

    from orchestrion import TraceStore

    db = tmp_path / "damaged.db"
    store = TraceStore(db)
    store.create_run("r1", "eval", {"dataset": "x"})
    for i in range(40):
        store.start_episode(f"e{i}", run_id="r1", task_id=f"t{i}", epoch=0, strategy="direct",
                            task={"prompt": "x" * 2000}, started=float(i), meta={})
    store.close()
    size = _checkpointed_size(db)
    with db.open("r+b") as fh:
        fh.seek(4096)  # page 2 on: the schema page stays, the tables' pages do not
        fh.write(os.urandom(min(16384, size - 4096)))
    return db


@pytest.mark.parametrize("command", [["trace", "list"], ["trace", "export", "--out", "{tmp}/x.jsonl"],
                                     ["view", "--export", "{tmp}/site"]])
def test_damaged_trace_database_is_one_line(tmp_path: Path, command: list[str]) -> None:
    db = _damaged_db(tmp_path)
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    line = _one_line_error(cli(*args, "--db", str(db), env_db=tmp_path / "default.db"))
    assert f"trace store {db}: the file is damaged or not a trace database" in line


@pytest.mark.parametrize("command", [["trace", "list", "--db", "{tmp}/missing/dir/x.db"],
                                     ["view", "--db", "{tmp}/missing.db", "--export", "{tmp}/site"],
                                     ["trace", "export", "--db", "{tmp}/missing.db"],
                                     ["report", "abc", "--db", "{tmp}/missing.db"]])
def test_reading_commands_never_create_a_database(tmp_path: Path, command: list[str]) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    line = _one_line_error(cli(*args, env_db=tmp_path / "default.db"))
    assert "no trace database there; check --db" in line
    assert not (tmp_path / "missing").exists() and not (tmp_path / "missing.db").exists()


def test_unknown_dataset_kind_keeps_its_brackets(tmp_path: Path) -> None:
    line = _one_line_error(cli("eval", "--dataset", "nosuchkind:foo", env_db=tmp_path / "t.db"))
    assert "unknown dataset 'nosuchkind:foo'" in line and "bigbench:TASK[/SUBTASK]" in line


@pytest.mark.parametrize(("value", "expected"), [
    ("tokens=abc", "--budget tokens=abc: expected a whole number from 1 to 1000000000000, e.g. --budget tokens=4000"),
    ("wall_s=-3", "--budget wall_s=-3: expected a number above 0 and at most 1e+09, e.g. --budget wall_s=60"),
    # issue 36 row 10: a number past the field's bound is one line naming its range, not a traceback
    ("tokens=99999999999999999999999",
     "--budget tokens=99999999999999999999999: expected a whole number from 1 to 1000000000000, "
     "e.g. --budget tokens=4000"),
    ("steps=99999999999999999999999",
     "--budget steps=99999999999999999999999: expected a whole number from 1 to 1000000000, e.g. --budget steps=10"),
    ("wall_s=inf", "--budget wall_s=inf: expected a number above 0 and at most 1e+09, e.g. --budget wall_s=60"),
])
def test_bad_budget_names_the_field_and_the_form(tmp_path: Path, value: str, expected: str) -> None:
    line = _one_line_error(cli("run", "hi", "--strategy", "direct", "--budget", value, env_db=tmp_path / "t.db"))
    assert line == f"error: {expected}"


@pytest.mark.parametrize("command", [["serve"], ["view", "--port", "0"]])
def test_missing_serve_extra_is_a_hint_with_its_brackets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    from typer.testing import CliRunner

    from orchestrion import TraceStore
    from orchestrion.cli import app

    TraceStore(tmp_path / "t.db").close()
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # `import uvicorn` now fails as if not installed
    monkeypatch.delitem(sys.modules, "orchestrion.serve.server", raising=False)
    res = CliRunner().invoke(app, [*command, "--db", str(tmp_path / "t.db")])
    assert res.exit_code == 2, (res.output, res.exception)
    assert "Traceback" not in res.output
    assert "needs the 'serve' extra (uvicorn is not installed): pip install 'orchestrion[serve]'" in res.output


def test_trace_database_and_cache_are_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import stat

    from orchestrion import TraceStore
    from orchestrion._paths import cache_dir

    old = os.umask(0o022)
    try:
        store = TraceStore(tmp_path / "new" / "dir" / "t.db")
        store.create_run("r", "eval", {})
        store.flush()
        monkeypatch.delenv("ORCHESTRION_CACHE", raising=False)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        cache = cache_dir()
    finally:
        os.umask(old)
    for path in [tmp_path / "new", tmp_path / "new" / "dir", cache, tmp_path / "xdg"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    files = list((tmp_path / "new" / "dir").iterdir())
    assert {f.name for f in files} >= {"t.db", "t.db-wal"}
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files), files
    store.close()


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    res = cli("--version", env_db=tmp_path / "t.db")
    assert res.returncode == 0 and res.stdout == f"orchestrion {version('orchestrion')}\n"


def test_every_help_shows_boolean_flags_as_switches() -> None:
    """`--json`, not `--json <bool>`: a flag takes no value, in every command's help."""
    import click
    from typer.main import get_command
    from typer.testing import CliRunner

    from orchestrion.cli import app

    def commands(cmd: click.Command, path: list[str]) -> Iterator[list[str]]:
        yield path
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from commands(sub, [*path, name])

    runner, seen = CliRunner(), 0
    for path in commands(get_command(app), []):
        res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert res.exit_code == 0, (path, res.output)
        assert "--help" in res.output and "<bool>" not in res.output, (path, res.output)
        seen += 1
    assert seen > 20  # every command and sub-command was rendered
    flags = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output
    assert re.search(r"--json\s+print one JSON object", flags), flags


# -- hostile input (issue 22): every probe is one line and a non-zero exit, and nothing is recorded ---------
def _dead_pool(tmp_path: Path) -> Path:
    """A pool whose server is never reached: these runs must fail before any model call."""
    pool = tmp_path / "dead.yaml"
    pool.write_text("models:\n  - {name: dead, base_url: 'http://127.0.0.1:9/v1', timeout_s: 1, max_retries: 0}\n")
    return pool


def _no_episode(db: Path) -> None:
    import sqlite3

    if db.exists():
        assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM episodes").fetchone() == (0,)


@pytest.mark.parametrize(("task", "needle"), [
    ("", "TASK is empty"),
    ("   \n\t", "TASK is empty"),
    (b"bad \xff", "TASK: character 5 is not valid UTF-8 text"),
])
def test_blank_or_undecodable_task_is_one_line(tmp_path: Path, task: str | bytes, needle: str) -> None:
    import os

    db = tmp_path / "t.db"
    res = subprocess.run([sys.executable.encode(), b"-m", b"orchestrion", b"run",
                          task if isinstance(task, bytes) else task.encode(), b"--pool",
                          str(_dead_pool(tmp_path)).encode()],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "ORCHESTRION_DB": str(db)})
    assert needle in _one_line_error(res)
    _no_episode(db)


@pytest.mark.parametrize(("args", "needle"), [
    (["--max-parallel", "99999999999999999999999999"], "option 'max_parallel' = 99999999999999999999999999"),
    (["--set", "max_parallel=99999999999999999999999999"], "option 'max_parallel'"),
    (["--set", "max_rounds=-5"], "option 'max_rounds' = -5: expected int (input should be greater than or equal to 1)"),
    (["--set", "max_rounds=0"], "option 'max_rounds' = 0"),
    (["--set", "max_calls=-1"], "option 'max_calls' = -1"),
    (["--set", "decision_temperature=NaN"], "option 'decision_temperature' = 'NaN'"),
    (["--set", "synthesis_temperature=Infinity"], "(input should be a finite number)"),
    (["--set", "agent_temperature=-1"], "option 'agent_temperature' = -1"),
    (["--set", "max_tokens=0"], "option 'max_tokens' = 0"),
])
def test_out_of_range_options_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    db = tmp_path / "t.db"
    res = cli("run", "What is 2+2?", "--strategy", "para", "--pool", str(_dead_pool(tmp_path)), *args, env_db=db)
    line = _one_line_error(res)
    assert needle in line and "strategy 'para'" in line
    _no_episode(db)


@pytest.mark.parametrize("where", ["/dev/zero", "{tmp}", "{tmp}/fifo", "{tmp}/big.yaml", "env:/dev/zero"])
def test_pool_that_is_not_a_pool_file_is_one_line_and_quick(tmp_path: Path, where: str) -> None:
    import os
    import time

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big.yaml").write_bytes(b"#" * (2 * 1024 * 1024))
    path = where.removeprefix("env:").replace("{tmp}", str(tmp_path))
    started = time.monotonic()
    if where.startswith("env:"):
        res = subprocess.run([sys.executable, "-m", "orchestrion", "pool"], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "ORCHESTRION_POOL": path})
    else:
        res = cli("pool", "--pool", path, env_db=tmp_path / "t.db", timeout=60)
    line = _one_line_error(res)
    assert path in line and ("not a regular file" in line or "directory" in line or "too large" in line), line
    assert time.monotonic() - started < 30  # /dev/zero and a FIFO are never read


def test_trace_export_to_a_directory_or_missing_folder_is_one_line(tmp_path: Path) -> None:
    from orchestrion import TraceStore

    db = tmp_path / "t.db"
    TraceStore(db).close()
    line = _one_line_error(cli("trace", "export", "--out", str(tmp_path), "--db", str(db), env_db=db))
    assert f"--out {tmp_path}: is a directory" in line
    line = _one_line_error(cli("trace", "export", "--out", str(tmp_path / "no" / "x.jsonl"), "--db", str(db),
                               env_db=db))
    assert "does not exist; create it first" in line


def _damaged_late_db(tmp_path: Path) -> Path:
    """40 episodes whose rows read fine, with the last quarter of the file (events of the later
    episodes) overwritten: an export gets some way, then fails."""
    import os

    from orchestrion import TraceStore

    db = tmp_path / "late.db"
    store = TraceStore(db)
    for i in range(40):
        store.start_episode(f"e{i:02d}", run_id=None, task_id=f"t{i}", epoch=0, strategy="direct",
                            task={"prompt": "x"}, started=float(i), meta={})
    store.flush()
    for i in range(40):
        for _ in range(20):
            store.submit("INSERT INTO events (episode_id, span_id, ts, kind, data) VALUES (?,?,?,?,?)",
                         (f"e{i:02d}", "s", float(i), "note", '"' + "y" * 1500 + '"'))
    store.close()
    size = _checkpointed_size(db)
    with db.open("r+b") as fh:
        fh.seek(size * 3 // 4)
        fh.write(os.urandom(size - size * 3 // 4))
    return db


def test_trace_export_of_a_damaged_database_leaves_no_partial_file(tmp_path: Path) -> None:
    db = _damaged_late_db(tmp_path)  # (before: 28 of 40 lines written, then exit 2)
    out = tmp_path / "x.jsonl"
    out.write_text("the previous export\n")
    _one_line_error(cli("trace", "export", "--out", str(out), "--db", str(db), env_db=db))
    assert out.read_text() == "the previous export\n"  # kept whole: the new one never replaced it
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".x.jsonl")] == []  # no temp file left


def test_trace_export_is_whole_and_owner_only(tmp_path: Path) -> None:
    import stat

    from orchestrion import TraceStore

    db = tmp_path / "t.db"
    store = TraceStore(db)
    store.start_episode("e1", run_id=None, task_id="t", epoch=0, strategy="direct", task={"prompt": "x"},
                        started=1.0, meta={})
    store.close()
    out = tmp_path / "x.jsonl"
    res = cli("trace", "export", "--out", str(out), "--db", str(db), env_db=db)
    assert res.returncode == 0, res.stderr
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["e1"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


@pytest.mark.parametrize("content", [b"", b"SQLite format 3\x00"])
def test_reading_commands_leave_an_empty_or_foreign_file_alone(tmp_path: Path, content: bytes) -> None:
    import sqlite3

    db = tmp_path / "empty.db"
    if content:
        sqlite3.connect(db).execute("CREATE TABLE other (x)").connection.commit()
    else:
        db.write_bytes(content)
    before = db.read_bytes()
    for command in (["trace", "list"], ["trace", "export", "--out", str(tmp_path / "x.jsonl")]):
        line = _one_line_error(cli(*command, "--db", str(db), env_db=tmp_path / "default.db"))
        assert f"trace store {db}:" in line and "not a trace database" in line
    assert db.read_bytes() == before  # no schema written into it


def test_tool_exit_code_follows_its_status(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    line = _one_line_error(cli("tool", "python", "[1,2]", env_db=db))
    assert "ARGS: expected a JSON object of named arguments, got a JSON array" in line
    bad = cli("tool", "calculator", '{"expr": 1}', env_db=db)
    assert json.loads(bad.stdout)["status"] == "invalid_args"  # the envelope is still printed
    assert _one_line_error(bad).startswith("error: tool calculator: invalid_args")
    failed = cli("tool", "python", '{"code": "1/0"}', env_db=db)
    assert failed.returncode == 1 and json.loads(failed.stdout)["status"] == "exec_error"  # (the code's traceback)
    assert failed.stderr == "error: tool python: exec_error: ZeroDivisionError: division by zero\n"
    slow = cli("tool", "python", '{"code": "while True: pass", "timeout_s": 0.5}', env_db=db)
    assert json.loads(slow.stdout)["status"] == "timeout"
    assert _one_line_error(slow, code=1).startswith("error: tool python: timeout")


def test_view_on_another_address_needs_a_key(tmp_path: Path) -> None:
    import os

    from orchestrion import TraceStore

    db = tmp_path / "t.db"
    TraceStore(db).close()
    line = _one_line_error(cli("view", "--host", "0.0.0.0", "--port", "0", "--db", str(db), env_db=db))
    assert "--host 0.0.0.0 is reachable from other machines and no --api-key-env is set" in line
    env = {k: v for k, v in os.environ.items() if k != "ORCH_TEST_NO_KEY"}
    res = subprocess.run([sys.executable, "-m", "orchestrion", "view", "--host", "0.0.0.0", "--port", "0",
                          "--api-key-env", "ORCH_TEST_NO_KEY", "--db", str(db)], capture_output=True, text=True,
                         timeout=60, env=env)
    assert "ORCH_TEST_NO_KEY is not set" in _one_line_error(res)


def test_view_export_is_owner_only(tmp_path: Path) -> None:
    import os
    import stat

    from orchestrion import TraceStore

    db = tmp_path / "t.db"
    TraceStore(db).close()
    site = tmp_path / "site"
    for _ in range(2):  # the second export replaces the first whole
        res = cli("view", "--export", str(site), "--db", str(db), env_db=db)
        assert res.returncode == 0, res.stderr
    modes = {stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) for root, dirs, files in os.walk(site)
             for name in [*dirs, *files]}
    assert stat.S_IMODE(site.stat().st_mode) == 0o700 and modes == {0o600, 0o700}
    (site / "mine.txt").write_text("a file of the user's")  # an export into a folder keeps what else is there
    assert cli("view", "--export", str(site), "--db", str(db), env_db=db).returncode == 0
    assert (site / "mine.txt").read_text() == "a file of the user's"
    assert (site / "index.html").is_file() and (site / "vendor").is_dir()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".site.")] == []


@pytest.mark.parametrize(("args", "needle"), [
    (["run"], "Missing argument 'task'"),
    (["pool", "--nosuch"], "No such option: --nosuch"),
    (["run", "hi", "--set", "x"], "--set: 'x': expected KEY=VALUE"),
    (["trace", "list", "--limit", "99999999999999999999999"], "Invalid value for '--limit'"),
    (["eval", "--dataset", "jsonl:x.jsonl", "--concurrency", "99999999999999999999999"],
     "--concurrency 99999999999999999999999: at most 100000"),
    (["eval", "--dataset", "jsonl:x.jsonl", "--seed", "99999999999999999999999"], "field 'seed'"),
    (["serve", "--max-concurrent", "99999999999999999999999"], "--max-concurrent 99999999999999999999999: at most"),
])
def test_usage_errors_and_huge_numbers_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "x.jsonl").write_text('{"id": "a", "prompt": "hi", "answer": "x"}\n')
    import os

    res = subprocess.run([sys.executable, "-m", "orchestrion", *args], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env={**os.environ, "ORCHESTRION_DB": str(tmp_path / "t.db")})
    assert needle in _one_line_error(res)


def _checkpointed_size(db: Path) -> int:
    """The database's size once its WAL is folded in, so damage written at an offset lands in it."""
    import sqlite3

    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return db.stat().st_size
