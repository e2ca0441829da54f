"""What a standard OpenAI client sees of an episode (issue 23 item 6): clients such as LangChain's
``ChatOpenAI`` and LiteLLM keep only the standard fields of a response, so the episode's status
and trace id ride in ``system_fingerprint`` and headers, a failed episode is an error raised once
(not retried), and a plain stream has no empty progress chunks unless asked for.

These tests use the official openai SDK, which LangChain and LiteLLM build on (its default retries
included), reading only standard fields; ``test_langchain_client.py`` runs LangChain's ``ChatOpenAI``
itself (LiteLLM, a large dependency, was tried by hand: see the clients table in docs/serving.md).
"""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from orchestrion import TraceStore
from orchestrion.serve._bodies import parse_fingerprint

from .test_serve_hardening import dead_pool
from .test_server import ASK, episodes, para_pool, serving


def test_status_and_trace_id_in_the_standard_fields_of_a_completion(store: TraceStore) -> None:
    with serving(para_pool(), store) as url:
        raw = openai.OpenAI(base_url=url, api_key="x", max_retries=0).chat.completions.with_raw_response.create(
            model="orchestrion/para", messages=ASK)
    done = raw.parse()
    seen = parse_fingerprint(done.system_fingerprint)
    assert seen["status"] == "ok" and store.episode(seen["trace_id"]) is not None
    assert raw.headers["x-orchestrion-status"] == "ok" and raw.headers["x-orchestrion-trace-id"] == seen["trace_id"]


def test_a_plain_stream_is_plain_and_its_last_chunk_tells_the_status(store: TraceStore) -> None:
    with serving(para_pool(), store) as url:
        chunks = list(openai.OpenAI(base_url=url, api_key="x", max_retries=0).chat.completions.create(
            model="orchestrion/para", messages=ASK, stream=True))
    # role, the answer's deltas, the finish: no chunk a standard client would show as nothing
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].delta.content for c in chunks[1:-1])
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "5"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert {parse_fingerprint(c.system_fingerprint)["status"] for c in chunks[:-1]} == {"running"}
    final = parse_fingerprint(chunks[-1].system_fingerprint)
    assert final["status"] == "ok" and [e["id"] for e in episodes(store)] == [final["trace_id"]]


@pytest.mark.parametrize("ask", ["stream_options", "header"])
def test_progress_chunks_are_opt_in(store: TraceStore, ask: str) -> None:
    kw: dict[str, object] = ({"stream_options": {"include_progress": True}} if ask == "stream_options"
                             else {"extra_headers": {"X-Orchestrion-Progress": "true"}})
    with serving(para_pool(), store) as url:
        chunks = list(openai.OpenAI(base_url=url, api_key="x", max_retries=0).chat.completions.create(
            model="orchestrion/para", messages=ASK, stream=True, **kw))  # type: ignore[call-overload]
    progress = [(c.model_extra or {}).get("orchestrion", {}).get("progress") for c in chunks]
    kinds = {p["kind"] for p in progress if p}
    assert {"round", "decision", "call", "tool", "agent"} <= kinds
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "5"


def test_a_failed_episode_is_raised_once_by_a_client_that_retries(store: TraceStore, tmp_path: Path) -> None:
    pool, _ = dead_pool(tmp_path)
    with serving(pool, store) as url:
        client = openai.OpenAI(base_url=url, api_key="x", timeout=30)  # the default: 2 retries on a 5xx
        with pytest.raises(openai.InternalServerError) as failed:
            client.chat.completions.create(model="orchestrion/direct", messages=ASK)
        with pytest.raises(openai.APIError) as streamed:
            list(client.chat.completions.create(model="orchestrion/direct", messages=ASK, stream=True))
    assert failed.value.status_code == 502 and failed.value.code == "episode_failed"
    assert failed.value.response.headers["x-orchestrion-status"] == "error"
    assert "the episode failed" in streamed.value.message
    assert [e["status"] for e in episodes(store)] == ["error", "error"]  # each run once: not retried
