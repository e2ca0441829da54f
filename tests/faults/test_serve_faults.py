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
