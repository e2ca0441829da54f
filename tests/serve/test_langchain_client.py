"""LangChain's ``ChatOpenAI`` against ``orchestrion serve`` (issue 23 item 6).

LangChain keeps only OpenAI's standard fields of a response, so it drops the body's ``orchestrion``
field: the episode's status and trace id must reach its user through ``system_fingerprint``
(``response_metadata``), and a plain stream must have no empty progress chunks unless asked for.

The tiny pool's real SmolLM2-135M answers the invoke, stream and structured-output tests (one
server for the module, greedy decoding and a fixed seed). What they assert is what does not depend
on the model's skill: the status and trace id, the answer and usage matching the trace, the shape
of the stream, and JSON that parses into the schema (the structured path decodes under a grammar;
whether the number in it is right is the model's business). The progress and failure tests use
scripted pools: they are about the wire, not the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from orchestrion import Pool, TraceStore
from orchestrion.serve._bodies import parse_fingerprint

from .test_serve_hardening import dead_pool
from .test_server import episodes, para_pool, serving

langchain_openai = pytest.importorskip("langchain_openai")  # in the dev extra: `make test` installs it

QUESTION = "What is 12*13?"


def chat(url: str, **kw: Any) -> Any:
    return langchain_openai.ChatOpenAI(model="orchestrion/para", base_url=url, api_key="x", timeout=300, seed=0,
                                       extra_body={"orchestrion": {"options": {"max_rounds": 2}}},
                                       **{"max_retries": 0, **kw})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TraceStore]]:
    """One ``orchestrion serve`` on the tiny pool (SmolLM2-135M, loaded once) for the module."""
    tmp = tmp_path_factory.mktemp("langchain")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ORCHESTRION_PREFIX_CACHE_DIR", str(tmp / "kv"))
        store, pool = TraceStore(tmp / "traces.db"), Pool.preset("tiny")
        try:
            with serving(pool, store) as url:
                yield url, store
        finally:
            asyncio.run(pool.aclose())
            store.close()


def episode_of(store: TraceStore, fingerprint: str | None) -> tuple[dict[str, str], Any]:
    seen = parse_fingerprint(fingerprint)
    row = store.episode(seen["trace_id"])
    assert row is not None
    return seen, row


@pytest.mark.integration
def test_invoke_shows_the_status_and_trace_id_in_response_metadata(tiny: tuple[str, TraceStore]) -> None:
    url, store = tiny
    message = chat(url).invoke(QUESTION)
    seen, row = episode_of(store, message.response_metadata["system_fingerprint"])
    assert seen["status"] == row.status == "ok"
    assert message.content == row.answer and row.answer and row.strategy == "para"
    assert message.response_metadata["finish_reason"] == "stop"
    assert message.usage_metadata["input_tokens"] == row.input_tokens > 0
    assert message.usage_metadata["output_tokens"] == row.output_tokens > 0


@pytest.mark.integration
def test_a_stream_is_plain_and_its_sum_tells_the_final_status(tiny: tuple[str, TraceStore]) -> None:
    url, store = tiny
    chunks = list(chat(url).stream(QUESTION))
    [finish] = [i for i, c in enumerate(chunks) if c.response_metadata.get("finish_reason")]
    # the role chunk, then the answer's deltas (none empty), then the finishing chunk
    assert chunks[0].content == "" and all(c.content for c in chunks[1:finish]) and finish > 1
    # after it only LangChain's own closing chunk, with nothing from the server
    assert all(c.content == "" and c.chunk_position == "last" for c in chunks[finish + 1:])
    whole = sum(chunks[1:], chunks[0])
    seen, row = episode_of(store, whole.response_metadata["system_fingerprint"])
    assert seen["status"] == row.status == "ok" and whole.content == row.answer
    # LangChain keeps the fingerprint of the finishing chunk only; the earlier ones said "running"
    assert [c for c in chunks[:finish] if "system_fingerprint" in c.response_metadata] == []


class Product(BaseModel):
    answer: int


@pytest.mark.integration
def test_with_structured_output_json_schema_parses(tiny: tuple[str, TraceStore]) -> None:
    url, store = tiny
    structured = chat(url).with_structured_output(Product, method="json_schema", include_raw=True)
    got = structured.invoke(QUESTION)
    assert got["parsing_error"] is None and isinstance(got["parsed"], Product)
    raw = got["raw"]
    seen, row = episode_of(store, raw.response_metadata["system_fingerprint"])
    assert seen["status"] == row.status == "ok"
    assert Product.model_validate_json(row.answer) == got["parsed"]  # the episode's answer is the JSON


@pytest.mark.parametrize("ask", ["stream_options", "header"])
def test_progress_chunks_reach_langchain_only_when_asked_for(store: TraceStore, ask: str) -> None:
    with serving(para_pool(), store) as url:
        plain = list(chat(url).stream("What is 2+3?"))
        if ask == "header":
            asked = list(chat(url, default_headers={"X-Orchestrion-Progress": "true"}).stream("What is 2+3?"))
        else:
            asked = list(chat(url).stream("What is 2+3?", stream_options={"include_progress": True}))
    # plain: role, "5", finish and LangChain's closing chunk; asked: an empty chunk per progress event too
    assert [c.content for c in plain] == ["", "5", "", ""]
    assert "".join(c.content for c in asked) == "5"
    assert len(asked) - len(plain) >= 5 and all(c.content == "" for c in asked if c.content != "5")
    assert [parse_fingerprint(sum(s[1:], s[0]).response_metadata["system_fingerprint"])["status"]
            for s in (plain, asked)] == ["ok", "ok"]
    assert [e["status"] for e in episodes(store)] == ["ok", "ok"]


def test_a_failed_episode_raises_once_with_langchains_default_retries(store: TraceStore, tmp_path: Path) -> None:
    pool, _ = dead_pool(tmp_path)
    with serving(pool, store) as url:
        llm = langchain_openai.ChatOpenAI(model="orchestrion/direct", base_url=url, api_key="x", timeout=30)
        assert llm.root_client.max_retries == 2  # LangChain's default: the openai client's own
        with pytest.raises(openai.InternalServerError) as failed:
            llm.invoke("What is 2+3?")
    assert failed.value.status_code == 502 and failed.value.code == "episode_failed"
    assert [e["status"] for e in episodes(store)] == ["error"]  # run once, not three times
