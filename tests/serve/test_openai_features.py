"""The OpenAI endpoint's newer parts, with the official client over real loopback HTTP: the answer
streamed token by token (grounded as it goes), response_format through the structured-output
path, tools refused, /health and Prometheus /metrics, max_tokens as the answer's limit, the
refusal to listen publicly without a key, and cancellation reaching an HTTP model call."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrion import Completion, GenerateConfig, Message, Pool, ScriptedModel, TraceStore, Usage
from orchestrion.models.openai_api import OpenAIAPIModel
from orchestrion.serve.server import ServeSettings, check_exposure
from tests.serve.test_server import ASK, FINAL, ROUND1, client, episodes, ext, serving, wait_for

SYNTH = "Adding 2 and 3 gives [R1] in total.\nAnswer: [R1]"


def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
    """Para on a scripted model: decisions, workers answering 5, a synthesis citing R1, JSON on request."""
    prompt = messages[-1]["content"]
    if "one JSON value" in prompt:
        return '{"answer": 5}'
    if config.json_schema is not None:
        decisions = [m for m in messages if m["role"] == "assistant"]
        return FINAL if "[R1]" in prompt or decisions else ROUND1
    if "Write the final answer" in prompt:
        return SYNTH
    return "5"


def para_pool() -> Pool:
    return Pool.from_models([ScriptedModel(reply)])


def test_the_answer_streams_in_many_grounded_chunks(store: TraceStore) -> None:
    with serving(para_pool(), store) as url:
        chunks = list(client(url).chat.completions.create(model="orchestrion/para", messages=ASK, stream=True))
        whole = client(url).chat.completions.create(model="orchestrion/para", messages=ASK)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    answer = whole.choices[0].message.content
    assert answer == "Adding 2 and 3 gives 5 in total.\nAnswer: 5"  # the citations replaced by the result
    assert len(pieces) > 5 and "".join(pieces) == answer
    assert not any("[R" in p for p in pieces)  # a citation is never shown half-resolved
    final = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert final[0].choices[0].finish_reason == "stop" and ext(final[0])["status"] == "ok"
    assert "answer" not in ext(final[0])  # the stream matched the final answer
    assert [e["answer"] for e in episodes(store)] == [answer, answer]


@pytest.mark.parametrize("strategy", ["para", "direct"])
@pytest.mark.parametrize("stream", [False, True])
def test_json_object_answers_parse(store: TraceStore, strategy: str, stream: bool) -> None:
    with serving(para_pool(), store) as url:
        out = client(url).chat.completions.create(model=f"orchestrion/{strategy}", messages=ASK, stream=stream,
                                                  response_format={"type": "json_object"})
        if stream:
            text = "".join(c.choices[0].delta.content or "" for c in out if c.choices)  # type: ignore[union-attr]
        else:
            text = out.choices[0].message.content  # type: ignore[union-attr]
    assert json.loads(text) == {"answer": 5}
    ep = episodes(store)[0]
    assert ep["status"] == "ok" and ep["answer"] == text


def test_json_schema_is_repaired_until_it_fits(store: TraceStore) -> None:
    replies = iter(['Sure! {"value": 5}', '```json\n{"answer": 5, "why": "2+3"}\n```'])

    def answer(messages: Sequence[Message], config: GenerateConfig) -> str:
        return next(replies) if config.json_schema is not None else "5"

    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    with serving(Pool.from_models([ScriptedModel(answer)]), store) as url:
        done = client(url).chat.completions.create(
            model="orchestrion/direct", messages=ASK,
            response_format={"type": "json_schema", "json_schema": {"name": "sum", "schema": schema}})
    assert json.loads(done.choices[0].message.content or "") == {"answer": 5, "why": "2+3"}
    calls = store.query("SELECT name, attrs FROM spans WHERE kind = 'call' ORDER BY started")
    assert [json.loads(c["attrs"])["purpose"] for c in calls] == ["answer", "synthesis", "synthesis repair 1"]


def test_tools_are_refused_by_a_strategy_that_cannot_call_them(store: TraceStore) -> None:
    tool = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    with serving(para_pool(), store) as url:
        with pytest.raises(openai.BadRequestError) as refused:
            client(url).chat.completions.create(model="orchestrion/cot", messages=ASK, tools=[tool])  # type: ignore[list-item]
        bad_format = httpx.post(url + "/chat/completions", timeout=30, json={
            "model": "orchestrion/para", "messages": ASK, "response_format": {"type": "json_schema"}})
    assert refused.value.code == "tools_not_supported" and "orchestrion/direct" in refused.value.message
    assert bad_format.status_code == 400 and "json_schema" in bad_format.json()["error"]["message"]
    assert episodes(store) == []


class Capped:
    """A model that honours max_tokens (one word a token) and says when it cut the reply."""

    name = "capped"
    constrains_json = False

    async def complete(self, messages: Sequence[Message], config: GenerateConfig) -> Completion:
        words = "one two three four five six".split()[: config.max_tokens]
        for w in words:
            if config.on_text:
                config.on_text(" " + w if w != "one" else w)
        finish = "length" if config.max_tokens < 6 else "stop"
        return Completion(" ".join(words), self.name, Usage(input_tokens=3, output_tokens=len(words), calls=1),
                          0.0, finish_reason=finish)

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize("strategy", ["direct", "para"])
def test_max_tokens_caps_the_answer_and_reports_length(store: TraceStore, strategy: str) -> None:
    pool = Pool.from_models([ScriptedModel(reply, name="s"), Capped()], orchestrator="s", synthesizer="capped")
    if strategy == "direct":
        pool = Pool.from_models([Capped()])
    with serving(pool, store) as url:
        cut = client(url).chat.completions.create(model=f"orchestrion/{strategy}", messages=ASK, max_tokens=2)
        chunks = list(client(url).chat.completions.create(model=f"orchestrion/{strategy}", messages=ASK,
                                                          max_tokens=2, stream=True))
        full = client(url).chat.completions.create(model=f"orchestrion/{strategy}", messages=ASK)
    assert cut.choices[0].message.content == "one two" and cut.choices[0].finish_reason == "length"
    assert ext(cut)["status"] == "ok"  # the episode went fine; its answer was cut
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "one two"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert full.choices[0].finish_reason == "stop" and full.choices[0].message.content == "one two three four five six"
    meta = json.loads(episodes(store)[0]["meta"])
    assert meta["options"]["max_tokens"] == 2 and meta["budget"]["tokens"] is None  # not the episode budget


def metrics(url: str, **kw: Any) -> dict[str, float]:
    text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10, **kw).text
    return {f"{s.name}{json.dumps(s.labels, sort_keys=True)}": s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_health_and_metrics(store: TraceStore) -> None:
    with serving(para_pool(), store) as url:
        root = url.removesuffix("/v1")
        before = metrics(url)
        health = httpx.get(root + "/health", timeout=10)
        client(url).chat.completions.create(model="orchestrion/para", messages=ASK)
        list(client(url).chat.completions.create(model="orchestrion/para", messages=ASK, stream=True))
        httpx.get(url + "/nowhere", timeout=10)
        after = metrics(url)
    assert health.status_code == 200 and health.json()["status"] == "ok" and health.json()["episodes_in_flight"] == 0
    chat = '{"code": "200", "endpoint": "/v1/chat/completions"}'
    assert before.get("orchestrion_requests_total" + chat, 0) == 0 and after["orchestrion_requests_total" + chat] == 2
    assert after['orchestrion_requests_total{"code": "404", "endpoint": "other"}'] == 1
    assert after['orchestrion_episodes_total{"status": "ok", "strategy": "para"}'] == 2
    eps = episodes(store)
    assert after['orchestrion_tokens_total{"direction": "input"}'] == sum(e["input_tokens"] for e in eps) > 0
    assert after['orchestrion_tokens_total{"direction": "output"}'] == sum(e["output_tokens"] for e in eps) > 0
    assert after["orchestrion_cost_usd_total{}"] == 0  # the scripted model's price is known: free
    assert after['orchestrion_request_duration_seconds_count{"endpoint": "/v1/chat/completions"}'] == 2
    assert after['orchestrion_episode_duration_seconds_count{"strategy": "para"}'] == 2
    assert after["orchestrion_time_to_first_token_seconds_count{}"] == 1
    assert after["orchestrion_episodes_in_flight{}"] == 0


def test_metrics_need_the_key_when_one_is_set(store: TraceStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_TEST_KEY", "sekret")
    with serving(para_pool(), store, api_key_env="ORCH_TEST_KEY") as url:
        root = url.removesuffix("/v1")
        locked = httpx.get(root + "/metrics", timeout=10)
        health = httpx.get(root + "/health", timeout=10)
        found = metrics(url, headers={"Authorization": "Bearer sekret"})
    assert locked.status_code == 401 and health.status_code == 200
    assert "orchestrion_episodes_in_flight{}" in found


# -- listening publicly --------------------------------------------------------------------
def test_loopback_needs_no_key_and_other_addresses_do() -> None:
    for host in ("127.0.0.1", "localhost", "::1"):
        check_exposure(ServeSettings(host=host))
    check_exposure(ServeSettings(host="0.0.0.0", api_key_env="SOME_KEY"))
    check_exposure(ServeSettings(host="0.0.0.0", insecure_no_auth=True))
    with pytest.raises(Exception, match="--insecure-no-auth"):
        check_exposure(ServeSettings(host="0.0.0.0"))


def test_serve_on_all_addresses_without_a_key_is_refused(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "orchestrion", "serve", "--host", "0.0.0.0", "--port", "0"],
                         check=False, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "ORCHESTRION_DB": str(tmp_path / "t.db")})
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "--api-key-env" in lines[0] and "0.0.0.0" in lines[0]
    assert not (tmp_path / "t.db").exists()  # refused before anything was opened


# -- cancellation reaches an HTTP model call -----------------------------------------------
class HangingServer:
    """A TCP server that reads a request and never answers; records when each client hangs up."""

    def __init__(self) -> None:
        self.requests = 0
        self.closed = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _run(self) -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            while await reader.read(4096):  # the body, then nothing until the client hangs up
                pass
            self.closed.set()
            writer.close()

        async def main() -> None:
            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self.ready.set()
            async with server:
                await server.serve_forever()

        self.loop.run_until_complete(main())


def test_a_disconnect_closes_the_http_model_call(store: TraceStore) -> None:
    upstream = HangingServer()
    model = OpenAIAPIModel("remote", f"http://127.0.0.1:{upstream.port}/v1", max_retries=0, timeout_s=60)
    with serving(Pool.from_models([model]), store) as url:
        with httpx.stream("POST", url + "/chat/completions", timeout=10,
                          json={"model": "orchestrion/direct", "messages": ASK, "stream": True}) as r:
            next(r.iter_lines())
            deadline = time.monotonic() + 10
            while upstream.requests == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert upstream.requests == 1, "the model call never reached the upstream server"
        # the client is gone: the episode is cancelled and its HTTP call closed
        assert upstream.closed.wait(10), "the upstream request was left open"
        cancelled = 'orchestrion_episodes_total{"status": "cancelled", "strategy": "direct"}'
        counted = wait_for(lambda: metrics(url).get(cancelled), timeout=10)
    rows = episodes(store)
    assert len(rows) == 1 and rows[0]["status"] == "cancelled" and counted == 1


async def test_an_openai_api_model_hands_streamed_pieces_to_on_text(store: TraceStore) -> None:
    """The openai-api backend streams when asked (here from `orchestrion serve` itself as the upstream)."""
    with serving(para_pool(), store) as url:
        model = OpenAIAPIModel("upstream", url, model="orchestrion/para", max_retries=0)
        pieces: list[str] = []
        try:
            out = await model.complete([{"role": "user", "content": "What is 2+3?"}],
                                       GenerateConfig(on_text=pieces.append))
        finally:
            await model.aclose()
    assert len(pieces) > 3 and "".join(pieces) == out.text == "Adding 2 and 3 gives 5 in total.\nAnswer: 5"
