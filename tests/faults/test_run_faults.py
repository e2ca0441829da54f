"""`orchestrion run` against a misbehaving server: each fault ends in a recorded status, one
episode (none lost, none duplicated), no hang, and a short message instead of a traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.helpers import free_port

from .conftest import TIMEOUT_S, FaultServer, assert_user_message, cli, episodes

# fault tag -> (episode status, exit code, text the one-line message must hold, requests the server sees)
CASES = {
    "429": ("error", 1, "kept failing after 2 attempts: HTTP 429", 2),
    "429:once": ("ok", 0, "", 2),
    "500": ("error", 1, "kept failing after 2 attempts: HTTP 500", 2),
    "503:once": ("ok", 0, "", 2),
    "401": ("error", 1, "rejected the request (HTTP 401)", 1),
    "hang": ("error", 1, f"timed out after {TIMEOUT_S}s (1 attempt)", 1),
    "drop": ("error", 1, "is unreachable: Server disconnected", 2),
    "drop:once": ("ok", 0, "", 2),
    "half_body": ("error", 1, "is unreachable", 2),
    "truncated_sse": ("error", 1, "is unreachable", 2),
    "invalid_json": ("error", 1, "returned an invalid response", 1),
    "huge": ("ok", 0, "", 1),
}


@pytest.mark.parametrize("tag", list(CASES))
def test_run_records_each_fault(fault_server: FaultServer, tmp_path: Path, tag: str) -> None:
    status, code, message, requests = CASES[tag]
    db = tmp_path / "t.db"
    prompt = f"What is 2+2? fault:{tag}"
    res = cli("run", prompt, "--strategy", "direct", "--pool", str(fault_server.pool(tmp_path)), db=db,
              timeout=8 * TIMEOUT_S)
    assert res.returncode == code, res.stderr
    assert_user_message(res.stderr)
    assert message in res.stderr
    rows = episodes(db)
    assert len(rows) == 1 and rows[0]["finished"] == 1  # recorded once, and finished
    assert rows[0]["status"] == status, rows[0]["error"]
    assert fault_server.seen[tag] == requests  # timeouts and 4xx are not retried, the rest once
    if status == "ok":
        assert rows[0]["answer"]


def test_dead_server_fails_fast_with_one_line(fault_server: FaultServer, tmp_path: Path) -> None:
    port = free_port()  # a port nobody listens on
    db = tmp_path / "t.db"
    pool = fault_server.pool(tmp_path, base_url=f"http://127.0.0.1:{port}/v1")
    res = cli("run", "hi", "--strategy", "direct", "--pool", str(pool), db=db, timeout=30)
    assert res.returncode == 1
    assert_user_message(res.stderr)
    assert "is unreachable" in res.stderr and "is the server running?" in res.stderr
    assert [r["status"] for r in episodes(db)] == ["error"]


def test_budget_is_enforced_at_the_call_that_crosses_it(fault_server: FaultServer, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    res = cli("run", "What is 2+2? please answer", "--strategy", "direct", "--budget", "tokens=5",
              "--pool", str(fault_server.pool(tmp_path)), db=db)
    assert res.returncode == 1
    assert_user_message(res.stderr)
    assert "budget exceeded: tokens used" in res.stderr and "status=budget_exceeded" in res.stderr
    assert "raise it with --budget tokens=N" in res.stderr  # the CLI names the flag; the library does not
    rows = episodes(db)
    assert len(rows) == 1 and rows[0]["status"] == "budget_exceeded"
    assert rows[0]["input_tokens"] + rows[0]["output_tokens"] > 5  # the crossing call is kept in the record


def test_schema_violating_actions_are_recorded_not_crashed(fault_server: FaultServer, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    prompt = "What is 2+2? fault:bad_action"
    res = cli("run", prompt, "--strategy", "para", "--pool", str(fault_server.pool(tmp_path)), db=db)
    assert_user_message(res.stderr)
    rows = episodes(db)
    assert len(rows) == 1 and rows[0]["finished"] == 1
    conn = sqlite3.connect(db)
    valid = dict(conn.execute("SELECT valid, COUNT(*) FROM decisions GROUP BY valid").fetchall())
    conn.close()
    assert valid.get(0, 0) >= 3 and valid.get(1, 0) == 0  # each invalid output, repairs included, is data
    # para stops after max_invalid_rounds (3) rounds without a valid action, repairs included: 3 x 3 attempts
    assert valid[0] == 9, valid
    # para falls back to answering without tools: the episode ends ok, with a synthesized answer
    assert res.returncode == 0 and rows[0]["status"] == "ok" and rows[0]["answer"], rows[0]
