"""The openai-api backend against the loopback fake server (no network)."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fake_openai_server

from fake_openai_server import FakeOpenAIServer, FakeReply, run_in_process  # noqa: E402

from orchestrion._errors import ConfigError, ModelError, ModelHTTPError, ModelUnavailableError
from orchestrion.models.cost import Price
from orchestrion.models.openai_api import OpenAIAPIModel, from_spec
from orchestrion.models.protocol import Model
from orchestrion.models.spec import ModelSpec
from orchestrion.models.types import GenerateConfig, msg
from tests.helpers import free_port

MESSAGES = [msg("system", "You are terse."), msg("user", "say hello world")]
CFG = GenerateConfig(max_tokens=32, temperature=0.2, top_p=0.9, seed=7, stop=("END",))
SCHEMA: dict[str, Any] = {
    "title": "Answer",
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as srv:
        yield srv


def make(srv: FakeOpenAIServer | str, **kw: Any) -> OpenAIAPIModel:
    url = srv if isinstance(srv, str) else srv.base_url
    kw.setdefault("backoff_s", 0.01)
    return OpenAIAPIModel("tiny", url, **kw)


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


async def test_basic_completion_usage_cost_latency(server: FakeOpenAIServer) -> None:
    model = make(server, model="served-id", price=Price(input_per_mtok=1.0, output_per_mtok=2.0))
    assert isinstance(model, Model) and model.constrains_json
    try:
        out = await model.complete(MESSAGES, CFG)
    finally:
        await model.aclose()
    assert out.text == "echo: say hello world"
    assert out.model == "tiny" and out.finish_reason == "stop" and out.structured_mode is None
    assert (out.usage.input_tokens, out.usage.output_tokens, out.usage.calls) == (6, 4, 1)
    assert out.usage.cost_usd == pytest.approx((6 * 1.0 + 4 * 2.0) / 1e6)
    assert 0 < out.latency_s < 5
    body = server.requests[0]
    assert body["model"] == "served-id" and body["messages"] == MESSAGES
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["seed"]) == (32, 0.2, 0.9, 7)
    assert body["stop"] == ["END"] and "stream" not in body and "response_format" not in body
    assert "Authorization" not in server.headers[0]


async def test_unknown_price_gives_unknown_cost(server: FakeOpenAIServer) -> None:
    model = make(server)
    out = await model.complete(MESSAGES, GenerateConfig())
    await model.aclose()
    assert out.usage.cost_usd is None and out.usage.output_tokens == 4
    assert "seed" not in server.requests[0] and "stop" not in server.requests[0]


async def test_logprobs_and_token_ids_when_returned(server: FakeOpenAIServer) -> None:
    model = make(server, extra_body={"return_token_ids": True})
    out = await model.complete(MESSAGES, GenerateConfig(logprobs=True))
    await model.aclose()
    assert server.requests[0]["logprobs"] is True
    assert out.logprobs == pytest.approx([-0.1, -0.2, -0.3, -0.4])
    assert out.prompt_token_ids == list(range(6)) and out.token_ids == [100, 101, 102, 103]
    plain = make(server)
    out = await plain.complete(MESSAGES, GenerateConfig())
    await plain.aclose()
    assert out.logprobs is None and out.token_ids is None and out.prompt_token_ids is None


async def test_retries_on_500_then_succeeds(server: FakeOpenAIServer) -> None:
    server.fail_first = 2
    model = make(server, max_retries=3)
    out = await model.complete(MESSAGES, CFG)
    await model.aclose()
    assert out.text == "echo: say hello world" and server.count == 3


async def test_500_until_retries_run_out(server: FakeOpenAIServer) -> None:
    server.fail_first = 10
    model = make(server, max_retries=2)
    with pytest.raises(ModelHTTPError, match="kept failing after 3 attempts: HTTP 500") as info:
        await model.complete(MESSAGES, CFG)
    await model.aclose()
    assert server.count == 3 and "\n" not in str(info.value)
    assert isinstance(info.value, ModelUnavailableError) and (info.value.status, info.value.retryable) == (500, True)


async def test_429_honours_retry_after_and_caps_it(server: FakeOpenAIServer) -> None:
    server.fail_first, server.fail_status, server.retry_after = 1, 429, 0.3
    model = make(server, max_retries=2)
    t0 = time.perf_counter()
    await model.complete(MESSAGES, CFG)
    assert time.perf_counter() - t0 >= 0.28 and server.count == 2
    server.count, server.retry_after = 0, 100.0  # within the call's timeout, so waited for, up to the cap
    capped = make(server, max_retries=2, max_retry_after_s=0.05, timeout_s=200.0)
    t0 = time.perf_counter()
    await capped.complete(MESSAGES, CFG)
    assert time.perf_counter() - t0 < 2 and server.count == 2
    await model.aclose()
    await capped.aclose()


async def test_a_retry_after_beyond_the_timeout_fails_at_once_with_that_reason(server: FakeOpenAIServer) -> None:
    server.fail_first, server.fail_status, server.retry_after = 10, 429, 3600.0
    model = make(server, max_retries=3, timeout_s=5.0)
    t0 = time.perf_counter()
    with pytest.raises(ModelHTTPError) as info:
        await model.complete(MESSAGES, CFG)
    await model.aclose()
    text = str(info.value)
    assert time.perf_counter() - t0 < 2 and server.count == 1  # no wait, no second request
    assert "asks to wait 3600s before a retry, longer than the call's timeout of 5s" in text and "\n" not in text
    assert "HTTP 429" in text and (info.value.status, info.value.retryable) == (429, True)


async def test_each_retry_says_on_one_line_that_it_waits(server: FakeOpenAIServer,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    server.fail_first, server.fail_status, server.retry_after = 2, 429, 0.05
    model = make(server, max_retries=3)
    with caplog.at_level(logging.WARNING, logger="orchestrion.models.openai_api"):
        out = await model.complete(MESSAGES, CFG)
    await model.aclose()
    assert out.text == "echo: say hello world"
    lines = [r.getMessage() for r in caplog.records if r.name == "orchestrion.models.openai_api"]
    assert len(lines) == 2 and all("\n" not in line for line in lines), lines
    assert "'tiny'" in lines[0] and "HTTP 429" in lines[0] and "retry 1 of 3 in 0.1s" in lines[0]
    assert "retry 2 of 3" in lines[1]


async def test_400_fails_at_once_with_one_line_error(server: FakeOpenAIServer) -> None:
    server.replies = [FakeReply(status=400, error="max_tokens is too large:\n  99999 > 2048")]
    model = make(server, max_retries=3)
    with pytest.raises(ModelHTTPError) as info:
        await model.complete(MESSAGES, CFG)
    await model.aclose()
    text = str(info.value)
    assert (info.value.status, info.value.retryable) == (400, False)  # told apart by attributes, not by text
    assert info.value.body == "max_tokens is too large: 99999 > 2048"
    assert "\n" not in text and "'tiny'" in text and server.base_url in text
    assert "max_tokens is too large: 99999 > 2048" in text and server.count == 1


async def test_unreachable_server_fails_fast() -> None:
    model = make(closed_port_url(), max_retries=1)
    t0 = time.perf_counter()
    with pytest.raises(ModelUnavailableError, match=r"'tiny' at http://127\.0\.0\.1:\d+/v1/chat/completions "
                       r"is unreachable: .*; is the server running\?"):
        await model.complete(MESSAGES, CFG)
    assert time.perf_counter() - t0 < 2
    await model.aclose()


async def test_timeout_on_slow_server(server: FakeOpenAIServer) -> None:
    server.delay_s = 1.5
    model = make(server, timeout_s=0.2, max_retries=1)
    t0 = time.perf_counter()
    with pytest.raises(ModelUnavailableError, match="timed out after 0.2s") as info:
        await model.complete(MESSAGES, CFG)
    assert time.perf_counter() - t0 < 1.2 and "\n" not in str(info.value)
    await model.aclose()


async def test_structured_auto_falls_back_and_remembers(server: FakeOpenAIServer) -> None:
    server.reject_json_schema = True
    server.replies = ['{"answer": "hi"}']
    model = make(server)
    cfg = GenerateConfig(json_schema=SCHEMA)
    first = await model.complete(MESSAGES, cfg)
    assert first.structured_mode == "json_object" and first.text == '{"answer": "hi"}'
    kinds = [r.get("response_format", {}).get("type") for r in server.requests]
    assert kinds == ["json_schema", "json_object"]
    assert server.requests[0]["response_format"]["json_schema"]["name"] == "Answer"
    system = server.requests[1]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("You are terse.")
    assert '"required":["answer"]' in system["content"] and len(server.requests[1]["messages"]) == 2
    second = await model.complete(MESSAGES, cfg)
    assert second.structured_mode == "json_object" and server.count == 3
    assert server.requests[2]["response_format"] == {"type": "json_object"}
    await model.aclose()


async def test_structured_fixed_modes(server: FakeOpenAIServer) -> None:
    cfg = GenerateConfig(json_schema=SCHEMA)
    prompt = make(server, structured="prompt")
    assert not prompt.constrains_json
    out = await prompt.complete([msg("user", "q")], cfg)
    body = server.requests[-1]
    assert out.structured_mode == "prompt" and "response_format" not in body
    assert body["messages"][0]["role"] == "system" and "JSON Schema" in body["messages"][0]["content"]
    server.reject_json_schema = True
    strict = make(server, structured="json_schema")
    with pytest.raises(ModelError, match="HTTP 400.*json_schema"):
        await strict.complete(MESSAGES, cfg)
    assert server.count == 2
    await prompt.aclose()
    await strict.aclose()


async def test_stream_yields_pieces_in_order(server: FakeOpenAIServer) -> None:
    server.replies = ["one two three four"]
    server.chunk_delay_s = 0.005
    model = make(server, price=Price(input_per_mtok=1.0, output_per_mtok=1.0))
    stream = model.stream(MESSAGES, GenerateConfig(logprobs=True))
    pieces = [piece async for piece in stream]
    await model.aclose()
    assert pieces == ["one ", "two ", "three ", "four"]
    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}
    done = stream.completion
    assert done is not None and done.text == "one two three four"
    assert (done.usage.input_tokens, done.usage.output_tokens) == (6, 4)
    assert done.usage.cost_usd == pytest.approx(10 / 1e6) and done.finish_reason == "stop"
    assert done.logprobs == pytest.approx([-0.1, -0.2, -0.3, -0.4]) and done.latency_s >= done.extra["ttft_s"]


async def test_stream_times_out_midway(server: FakeOpenAIServer) -> None:
    server.replies = ["a b c d e f g h i j"]
    server.chunk_delay_s = 0.1
    model = make(server, timeout_s=0.35, max_retries=0)
    pieces: list[str] = []
    t0 = time.perf_counter()
    with pytest.raises(ModelUnavailableError, match="broke off the stream"):
        async for piece in model.stream(MESSAGES, CFG):
            pieces.append(piece)
    assert 0 < len(pieces) < 10 and time.perf_counter() - t0 < 1.0
    await model.aclose()


async def test_api_key_from_env(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.api_key = "sekret"
    model = make(server, api_key_env="ORCH_TEST_KEY")
    monkeypatch.delenv("ORCH_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="ORCH_TEST_KEY"):
        await model.complete(MESSAGES, CFG)
    assert server.count == 0
    monkeypatch.setenv("ORCH_TEST_KEY", "wrong")
    with pytest.raises(ModelError, match=r"HTTP 401.*\$ORCH_TEST_KEY"):
        await model.complete(MESSAGES, CFG)
    monkeypatch.setenv("ORCH_TEST_KEY", "sekret")  # read at call time, not at construction
    out = await model.complete(MESSAGES, CFG)
    await model.aclose()
    assert out.text.startswith("echo:") and server.headers[-1]["Authorization"] == "Bearer sekret"


async def test_official_sdk_sees_the_same_content(server: FakeOpenAIServer) -> None:
    openai = pytest.importorskip("openai")
    server.replies = ["the quick brown fox"]
    ours = make(server)
    sdk = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    try:
        ref = await sdk.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=32)
        mine = await ours.complete(MESSAGES, CFG)
        assert mine.text == ref.choices[0].message.content == "the quick brown fox"
        assert ref.usage is not None
        assert mine.usage.input_tokens == ref.usage.prompt_tokens
        assert mine.usage.output_tokens == ref.usage.completion_tokens
        chunks = await sdk.chat.completions.create(model="tiny", messages=MESSAGES, stream=True)
        ref_pieces = [c.choices[0].delta.content async for c in chunks if c.choices and c.choices[0].delta.content]
        assert [p async for p in ours.stream(MESSAGES, CFG)] == ref_pieces
    finally:
        await sdk.close()
        await ours.aclose()


async def test_high_fan_out_is_not_capped_by_the_connection_pool(server: FakeOpenAIServer) -> None:
    server.delay_s = 0.1
    model = make(server)
    t0 = time.perf_counter()
    outs = await asyncio.gather(*(model.complete([msg("user", str(i))], CFG) for i in range(150)))
    elapsed = time.perf_counter() - t0
    await model.aclose()
    assert [o.text for o in outs] == [f"echo: {i}" for i in range(150)]
    assert server.max_active > 100 and elapsed < 1.5  # aiohttp's default pool would cap at 100


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the first loop's session is abandoned on purpose
def test_session_is_per_event_loop() -> None:
    async def one(model: OpenAIAPIModel) -> str:
        async with FakeOpenAIServer() as srv:
            model._url = type(model._url)(srv.base_url + "/chat/completions")
            return (await model.complete(MESSAGES, CFG)).text

    model = make("http://127.0.0.1:9/v1")
    assert asyncio.run(one(model)) == asyncio.run(one(model)) == "echo: say hello world"
    asyncio.run(model.aclose())


def test_from_spec_maps_the_pool_entry() -> None:
    spec = ModelSpec(name="remote", base_url="http://127.0.0.1:8000/v1/", model="Qwen/Qwen3-8B",
                     api_key_env="K", timeout_s=5, max_retries=1, structured="json_object",
                     price=Price(input_per_mtok=0.1, output_per_mtok=0.2))
    model = from_spec(spec)
    assert model.url == "http://127.0.0.1:8000/v1/chat/completions"
    assert (model.name, model.server_model, model.api_key_env) == ("remote", "Qwen/Qwen3-8B", "K")
    assert (model.timeout_s, model.max_retries, model.structured_mode, model.price) == (5, 1, "json_object", spec.price)
    assert from_spec(ModelSpec(name="m", base_url="http://h:1/v1")).server_model == "m"
    with pytest.raises(ConfigError, match="base_url"):
        OpenAIAPIModel("x", "localhost:8000")


async def test_fake_server_runs_as_a_process() -> None:
    with run_in_process("--delay-ms", "20", "--reply", "from a process") as url:
        model = make(url)
        out = await model.complete(MESSAGES, CFG)
        await model.aclose()
    assert out.text == "from a process" and url.endswith("/v1")


async def test_a_hung_server_is_waited_for_once_not_per_retry(server: FakeOpenAIServer) -> None:
    server.delay_s = 5
    model = make(server, timeout_s=0.3, max_retries=3)
    with pytest.raises(ModelUnavailableError, match=r"timed out after 0.3s \(1 attempt\); is the server"):
        await model.complete(MESSAGES, CFG)
    assert server.count == 1
    await model.aclose()


def test_default_timeouts_fail_a_dead_server_within_a_minute() -> None:
    from orchestrion.models.openai_api import CONNECT_TIMEOUT_S, DEFAULT_TIMEOUT_S
    from orchestrion.models.spec import ModelSpec

    model = OpenAIAPIModel("m", "http://127.0.0.1:9/v1")
    spec = ModelSpec(name="m", base_url="http://127.0.0.1:9/v1")
    assert model.timeout_s == spec.timeout_s == DEFAULT_TIMEOUT_S < 60  # a hang: one timeout, no retry
    assert CONNECT_TIMEOUT_S < DEFAULT_TIMEOUT_S  # a black-holed host: one connect timeout, no retry
    assert spec.max_retries * model.max_backoff_s < 60  # refused connections: retries with capped backoff
    assert model._timeout.sock_connect == CONNECT_TIMEOUT_S and model._timeout.total == DEFAULT_TIMEOUT_S


async def test_a_connect_timeout_is_named_as_one(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of connections at once time out while connecting: the message says so and names
    the fix, instead of the request timeout that never ran out."""
    import aiohttp

    calls = []

    async def no_connection(self: aiohttp.ClientSession, *args: object, **kwargs: object) -> None:
        calls.append(1)
        raise aiohttp.ConnectionTimeoutError("Connection timeout to host")

    monkeypatch.setattr(aiohttp.ClientSession, "post", no_connection)
    model = make(server, timeout_s=120, max_retries=3)
    with pytest.raises(ModelUnavailableError, match=r"accepted no connection within 10s \(1 attempt\); too many "
                       r"connections at once\? lower max_concurrency") as info:
        await model.complete(MESSAGES, CFG)
    assert "timed out after 120s" not in str(info.value) and len(calls) == 1
    await model.aclose()
