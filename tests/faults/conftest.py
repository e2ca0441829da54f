"""The fault server and helpers shared by the fault suite.

One real OpenAI-compatible server (tests/fake_openai_server.py) runs in a thread with its own
event loop; what it does is chosen by the task text, so one server serves every fault:
a prompt containing ``fault:KIND`` gets that fault on every request, ``fault:KIND:once`` on
its first request only (a retry then succeeds); ``@label`` after it keeps tags of different
tests apart, and ``fault:slow`` answers correctly but slowly. Commands run as real subprocesses.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent))
from fake_openai_server import FakeOpenAIServer, FakeReply  # noqa: E402

BAD_ACTION = '{"thought": 5, "calls": "all of them", "final": "maybe"}'
GOOD_ACTION = '{"thought": "answer directly", "calls": [], "final": true}'
FAULTS: dict[str, FakeReply] = {
    "429": FakeReply(status=429, error="rate limited", headers={"Retry-After": "0.1"}),
    "500": FakeReply(status=500, error="internal server error"),
    "503": FakeReply(status=503, error="overloaded", headers={"Retry-After": "0.1"}),
    "401": FakeReply(status=401, error="Incorrect API key provided"),
    "hang": FakeReply(fault="hang"),
    "drop": FakeReply(fault="drop"),
    "half_body": FakeReply(fault="half_body"),
    "truncated_sse": FakeReply(fault="truncated_sse"),
    "invalid_json": FakeReply(fault="invalid_json"),
    "huge": FakeReply(content=("x" * 9 + " ") * 1024 * 1024),  # 10 MB of text
}
TIMEOUT_S = 2  # the pool's per-request timeout: a hung server costs this once
SLOW_S = 0.4  # fault:slow answers correctly after this long


def _last_user(body: dict[str, Any]) -> str:
    users = [m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user"]
    return users[0] if users else ""


class FaultServer:
    """A FakeOpenAIServer on its own thread whose replies follow the ``fault:`` tag in the task."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()  # requests per fault tag (each test uses its own tag)
        self.server = FakeOpenAIServer(replies=self._reply, keep_requests=False)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def _reply(self, body: dict[str, Any]) -> str | FakeReply:
        prompt = _last_user(body)
        tag = prompt.split("fault:", 1)[1].split()[0].rstrip("?.\"'") if "fault:" in prompt else ""
        self.seen[tag] += 1
        kind, _, mode = tag.split("@")[0].partition(":")  # KIND[:once][@label]
        if kind == "bad_action":
            return BAD_ACTION if body.get("response_format") else "4"
        if kind in FAULTS and not (mode == "once" and self.seen[tag] > 1):
            return FAULTS[kind]
        good = GOOD_ACTION if body.get("response_format") else "Answer: 4"
        return FakeReply(content=good, delay_s=SLOW_S) if kind == "slow" else good

    def pool(self, tmp_path: Path, *, base_url: str | None = None) -> Path:
        path = tmp_path / "pool.yaml"
        path.write_text(
            "models:\n"
            f"  - name: fault\n    backend: openai-api\n    base_url: {base_url or self.url}\n"
            f"    timeout_s: {TIMEOUT_S}\n    max_retries: 1\n"
            "    price: {input_per_mtok: 1.0, output_per_mtok: 1.0}\n"
        )
        return path

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="module")
def fault_server() -> Iterator[FaultServer]:
    server = FaultServer()
    yield server
    server.close()


def cli(*args: str, db: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``orchestrion ARGS`` as a user runs it; bounded, so a hang fails the test instead of stalling it."""
    env = {**os.environ, "ORCHESTRION_DB": str(db), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "orchestrion", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def episodes(db: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM episodes ORDER BY started")]
    finally:
        conn.close()


def assert_user_message(stderr: str) -> None:
    """What the user sees on failure: short lines, never a traceback or a leaked HTTP session."""
    assert "Traceback" not in stderr, stderr
    assert "Unclosed" not in stderr and "unclosed" not in stderr, stderr
    assert all(len(line) < 600 for line in stderr.splitlines()), stderr
