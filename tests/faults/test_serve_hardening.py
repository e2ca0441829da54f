"""`serve`, the viewer and the OpenAI-compatible client under the probes of issue 36 (Hardening III):
a backend's 200 without an answer (row 1), nested unknown request fields (row 2), an option naming
no pool model (row 3), Ctrl-C with episodes in flight (row 4), a trace store that cannot write for a
while (row 5), and requests from another Host or Origin (row 6)."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web
from fastapi.testclient import TestClient

from orchestrion import GenerateConfig, ModelError, Pool, TraceStore
from orchestrion.models.openai_api import OpenAIAPIModel
from orchestrion.serve.server import ServeSettings, create_app
from orchestrion.serve.viewer import create_app as viewer_app

from .conftest import FaultServer

LOCAL = "http://127.0.0.1:8000"  # what a client on this machine sends as Host
ASK = [{"role": "user", "content": "What is 2+2?"}]
CHUNK = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
ANSWER = {"index": 0, "message": {"role": "assistant", "content": "whole answer"}, "finish_reason": "stop"}
WHOLE = {"id": "x", "object": "chat.completion", "model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 2},
         "choices": [ANSWER]}
# what each path of the bad backend answers, with a 200, to every request (streamed or not)
REPLIES: dict[str, tuple[str, bytes]] = {
    "garbage": ("text/html", b"<html>hello</html>"),
    "no_choices": ("application/json", orjson.dumps({"id": "x", "object": "chat.completion", "choices": []})),
    "whole": ("application/json", orjson.dumps(WHOLE)),
    "sse_no_choices": ("text/event-stream",
                       b"data: " + orjson.dumps({**CHUNK, "choices": []}) + b"\n\ndata: [DONE]\n\n"),
    "sse_not_json": ("text/event-stream", b"data: <html>\n\ndata: [DONE]\n\n"),
    "sse_nothing": ("text/event-stream", b": keep-alive\n\n"),
}
NO_ANSWER = ("garbage", "no_choices", "sse_no_choices", "sse_not_json", "sse_nothing")


class BadBackend:
    """A loopback OpenAI-compatible server whose path says how it answers: ``/<reply>/v1``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner: web.AppRunner | None = None
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> int:
        app = web.Application()
        app.router.add_post("/{reply}/v1/chat/completions", self._chat)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return int(self.runner.addresses[0][1])

    async def _chat(self, request: web.Request) -> web.Response:
        await request.read()
        kind, body = REPLIES[request.match_info["reply"]]
        return web.Response(body=body, headers={"Content-Type": kind})

    def url(self, reply: str) -> str:
        return f"http://127.0.0.1:{self.port}/{reply}/v1"

    def pool(self, tmp_path: Path, reply: str) -> Pool:
        path = tmp_path / f"{reply}.yaml"
        path.write_text(f"models:\n  - {{name: m1, base_url: '{self.url(reply)}', timeout_s: 5, max_retries: 0}}\n")
        return Pool.resolve(path)

    def close(self) -> None:
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def backend() -> Iterator[BadBackend]:
    server = BadBackend()
    yield server
    server.close()


def sse_events(text: str) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE body (``[DONE]`` left out)."""
    return [orjson.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


# -- row 1: a 200 without an answer is an error, not an empty ok answer --------------------------
@pytest.mark.parametrize("reply", NO_ANSWER)
async def test_a_200_without_an_answer_fails_the_call(backend: BadBackend, reply: str) -> None:
    model = OpenAIAPIModel("m1", backend.url(reply), max_retries=0)
    pieces: list[str] = []
    try:
        for config in (GenerateConfig(max_tokens=8), GenerateConfig(max_tokens=8, on_text=pieces.append)):
            with pytest.raises(ModelError, match="returned an invalid response"):
                await model.complete(ASK, config)  # type: ignore[arg-type]
    finally:
        await model.aclose()
    assert pieces == []


async def test_a_json_completion_to_a_stream_request_is_read_whole(backend: BadBackend) -> None:
    model = OpenAIAPIModel("m1", backend.url("whole"), max_retries=0)
    try:
        async with model.stream(ASK, GenerateConfig(max_tokens=8)) as chat:  # type: ignore[arg-type]
            pieces = [piece async for piece in chat]
    finally:
        await model.aclose()
    assert pieces == ["whole answer"] and chat.completion is not None
    assert chat.completion.text == "whole answer"
    assert (chat.completion.usage.input_tokens, chat.completion.usage.output_tokens) == (3, 2)


@pytest.mark.parametrize("reply", NO_ANSWER)
def test_serve_answers_502_when_the_backend_gave_no_answer(backend: BadBackend, tmp_path: Path, reply: str) -> None:
    store = TraceStore(tmp_path / "t.db")
    body = {"model": "orchestrion/direct", "messages": ASK}
    try:
        with TestClient(create_app(ServeSettings(), pool=backend.pool(tmp_path, reply), store=store),
                        base_url=LOCAL) as http:
            whole = http.post("/v1/chat/completions", json=body)
            streamed = http.post("/v1/chat/completions", json={**body, "stream": True})
        rows = store.query("SELECT status, error FROM episodes")
    finally:
        store.close()
    assert whole.status_code == 502, whole.text
    assert whole.json()["error"]["code"] == "episode_failed" and whole.headers["x-orchestrion-status"] == "error"
    assert "returned an invalid response" in whole.json()["error"]["message"]
    errors = [e["error"] for e in sse_events(streamed.text) if "error" in e]
    assert len(errors) == 1 and errors[0]["code"] == "episode_failed", streamed.text
    assert "returned an invalid response" in errors[0]["message"] and '"finish_reason":"stop"' not in streamed.text
    assert [r["status"] for r in rows] == ["error", "error"]
    assert all("returned an invalid response" in r["error"] for r in rows)


def test_serve_reads_a_json_reply_to_its_stream_request_as_the_answer(backend: BadBackend, tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "t.db")
    body = {"model": "orchestrion/direct", "messages": ASK}
    try:
        with TestClient(create_app(ServeSettings(), pool=backend.pool(tmp_path, "whole"), store=store),
                        base_url=LOCAL) as http:
            whole = http.post("/v1/chat/completions", json=body)
            streamed = http.post("/v1/chat/completions", json={**body, "stream": True,
                                                               "stream_options": {"include_usage": True}})
    finally:
        store.close()
    assert whole.status_code == 200 and whole.json()["choices"][0]["message"]["content"] == "whole answer"
    assert whole.json()["usage"]["completion_tokens"] == 2 and whole.headers["x-orchestrion-status"] == "ok"
    events = sse_events(streamed.text)
    text = "".join((e["choices"][0]["delta"].get("content") or "") for e in events if e.get("choices"))
    assert text == "whole answer" and events[-1]["usage"]["completion_tokens"] == 2


# -- row 2: a nested field with no effect is named, as a top-level one is -----------------------
def _ignored(http: TestClient, path: str, body: dict[str, Any]) -> list[str]:
    res = http.post(path, json=body)
    assert res.status_code == 200, res.text
    header = res.headers.get("x-orchestrion-ignored-fields", "")
    return [name for name in header.split(", ") if name]


def test_nested_unknown_fields_are_named_at_every_depth(backend: BadBackend, tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "t.db")
    chat = {"model": "orchestrion/direct", "messages": ASK}
    schema = {"name": "x", "schema": {"type": "object"}, "bogus": 1}
    try:
        with TestClient(create_app(ServeSettings(), pool=backend.pool(tmp_path, "whole"), store=store),
                        base_url=LOCAL) as http:
            cases: dict[str, tuple[str, dict[str, Any]]] = {
                "stream_options.bogus": ("/v1/chat/completions", {**chat, "stream": True,
                                                                  "stream_options": {"bogus": 1}}),
                "response_format.bogus": ("/v1/chat/completions", {**chat, "response_format": {"type": "text",
                                                                                               "bogus": 1}}),
                "response_format.json_schema.bogus": ("/v1/chat/completions", {
                    **chat, "response_format": {"type": "json_schema", "json_schema": schema}}),
                "messages.0.bogus": ("/v1/chat/completions", {**chat, "messages": [{**ASK[0], "bogus": 1}]}),
                "messages.0.content.0.bogus": ("/v1/chat/completions", {**chat, "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "What is 2+2?", "bogus": 1}]}]}),
                "text.bogus": ("/v1/responses", {"model": "orchestrion/direct", "input": "hi",
                                                 "text": {"format": {"type": "text"}, "bogus": 1}}),
                "text.format.bogus": ("/v1/responses", {"model": "orchestrion/direct", "input": "hi",
                                                        "text": {"format": {"type": "text", "bogus": 1}}}),
                "input.0.bogus": ("/v1/responses", {"model": "orchestrion/direct",
                                                    "input": [{"role": "user", "content": "hi", "bogus": 1}]}),
                "input.0.content.0.bogus": ("/v1/responses", {"model": "orchestrion/direct", "input": [
                    {"role": "user", "content": [{"type": "input_text", "text": "hi", "bogus": 1}]}]}),
            }
            found = {name: _ignored(http, path, body) for name, (path, body) in cases.items()}
            plain = _ignored(http, "/v1/chat/completions", chat)
    finally:
        store.close()
    assert found == {name: [name] for name in cases}
    assert plain == []  # nothing is listed for a request whose every field is read


# -- row 3: an option naming no pool model is a 400 before any episode ----------------------------
def test_an_option_naming_no_pool_model_is_a_400_before_any_episode(backend: BadBackend, tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "t.db")
    body = {"model": "orchestrion/direct", "messages": ASK, "orchestrion": {"options": {"model": "bogus1"}}}
    try:
        with TestClient(create_app(ServeSettings(), pool=backend.pool(tmp_path, "whole"), store=store),
                        base_url=LOCAL) as http:
            whole = http.post("/v1/chat/completions", json=body)
            streamed = http.post("/v1/chat/completions", json={**body, "stream": True})
        rows = store.query("SELECT id FROM episodes")
    finally:
        store.close()
    for res in (whole, streamed):
        assert res.status_code == 400, res.text
        error = res.json()["error"]
        assert error["code"] == "invalid_option" and "'bogus1'" in error["message"]
        assert "m1" in error["message"]  # the pool's models are named
    assert rows == []


# -- row 4: Ctrl-C with episodes in flight ------------------------------------------------------
def _serve(pool: Path, db: Path) -> tuple[subprocess.Popen[str], str]:
    """`orchestrion serve` on a free port; returns the process and its /v1 URL once it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrion", "serve", "--port", "0", "--pool", str(pool)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "ORCHESTRION_DB": str(db)})
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    assert "listening on " in line, proc.stderr.read() if proc.poll() is not None else line
    return proc, line.split("listening on ")[1].split()[0]


def _statuses(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [r[0] for r in conn.execute("SELECT status FROM episodes")]
    finally:
        conn.close()


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGINT, then what the server wrote to stderr."""
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    return err


def test_ctrl_c_cancels_the_episodes_in_flight_and_tells_each_client(fault_server: FaultServer,
                                                                      tmp_path: Path) -> None:
    db, pool = tmp_path / "t.db", tmp_path / "pool.yaml"
    pool.write_text(f"models:\n  - {{name: fault, base_url: '{fault_server.url}', timeout_s: 60, max_retries: 0}}\n")
    proc, url = _serve(pool, db)
    body = {"model": "orchestrion/direct", "messages": [{"role": "user", "content": "fault:hang@ctrl-c"}]}

    def call(stream: bool) -> httpx.Response:
        return httpx.post(url + "/chat/completions", json={**body, "stream": stream}, timeout=30)

    calls = ThreadPoolExecutor(6)
    try:
        answers = [calls.submit(call, i >= 4) for i in range(6)]
        deadline = time.monotonic() + 20
        while _statuses(db).count("running") < 6:
            assert time.monotonic() < deadline and proc.poll() is None, _statuses(db)
            time.sleep(0.05)
        stopped = time.monotonic()
        err = _stop(proc)
        done = [a.result(timeout=30) for a in answers]
    finally:
        if proc.poll() is None:
            proc.kill()
        calls.shutdown(wait=False, cancel_futures=True)
    assert time.monotonic() - stopped < 4  # not after uvicorn's graceful timeout
    trace_ids = []
    for res in done[:4]:
        assert res.status_code == 503 and res.headers["content-type"] == "application/json", res.text
        assert res.json()["error"]["code"] == "cancelled" and res.headers["x-orchestrion-status"] == "cancelled"
        trace_ids.append(res.headers["x-orchestrion-trace-id"])
    for res in done[4:]:
        errors = [e["error"] for e in sse_events(res.text) if "error" in e]
        assert len(errors) == 1 and errors[0]["code"] == "cancelled" and res.text.endswith("data: [DONE]\n\n")
        trace_ids.append(res.headers["x-orchestrion-trace-id"])
    assert _statuses(db) == ["cancelled"] * 6
    assert "Traceback" not in err and "Exception in ASGI application" not in err and "graceful" not in err, err
    lines = [line for line in err.splitlines() if "cancelled: the server is shutting down" in line]
    assert len(lines) == 6 and all(sum(t in line for line in lines) == 1 for t in trace_ids), err


# -- row 5: a trace store that cannot write for a while -------------------------------------------
needs_prlimit = pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs Linux prlimit")
# A process whose file-size limit is 1 byte can write no file any more, as on a full disk.
_STORE_SCRIPT = """
import resource, sys, time
from orchestrion import TraceStore
from orchestrion._errors import TraceError
store = TraceStore(sys.argv[1])
store.create_run("before", "eval", {}); store.flush()
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.prlimit(0, resource.RLIMIT_FSIZE, (1, hard))
store.create_run("while-full", "eval", {"pad": "x" * 5000})
try:
    store.flush(); print("flushed while full")
except TraceError as exc:
    print("flush:", exc)
print("failing:", store.failing)
store.create_run("also-while-full", "eval", {})
resource.prlimit(0, resource.RLIMIT_FSIZE, (hard, hard))
deadline = time.monotonic() + 10
while store.failing is not None and time.monotonic() < deadline:
    time.sleep(0.05)
print("failing:", store.failing)
store.create_run("after", "eval", {}); store.flush()
print("runs:", " ".join(sorted(r.id for r in store.runs())))
store.close()
"""


@needs_prlimit
def test_the_trace_writer_recovers_once_writes_succeed_again(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-c", _STORE_SCRIPT, str(tmp_path / "t.db")], capture_output=True,
                         text=True, timeout=60)
    out = res.stdout.splitlines()
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert out[0].startswith("flush: ") and "writes are failing" in out[0]
    assert out[1] == "failing: disk I/O error" and out[2] == "failing: None"
    assert out[3] == "runs: after also-while-full before while-full"  # what came while it failed is kept


@needs_prlimit
def test_serve_says_its_store_fails_while_it_fails_and_recovers(fault_server: FaultServer, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    proc, url = _serve(fault_server.pool(tmp_path), db)
    root = url.removesuffix("/v1")
    body = {"model": "orchestrion/direct", "messages": [{"role": "user", "content": "What is 2+2?"}]}

    def ask() -> tuple[httpx.Response, httpx.Response]:
        return (httpx.post(url + "/chat/completions", json=body, timeout=30), httpx.get(root + "/health", timeout=10))

    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    try:
        before = ask()
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1, hard))
        ask()  # the write that fails
        full = ask()
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (hard, hard))
        deadline = time.monotonic() + 10
        while httpx.get(root + "/health", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "the store did not recover"
            time.sleep(0.1)
        after = ask()
    finally:
        err = _stop(proc) if proc.poll() is None else ""
    assert before[0].status_code == 200 and before[1].json()["store"] == "ok"
    assert full[0].status_code == 503 and full[0].json()["error"]["code"] == "trace_store_failing", full[0].text
    assert full[1].status_code == 503 and full[1].json()["status"] == "failing"
    assert full[1].json()["store"].startswith("failing: ")
    assert after[0].status_code == 200 and after[1].json() | {"uptime_s": 0} == before[1].json() | {"uptime_s": 0}
    assert "Traceback" not in err and "shutdown failed" not in err, err
    assert "running" not in _statuses(db) and _statuses(db).count("ok") >= 2


# -- row 6: without a key, only this machine: no other Host, no other site's Origin --------------
EVIL_HOST = {"Host": "evil.example"}
EVIL_ORIGIN = {"Origin": "http://evil.example"}


def test_serve_without_a_key_refuses_another_host_or_origin(backend: BadBackend, tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "t.db")
    chat = {"model": "orchestrion/direct", "messages": ASK}
    try:
        with TestClient(create_app(ServeSettings(), pool=backend.pool(tmp_path, "whole"), store=store),
                        base_url=LOCAL) as http:
            refused = [http.get("/v1/models", headers=EVIL_HOST), http.get("/health", headers=EVIL_HOST),
                       http.post("/v1/chat/completions", json=chat, headers=EVIL_HOST),
                       http.post("/v1/chat/completions", json=chat, headers=EVIL_ORIGIN),
                       http.post("/v1/chat/completions", json=chat, headers={"Origin": "null"})]
            taken = [http.get("/v1/models", headers={"Host": host}) for host in ("localhost", "[::1]:9", "127.0.0.1")]
            taken.append(http.post("/v1/chat/completions", json=chat, headers={"Origin": LOCAL}))
        rows = store.query("SELECT id FROM episodes")
    finally:
        store.close()
    for res in refused:
        assert res.status_code == 403, res.text
        assert res.json()["error"]["code"] == "forbidden_host" and "no API key" in res.json()["error"]["message"]
    assert [r.status_code for r in taken] == [200] * 4
    assert len(rows) == 1  # only the same-origin request ran an episode


def test_serve_with_a_key_takes_any_host(backend: BadBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_TEST_SERVE_KEY", "k-0123")
    store = TraceStore(tmp_path / "t.db")
    try:
        with TestClient(create_app(ServeSettings(api_key_env="ORCH_TEST_SERVE_KEY"),
                                   pool=backend.pool(tmp_path, "whole"), store=store), base_url=LOCAL) as http:
            res = http.get("/v1/models", headers={**EVIL_HOST, "Authorization": "Bearer k-0123"})
    finally:
        store.close()
    assert res.status_code == 200


def _meta(store: TraceStore, episode_id: str) -> dict[str, Any]:
    row = store.episode(episode_id)
    assert row is not None
    meta: dict[str, Any] = row.meta_value()
    return meta


def test_viewer_without_a_key_refuses_another_host_or_origin(store: TraceStore) -> None:
    store.start_episode("ep1", run_id=None, task_id="t", epoch=0, strategy="direct", task={"prompt": "x"},
                        started=1.0, meta={})
    store.flush()
    note = "/api/episodes/ep1/annotation"
    with TestClient(viewer_app(store), base_url=LOCAL) as http:
        refused = [http.post(note, json={"label": "evil"}, headers=EVIL_HOST),
                   http.post(note, json={"label": "evil"}, headers=EVIL_ORIGIN),
                   http.get("/api/episodes", headers=EVIL_HOST), http.get("/", headers=EVIL_HOST)]
        assert "annotation" not in _meta(store, "ep1")
        same = http.post(note, json={"label": "mine"}, headers={"Origin": LOCAL})
        listed = http.get("/api/episodes", headers={"Host": "localhost:5"})
    with TestClient(viewer_app(store, check_host=False), base_url="http://10.1.2.3:9") as open_http:
        any_host = open_http.get("/api/facets")
        other_site = open_http.post(note, json={"label": "evil"}, headers=EVIL_ORIGIN)
    for res in [*refused, other_site]:
        assert res.status_code == 403 and "no API key" in res.json()["detail"], res.text
    assert same.status_code == 200 and listed.status_code == 200 and any_host.status_code == 200
    assert _meta(store, "ep1")["annotation"]["label"] == "mine"
