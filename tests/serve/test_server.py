"""`orchestrion serve` over real loopback HTTP: the official openai client (sync and async,
streamed and not), the 4xx/5xx paths, client disconnects, and the command as a subprocess.

Unit tests run uvicorn in a background thread on a free port with a scripted pool injected
through ``create_app``; the integration test starts `orchestrion serve` on the embedded model.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn
from openai.types.chat import ChatCompletionMessageParam

from orchestrion import ConfigError, GenerateConfig, Message, Pool, ScriptedModel, TraceError, TraceStore, strategies
from orchestrion.serve._openai_schema import ChatMessage, task_prompt
from orchestrion.serve.server import ServeSettings, base_url, bind_socket, create_app
from tests.helpers import script

ROUND1 = json.dumps({"thought": "add", "calls": [{"tool": "calculator", "input": "2+3"},
                                                 {"tool": "reasoner", "input": "what is 2+3"}]})
FINAL = json.dumps({"thought": "done", "calls": [], "final": True})
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is 2+3?"}]


def para_pool(delay_s: float = 0.0) -> Pool:
    """Round 1: calculator + reasoner in parallel; round 2: final; every plain call answers '5'."""
    return Pool.from_models([ScriptedModel(script([ROUND1, FINAL], worker=lambda p: "5"), delay_s=delay_s)])


def direct_pool(reply: str | Callable[[Sequence[Message], GenerateConfig], str] = "5", delay_s: float = 0.0) -> Pool:
    return Pool.from_models([ScriptedModel(reply if callable(reply) else [reply], delay_s=delay_s)])


@contextmanager
def serving(pool: Pool, store: TraceStore, **settings: Any) -> Iterator[str]:
    """The app on a free loopback port in a background thread; yields its /v1 base URL."""
    app = create_app(ServeSettings(**settings), pool=pool, store=store)
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield base_url(sock)
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


def client(url: str, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=30)


def ext(obj: Any) -> dict[str, Any]:
    """The ``orchestrion`` extension field of an openai response object."""
    return dict((obj.model_extra or {}).get("orchestrion") or {})


def wait_for(fn: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def episodes(store: TraceStore, where: str = "1") -> list[dict[str, Any]]:
    return store.query(f"SELECT * FROM episodes WHERE {where} ORDER BY started")


def post(url: str, body: Any, **kw: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **kw.pop("headers", {})}
    return httpx.post(url + "/chat/completions", content=content, headers=headers, timeout=kw.pop("timeout", 30), **kw)


# -- the happy paths -------------------------------------------------------------------------
def test_models_lists_every_strategy(store: TraceStore) -> None:
    with serving(direct_pool(), store) as url:
        listed = client(url).models.list().data
        one = client(url).models.retrieve("orchestrion/para")
    ids = [m.id for m in listed]
    assert len(ids) >= 2 and {"orchestrion/para", "orchestrion/direct"} <= set(ids)
    assert sorted(ids) == sorted(f"orchestrion/{n}" for n in strategies())
    assert all(m.owned_by == "orchestrion" and m.object == "model" for m in listed)
    assert one.id == "orchestrion/para"


def test_sync_client_answer_usage_and_trace_header(store: TraceStore) -> None:
    with serving(para_pool(), store) as url:
        raw = client(url).chat.completions.with_raw_response.create(model="orchestrion/para", messages=ASK)
        done = raw.parse()
    trace_id = raw.headers["x-orchestrion-trace-id"]
    assert raw.headers["x-orchestrion-status"] == "ok"
    assert done.object == "chat.completion" and done.model == "orchestrion/para"
    assert done.choices[0].message.role == "assistant" and done.choices[0].message.content == "5"
    assert done.choices[0].finish_reason == "stop"
    ep = store.episode(trace_id)
    assert ep is not None and ep.finished == 1 and ep.status == "ok" and ep.strategy == "para"
    assert ep.answer == "5" and ep.task_id == done.id and json.loads(ep.task)["prompt"] == "What is 2+3?"
    assert done.usage is not None and done.usage.prompt_tokens == ep.input_tokens > 0
    assert done.usage.completion_tokens == ep.output_tokens > 0
    assert done.usage.total_tokens == ep.input_tokens + ep.output_tokens
    assert ext(done)["trace_id"] == trace_id and ext(done)["status"] == "ok"
    # one runs row per server process, closed when the server stopped
    assert store.query("SELECT kind, status FROM runs WHERE id = ?",
                       (ep.run_id,)) == [{"kind": "serve", "status": "stopped"}]


async def test_async_client_streamed_and_not(store: TraceStore) -> None:
    with serving(direct_pool("five"), store) as url:
        aclient = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        whole = await aclient.chat.completions.create(model="orchestrion/direct", messages=ASK)
        stream = await aclient.chat.completions.create(model="orchestrion/direct", messages=ASK, stream=True)
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        await aclient.close()
    assert whole.choices[0].message.content == "five"
    assert "".join(parts) == "five"
    assert [e["status"] for e in episodes(store)] == ["ok", "ok"]


def test_stream_sends_progress_as_it_happens_then_the_answer(store: TraceStore) -> None:
    with serving(para_pool(delay_s=0.3), store) as url:
        stream = client(url).chat.completions.create(
            model="orchestrion/para", messages=ASK, stream=True,
            stream_options={"include_usage": True, "include_progress": True})  # type: ignore[call-overload]
        seen = [(time.monotonic(), chunk) for chunk in stream]
    chunks = [c for _, c in seen]
    assert all(c.object == "chat.completion.chunk" and c.model == "orchestrion/para" for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "5"
    content_at = [i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.content]
    progress_at = [i for i, c in enumerate(chunks) if "progress" in ext(c)]
    assert progress_at and content_at and progress_at[0] < content_at[0]
    # live, not batched at the end: 4 model calls of 0.3 s each lie between the first progress and the answer
    assert seen[content_at[0]][0] - seen[progress_at[0]][0] > 0.5
    progress = [ext(chunks[i])["progress"] for i in progress_at]
    # after the answer's first token, only the answer's own spans (synthesis and its call) still end
    answer_ids = {p["span_id"] for p in progress if p["kind"] == "answer"}
    late = [ext(chunks[i])["progress"] for i in progress_at if i > content_at[0]]
    assert answer_ids and all(p["event"] == "end" and (p["span_id"] in answer_ids or p["parent_id"] in answer_ids)
                              for p in late)
    assert {"round", "decision", "call", "tool", "agent"} <= {p["kind"] for p in progress}
    starts = {p["span_id"] for p in progress if p["event"] == "start"}
    ends = [p for p in progress if p["event"] == "end"]
    assert starts == {p["span_id"] for p in ends}  # every span started and ended, each once
    assert len(ends) == len({p["span_id"] for p in ends}) and all(p["status"] == "ok" for p in ends)
    trace_id = ext(chunks[0])["trace_id"]
    final = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(final) == 1 and final[0].choices[0].finish_reason == "stop"
    assert ext(final[0])["trace_id"] == trace_id and ext(final[0])["status"] == "ok"
    ep = store.episode(trace_id)
    assert ep is not None and ep.status == "ok" and ep.finished == 1
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == ep.input_tokens + ep.output_tokens > 0


def test_raw_stream_is_sse_with_trace_header_and_done(store: TraceStore) -> None:
    body = {"model": "orchestrion/direct", "messages": ASK, "stream": True}
    with serving(direct_pool(), store) as url, httpx.stream("POST", url + "/chat/completions", json=body,
                                                            timeout=30) as r:
        lines = [line for line in r.iter_lines() if line]
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert store.episode(r.headers["x-orchestrion-trace-id"]) is not None
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)
    assert "usage" not in json.loads(lines[-2][6:])  # no usage chunk unless asked for


def test_conversation_becomes_context_of_the_task(store: TraceStore) -> None:
    seen: list[list[Message]] = []

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        seen.append(list(messages))
        return "Paris"

    convo: list[ChatCompletionMessageParam] = [{"role": "system", "content": "Answer in one word."},
             {"role": "user", "content": "Capital of Italy?"},
             {"role": "assistant", "content": "Rome"},
             {"role": "user", "content": [{"type": "text", "text": "And of France?"}]}]
    with serving(direct_pool(reply), store) as url:
        done = client(url).chat.completions.create(model="orchestrion/direct", messages=convo)
    assert done.choices[0].message.content == "Paris"
    prompt = json.loads(episodes(store)[0]["task"])["prompt"]
    assert prompt == ("Instructions:\nAnswer in one word.\n\nConversation so far:\nUser: Capital of Italy?\n"
                      "Assistant: Rome\n\nCurrent request:\nAnd of France?")
    assert prompt in seen[0][-1]["content"]


def test_task_prompt_of_a_single_message_is_its_text() -> None:
    assert task_prompt([ChatMessage(role="user", content="hi there")]) == "hi there"
    assert task_prompt([ChatMessage(role="user", content="a"), ChatMessage(role="assistant", content="b"),
                        ChatMessage(role="user", content="c"), ChatMessage(role="assistant", content="ignored")]) \
        == "Conversation so far:\nUser: a\nAssistant: b\n\nCurrent request:\nc"


# -- budgets and extension fields ------------------------------------------------------------
def test_the_episode_budget_is_its_own_field_and_a_stop_on_it_is_length(store: TraceStore) -> None:
    with serving(para_pool(), store) as url:
        raw = client(url).chat.completions.with_raw_response.create(
            model="orchestrion/para", messages=ASK, extra_body={"orchestrion": {"budget": {"tokens": 5}}})
    done = raw.parse()
    assert raw.headers["x-orchestrion-status"] == "budget_exceeded"
    assert done.choices[0].finish_reason == "length" and ext(done)["status"] == "budget_exceeded"
    assert "tokens" in ext(done)["error"]
    assert done.usage is not None and done.usage.total_tokens > 5
    ep = store.episode(raw.headers["x-orchestrion-trace-id"])
    assert ep is not None and json.loads(ep.meta)["budget"]["tokens"] == 5 and ep.status == "budget_exceeded"


def test_token_cap_and_orchestrion_options_and_budget(store: TraceStore) -> None:
    asked: list[int] = []

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        asked.append(config.max_tokens)
        return "5"

    with serving(direct_pool(reply), store, max_tokens_cap=500) as url:
        c = client(url)
        with pytest.raises(openai.BadRequestError) as over:
            c.chat.completions.create(model="orchestrion/direct", messages=ASK, max_tokens=501)
        with pytest.raises(openai.BadRequestError) as over_extra:
            c.chat.completions.create(model="orchestrion/direct", messages=ASK,
                                      extra_body={"orchestrion": {"budget": {"tokens": 9999}}})
        with pytest.raises(openai.BadRequestError) as bogus:
            c.chat.completions.create(model="orchestrion/direct", messages=ASK,
                                      extra_body={"orchestrion": {"budget": {"bogus": 1}}})
        plain = c.chat.completions.with_raw_response.create(model="orchestrion/direct", messages=ASK)
        tuned = c.chat.completions.with_raw_response.create(
            model="orchestrion/direct", messages=ASK, max_tokens=400,
            extra_body={"orchestrion": {"options": {"max_tokens": 7}, "budget": {"wall_s": 30, "tokens": 300}}})
    assert over.value.status_code == 400 and "cap of 500" in over.value.message
    assert over.value.code == "max_tokens_over_cap" and over_extra.value.code == "max_tokens_over_cap"
    assert "bogus" in bogus.value.message
    meta = {h: json.loads(store.episode(r.headers["x-orchestrion-trace-id"]).meta)  # type: ignore[union-attr]
            for h, r in (("plain", plain), ("tuned", tuned))}
    assert meta["plain"]["budget"]["tokens"] == 500  # no limit asked: the cap
    assert meta["tuned"]["budget"]["tokens"] == 300 and meta["tuned"]["budget"]["wall_s"] == 30
    assert meta["tuned"]["options"] == {"max_tokens": 7} and asked[-1] == 7
    assert len(episodes(store)) == 2  # refused requests start no episode


# -- refusals --------------------------------------------------------------------------------
def test_api_key_required_when_configured(store: TraceStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_TEST_KEY", "sekret")
    with serving(direct_pool(), store, api_key_env="ORCH_TEST_KEY") as url:
        missing = post(url, {"model": "orchestrion/direct", "messages": ASK})
        models = httpx.get(url + "/models")
        with pytest.raises(openai.AuthenticationError) as wrong:
            client(url, key="wrong").chat.completions.create(model="orchestrion/direct", messages=ASK)
        ok = client(url, key="sekret").chat.completions.create(model="orchestrion/direct", messages=ASK)
        listed = client(url, key="sekret").models.list().data
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    assert "Authorization: Bearer" in missing.json()["error"]["message"]
    assert models.status_code == 401 and wrong.value.status_code == 401
    assert ok.choices[0].message.content == "5" and len(listed) >= 2
    assert len(episodes(store)) == 1


def test_api_key_env_unset_fails_fast(store: TraceStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCH_TEST_UNSET_KEY", raising=False)
    with pytest.raises(ConfigError, match="ORCH_TEST_UNSET_KEY"):
        create_app(ServeSettings(api_key_env="ORCH_TEST_UNSET_KEY"), pool=direct_pool(), store=store)


def test_oversized_body_is_413(store: TraceStore) -> None:
    long: list[ChatCompletionMessageParam] = [{"role": "user", "content": "x" * 5000}]
    big = {"model": "orchestrion/direct", "messages": long}
    with serving(direct_pool(), store, max_body_bytes=2048) as url:
        declared = post(url, big)
        chunked = httpx.post(url + "/chat/completions", content=iter([json.dumps(big).encode()]), timeout=30)
        with pytest.raises(openai.APIStatusError) as via_client:
            client(url).chat.completions.create(model="orchestrion/direct", messages=long)
        small = post(url, {"model": "orchestrion/direct", "messages": ASK})
    assert "content-length" not in chunked.request.headers  # the limit holds on bytes read, not just the header
    for r in (declared, chunked):
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        assert "2048 bytes" in r.json()["error"]["message"]
    assert via_client.value.status_code == 413
    assert small.status_code == 200 and len(episodes(store)) == 1


@pytest.mark.parametrize(("body", "needle"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    ({"model": "orchestrion/direct"}, "'messages'"),
    ({"model": "orchestrion/direct", "messages": []}, "'messages'"),
    ({"messages": ASK}, "'model'"),
    ({"model": "orchestrion/direct", "messages": [{"role": "wizard", "content": "hi"}]}, "'messages.0.role'"),
    ({"model": "orchestrion/direct", "messages": [{"role": "system", "content": "hi"}]}, "no message with role 'user'"),
    ({"model": "orchestrion/direct", "messages": [{"role": "user", "content": "  "}]}, "has no text"),
    ({"model": "orchestrion/direct", "messages": ASK, "n": 2}, "n=1"),
    ({"model": "orchestrion/direct", "messages": ASK, "max_tokens": 0}, "'max_tokens'"),
    ({"model": "orchestrion/para", "messages": ASK, "orchestrion": {"options": {"max_round": 2}}}, "'max_rounds'"),
])
def test_malformed_request_is_400(store: TraceStore, body: Any, needle: str) -> None:
    with serving(direct_pool(), store) as url:
        r = post(url, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert needle in error["message"] and error["type"] == "invalid_request_error"
    assert episodes(store) == []


def test_unknown_model_and_path_are_404(store: TraceStore) -> None:
    with serving(direct_pool(), store) as url:
        with pytest.raises(openai.NotFoundError) as unknown:
            client(url).chat.completions.create(model="orchestrion/nosuch", messages=ASK)
        bare = post(url, {"model": "para", "messages": ASK})
        path = httpx.get(url + "/nowhere")
    assert unknown.value.code == "model_not_found" and "orchestrion/para" in unknown.value.message
    assert bare.status_code == 404 and path.status_code == 404 and "error" in path.json()
    assert episodes(store) == []


def test_more_episodes_than_max_concurrent_is_429(store: TraceStore) -> None:
    with serving(direct_pool(delay_s=1.0), store, max_concurrent=1) as url:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(lambda: client(url).chat.completions.create(model="orchestrion/direct", messages=ASK))
            assert wait_for(lambda: episodes(store, "status = 'running'")), "the first episode never started"
            with pytest.raises(openai.RateLimitError) as limited:
                client(url).chat.completions.create(model="orchestrion/direct", messages=ASK)
            assert first.result().choices[0].message.content == "5"
        again = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK)
    assert limited.value.status_code == 429 and "--max-concurrent" in limited.value.message
    assert limited.value.response.headers["retry-after"] == "1"
    assert again.choices[0].message.content == "5"  # the slot came back
    assert [e["status"] for e in episodes(store)] == ["ok", "ok"]


class BrokenStore(TraceStore):
    """A store whose episode rows cannot be written."""

    def submit(self, sql: str, params: Sequence[Any] = ()) -> None:
        if sql.startswith("INSERT INTO episodes"):
            raise TraceError(f"trace store {self.path}: writer failed: disk I/O error")
        super().submit(sql, params)


def test_a_store_that_cannot_write_is_a_one_line_503(tmp_path: Path) -> None:
    store = BrokenStore(tmp_path / "broken.db")
    with serving(direct_pool(), store, max_concurrent=1) as url:
        with pytest.raises(openai.InternalServerError) as whole:
            client(url).chat.completions.create(model="orchestrion/direct", messages=ASK)
        with pytest.raises(openai.InternalServerError) as streamed:
            client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, stream=True)
    store.close()
    for exc in (whole.value, streamed.value):
        assert exc.status_code == 503 and "disk I/O error" in exc.message and "\n" not in exc.message
        assert str(tmp_path) not in exc.message
    # (the second request was not refused with 429: the failed episode gave its slot back)


# -- disconnects -----------------------------------------------------------------------------
def assert_cancelled_soon(store: TraceStore) -> None:
    rows = wait_for(lambda: episodes(store, "finished = 1"), timeout=5)
    assert len(rows) == 1, "the episode was not closed after the client went away"
    ep = rows[0]
    assert ep["status"] == "cancelled" and ep["finished"] == 1
    assert ep["ended"] - ep["started"] < 4  # cut short, not run to the model's 8 s


def test_client_disconnect_cancels_the_episode(store: TraceStore) -> None:
    with serving(direct_pool(delay_s=8), store) as url:
        with pytest.raises(httpx.ReadTimeout):
            post(url, {"model": "orchestrion/direct", "messages": ASK}, timeout=httpx.Timeout(10, read=0.5))
        assert_cancelled_soon(store)


def test_stream_disconnect_cancels_the_episode(store: TraceStore) -> None:
    with serving(direct_pool(delay_s=8), store) as url:
        with httpx.stream("POST", url + "/chat/completions", timeout=10,
                          json={"model": "orchestrion/direct", "messages": ASK, "stream": True}) as r:
            first = next(r.iter_lines())
            assert r.status_code == 200 and '"role":"assistant"' in first
        assert_cancelled_soon(store)


# -- the command -------------------------------------------------------------------------------
@contextmanager
def serve_process(db: Path, *args: str, env: dict[str, str] | None = None, start_s: float = 30) -> Iterator[str]:
    """`orchestrion serve --port 0 ...` as a subprocess; yields the URL from its one line."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrion", "serve", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "ORCHESTRION_DB": str(db), **(env or {})})
    lines: queue.Queue[str] = queue.Queue()
    stdout = proc.stdout
    assert stdout is not None

    def read() -> None:
        for line in iter(stdout.readline, ""):
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        try:
            line = lines.get(timeout=start_s)
        except queue.Empty:
            proc.kill()
            raise AssertionError(f"serve printed nothing; stderr: {proc.communicate()[1]}") from None
        assert "listening on http://127.0.0.1:" in line, line
        yield line.split("listening on ")[1].split()[0]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_serve_command_prints_its_url_and_stops_cleanly(tmp_path: Path) -> None:
    db = tmp_path / "serve.db"
    with serve_process(db) as url:
        models = httpx.get(url + "/models", timeout=10)
    assert models.status_code == 200 and len(models.json()["data"]) >= 2
    store = TraceStore(db)
    assert [r["status"] for r in store.query("SELECT status FROM runs WHERE kind = 'serve'")] == ["stopped"]
    store.close()


@pytest.mark.parametrize(("args", "needle"), [
    (["--api-key-env", "ORCH_TEST_UNSET_KEY"], "ORCH_TEST_UNSET_KEY"),
    (["--pool", "missing.yaml"], "pool file not found"),
])
def test_serve_command_config_errors_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ORCH_TEST_UNSET_KEY"}
    res = subprocess.run([sys.executable, "-m", "orchestrion", "serve", "--port", "0", *args], check=False,
                         capture_output=True, text=True, timeout=60,
                         env={**env, "ORCHESTRION_DB": str(tmp_path / "t.db")})
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr


def test_serve_command_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        res = subprocess.run([sys.executable, "-m", "orchestrion", "serve", "--port", port], check=False,
                             capture_output=True, text=True, timeout=60,
                             env={**os.environ, "ORCHESTRION_DB": str(tmp_path / "t.db")})
    assert res.returncode == 2 and "cannot listen on 127.0.0.1:" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.integration
def test_serve_on_the_embedded_model(tmp_path: Path) -> None:
    """The issue's acceptance, as a test: the official client against `orchestrion serve`."""
    db = tmp_path / "serve.db"
    with serve_process(db) as url:
        c = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=600)
        direct = c.chat.completions.with_raw_response.create(model="orchestrion/direct", messages=ASK)
        para = c.chat.completions.with_raw_response.create(model="orchestrion/para", messages=ASK)
        # the synthesis streams its tokens live; a JSON answer comes from the grammar-constrained synthesis
        streamed = list(c.chat.completions.create(model="orchestrion/para", messages=ASK, stream=True))
        as_json = c.chat.completions.create(model="orchestrion/direct", messages=ASK,
                                            response_format={"type": "json_object"})
    store = TraceStore(db)
    pieces = [ch.choices[0].delta.content for ch in streamed if ch.choices and ch.choices[0].delta.content]
    streamed_ep = store.episode(ext(streamed[0])["trace_id"])
    assert streamed_ep is not None and streamed_ep.finished == 1
    assert streamed_ep.status != "ok" or (len(pieces) > 1 and "".join(pieces) == streamed_ep.answer)
    assert isinstance(json.loads(as_json.choices[0].message.content or ""), dict)
    for raw in (direct, para):
        done, status = raw.parse(), raw.headers["x-orchestrion-status"]
        ep = store.episode(raw.headers["x-orchestrion-trace-id"])
        assert ep is not None and ep.finished == 1 and ep.status == status
        assert status in ("ok", "budget_exceeded", "error")
        assert status != "ok" or (done.choices[0].message.content or "").strip()
        assert done.usage is not None and done.usage.prompt_tokens > 0
    assert direct.headers["x-orchestrion-status"] == "ok"
    store.close()
