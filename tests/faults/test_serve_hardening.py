"""`serve`, the viewer and the OpenAI-compatible client under the probes of issue 36 (Hardening III):
a backend's 200 without an answer (row 1), nested unknown request fields (row 2), an option naming
no pool model (row 3), Ctrl-C with episodes in flight (row 4), a trace store that cannot write for a
while (row 5), and requests from another Host or Origin (row 6)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from fastapi.testclient import TestClient

from orchestrion import GenerateConfig, ModelError, Pool, TraceStore
from orchestrion.models.openai_api import OpenAIAPIModel
from orchestrion.serve.server import ServeSettings, create_app

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
