"""The CLI as a user runs it: a real subprocess, a real loopback server, a real trace file."""

from __future__ import annotations

import json
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
    assert {"answer", "strategy", "usage", "cost", "wall_s", "trace_id"} <= set(data)
    assert set(data["usage"]) >= {"input_tokens", "output_tokens"}
    assert data["strategy"] == "para" and data["answer"] == "156"
    assert data["cost"] > 0
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
