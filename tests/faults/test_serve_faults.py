"""`serve` in front of a hung upstream: a client that goes away cancels the episode (recorded
once, as ``cancelled``) and the upstream HTTP request too. Kept small: serve/ is changing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from orchestrion import Pool, TraceStore

from .conftest import FaultServer

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")


def test_disconnect_cancels_episode_and_upstream_call(fault_server: FaultServer, tmp_path: Path) -> None:
    from orchestrion.serve.server import ServeSettings, base_url, bind_socket, create_app

    store = TraceStore(tmp_path / "t.db")
    pool = Pool.resolve(fault_server.pool(tmp_path))
    app = create_app(ServeSettings(), pool=pool, store=store)
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
        body = {"model": "orchestrion/direct", "messages": [{"role": "user", "content": "fault:hang@serve"}]}
        for stream in (False, True):
            with pytest.raises(httpx.ReadTimeout):
                with httpx.stream("POST", base_url(sock) + "/chat/completions", json={**body, "stream": stream},
                                  timeout=httpx.Timeout(10, read=0.5)) as r:
                    for _ in r.iter_lines():
                        pass
        deadline = time.monotonic() + 10
        while len(store.query("SELECT id FROM episodes WHERE finished = 1")) < 2 or fault_server.server.active:
            assert time.monotonic() < deadline, "episode not closed, or the upstream call still open"
            time.sleep(0.05)
        rows = store.query("SELECT status, finished FROM episodes")
        assert rows == [{"status": "cancelled", "finished": 1}] * 2  # one each, none lost or doubled
        assert fault_server.seen["hang@serve"] == 2  # no retry after the client left
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
        store.close()


def test_kill_9_then_restart_leaves_no_episode_running(fault_server: FaultServer, tmp_path: Path) -> None:
    """10 episodes in flight when `serve` is killed -9; the next `serve` on that database marks them."""
    import json
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    db = tmp_path / "t.db"
    pool = tmp_path / "pool.yaml"
    pool.write_text(f"models:\n  - {{name: fault, base_url: '{fault_server.url}', timeout_s: 60, max_retries: 0}}\n")
    env = {**os.environ, "ORCHESTRION_DB": str(db)}

    def start() -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrion", "serve", "--port", "0", "--pool", str(pool)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on " in line, proc.stderr.read() if proc.poll() is not None else line
        return proc, line.split("listening on ")[1].split()[0]

    def running() -> list[str]:
        conn = sqlite3.connect(db)
        try:
            return [r[0] for r in conn.execute("SELECT status FROM episodes")]
        finally:
            conn.close()

    first, url = start()
    body = json.dumps({"model": "orchestrion/direct", "messages": [{"role": "user", "content": "fault:hang@kill9"}]})
    pool_threads = ThreadPoolExecutor(10)
    try:
        for _ in range(10):
            pool_threads.submit(httpx.post, url + "/chat/completions", content=body, timeout=30,
                                headers={"Content-Type": "application/json"})
        deadline = time.monotonic() + 20
        while running().count("running") < 10:
            assert time.monotonic() < deadline, running()
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
        assert running() == ["running"] * 10  # what a crash leaves behind
        second, _ = start()
        try:
            statuses = running()
            assert statuses == ["interrupted"] * 10, statuses  # marked before the new server answers anything
        finally:
            second.send_signal(signal.SIGINT)
            second.wait(20)
    finally:
        if first.poll() is None:
            first.kill()
        pool_threads.shutdown(wait=True, cancel_futures=True)
    conn = sqlite3.connect(db)
    runs = sorted(r[0] for r in conn.execute("SELECT status FROM runs WHERE kind = 'serve'"))
    conn.close()
    assert runs == ["interrupted", "stopped"]
