"""`POST /v1/responses` with the official openai client (streamed and not, and the SDK's own
stream helper that checks the event order), and the server's /docs, /openapi.json and /version."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.responses import response_create_params

import orchestrion
from orchestrion import GenerateConfig, Message, Pool, ScriptedModel, TraceStore
from orchestrion.serve._fields import CHAT_FIELDS, RESPONSES_FIELDS
from tests.serve.test_openai_features import Capped, para_pool
from tests.serve.test_server import client, direct_pool, episodes, ext, serving

ANSWER = "Adding 2 and 3 gives 5 in total.\nAnswer: 5"  # para's synthesis, grounded on the calculator's 5
RESPONSES_PARAMS = (response_create_params.ResponseCreateParamsStreaming.__required_keys__
                    | response_create_params.ResponseCreateParamsStreaming.__optional_keys__)


def test_responses_create_answers_with_one_traced_episode(store: TraceStore) -> None:
    with serving(para_pool(), store) as url:
        raw = client(url).responses.with_raw_response.create(model="orchestrion/para", input="What is 2+3?")
        done = raw.parse()
    assert done.object == "response" and done.status == "completed" and done.model == "orchestrion/para"
    assert done.output_text == ANSWER and done.error is None and done.incomplete_details is None
    [ep] = episodes(store)
    assert ep["task_id"] == done.id and ep["status"] == "ok" and ep["answer"] == ANSWER
    assert raw.headers["x-orchestrion-trace-id"] == ep["id"] == ext(done)["trace_id"]
    assert done.usage is not None and done.usage.input_tokens == ep["input_tokens"] > 0
    assert done.usage.output_tokens == ep["output_tokens"] and done.usage.total_tokens == ep["input_tokens"] + \
        ep["output_tokens"]
    assert json.loads(ep["task"])["prompt"] == "What is 2+3?"


def test_responses_stream_token_by_token(store: TraceStore) -> None:
    with serving(para_pool(), store) as url:
        events = list(client(url).responses.create(model="orchestrion/para", input="What is 2+3?", stream=True))
        with client(url).responses.stream(model="orchestrion/para", input="What is 2+3?") as stream:
            helper_deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
            final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 5 and "".join(deltas) == ANSWER and not any("[R" in d for d in deltas)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    completed = events[-1].response  # type: ignore[union-attr]
    assert completed.output_text == ANSWER and completed.usage is not None and completed.usage.total_tokens > 0
    assert ext(completed)["status"] == "ok" and ext(completed)["trace_id"] == episodes(store)[0]["id"]
    assert "".join(helper_deltas) == final.output_text == ANSWER and final.status == "completed"
    assert [e["status"] for e in episodes(store)] == ["ok", "ok"]


def test_responses_input_items_instructions_and_json(store: TraceStore) -> None:
    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        return '{"answer": 5}' if config.json_schema is not None else "5"

    with serving(Pool.from_models([ScriptedModel(reply)]), store) as url:
        done = client(url).responses.create(
            model="orchestrion/direct", instructions="Answer in JSON.",
            input=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                   {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is 2+3?"}]}],
            text={"format": {"type": "json_object"}})
    assert json.loads(done.output_text) == {"answer": 5}
    prompt = json.loads(episodes(store)[0]["task"])["prompt"]
    assert "Instructions:\nAnswer in JSON." in prompt and "Assistant: Hello" in prompt
    assert prompt.endswith("Current request:\nWhat is 2+3?")


@pytest.mark.parametrize("stream", [False, True])
def test_max_output_tokens_makes_the_response_incomplete(store: TraceStore, stream: bool) -> None:
    with serving(Pool.from_models([Capped()]), store) as url:
        if stream:
            events = list(client(url).responses.create(model="orchestrion/direct", input="count", stream=True,
                                                       max_output_tokens=2))
            assert events[-1].type == "response.incomplete"
            done = events[-1].response
        else:
            done = client(url).responses.create(model="orchestrion/direct", input="count", max_output_tokens=2)
    assert done.status == "incomplete" and done.output_text == "one two"
    assert done.incomplete_details is not None and done.incomplete_details.reason == "max_output_tokens"


def test_responses_refusals_say_why(store: TraceStore) -> None:
    tool = {"type": "web_search"}
    with serving(direct_pool(), store) as url:
        with pytest.raises(openai.BadRequestError) as chained:
            client(url).responses.create(model="orchestrion/direct", input="hi", previous_response_id="resp_1")
        with pytest.raises(openai.BadRequestError) as tools:
            client(url).responses.create(model="orchestrion/direct", input="hi", tools=[tool])  # type: ignore[list-item]
        with pytest.raises(openai.BadRequestError) as typed:
            client(url).responses.create(model="orchestrion/direct", input="hi", extra_body={"temperature": "hot"})
        with pytest.raises(openai.BadRequestError) as image:
            client(url).responses.create(model="orchestrion/direct", input=[{"role": "user", "content": [
                {"type": "input_image", "image_url": "http://x/y.png", "detail": "auto"}]}])
        with pytest.raises(openai.NotFoundError):
            client(url).responses.create(model="orchestrion/nosuch", input="hi")
        ignored = client(url).responses.with_raw_response.create(model="orchestrion/direct", input="hi",
                                                                 temperature=0.2)
    assert chained.value.param == "previous_response_id" and "whole conversation" in chained.value.message
    assert tools.value.code == "unsupported_tool" and tools.value.param == "tools.0.type"
    assert typed.value.param == "temperature"
    assert image.value.param == "input.0.content.0"
    assert ignored.headers["x-orchestrion-ignored-fields"] == "temperature"
    assert ext(ignored.parse())["ignored"] == ["temperature"]
    assert len(episodes(store)) == 1


def test_every_responses_field_has_a_stated_fate() -> None:
    assert set(RESPONSES_FIELDS) == RESPONSES_PARAMS | {"orchestrion"}
    assert all(rule.fate in ("honoured", "refused", "ignored") and len(rule.note) > 10
               for rule in RESPONSES_FIELDS.values())


# -- /docs, /openapi.json, /version ----------------------------------------------------------
def test_docs_openapi_and_version(store: TraceStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_TEST_KEY", "sekret")
    with serving(direct_pool(), store, api_key_env="ORCH_TEST_KEY") as url:
        root = url.removesuffix("/v1")
        version = httpx.get(root + "/version", timeout=10)
        doc = httpx.get(root + "/openapi.json", timeout=10)
        page = httpx.get(root + "/docs", timeout=10)
        assets = [httpx.get(root + "/docs/assets/" + name, timeout=10)
                  for name in ("swagger-ui-bundle.js", "swagger-ui.css", "..%2Fapp.js")]
        locked = httpx.get(url + "/models", timeout=10)
    assert version.status_code == 200 and version.json() == {"version": orchestrion.__version__}
    assert locked.status_code == 401  # the API still wants its key; the docs and version do not
    assert page.status_code == 200 and "swagger" in page.text.lower() and "/openapi.json" in page.text
    assert not re.findall(r"(?:src|href)=\"https?://", page.text)  # nothing from a CDN: /docs works offline
    js, css, outside = assets
    assert js.status_code == css.status_code == 200 and "SwaggerUIBundle" in js.text and ".swagger-ui" in css.text
    assert outside.status_code == 404  # only the two files, nothing else of the package
    spec = doc.json()
    assert spec["info"]["version"] == orchestrion.__version__
    assert {"/v1/chat/completions", "/v1/responses", "/v1/models", "/version", "/health"} <= set(spec["paths"])
    schemas = spec["components"]["schemas"]
    chat = schemas["ChatRequest"]["properties"]
    assert set(chat) == set(CHAT_FIELDS)  # every field, with what happens to it
    assert chat["temperature"]["description"].startswith("ignored:")
    assert chat["stop"]["description"].startswith("honoured:") and chat["logprobs"]["description"].startswith("refused")
    assert set(schemas["ResponsesRequest"]["properties"]) == set(RESPONSES_FIELDS)
    body = spec["paths"]["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ResponsesRequest"}
    refs = {v.split("/")[-1] for v in _refs(spec)}
    assert refs <= set(schemas), f"dangling references: {refs - set(schemas)}"


def test_docs_behind_a_path_prefix_loads_its_assets_under_the_prefix(store: TraceStore) -> None:
    from fastapi.testclient import TestClient

    from orchestrion.serve.server import ServeSettings, create_app

    app = create_app(ServeSettings(), pool=direct_pool(), store=store)
    with TestClient(app, root_path="/llm", base_url="http://localhost") as http:
        page = http.get("/docs").text
    assert '"/llm/docs/assets/swagger-ui-bundle.js"' in page and '"/llm/docs/assets/swagger-ui.css"' in page
    assert "'/llm/openapi.json'" in page or '"/llm/openapi.json"' in page


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref" and isinstance(v, str)] + \
            [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_a_failed_episode_is_a_502_or_a_failed_response(store: TraceStore, tmp_path: Path) -> None:
    from tests.serve.test_serve_hardening import dead_pool

    pool, upstream = dead_pool(tmp_path)
    with serving(pool, store) as url:
        with pytest.raises(openai.InternalServerError) as failed:
            client(url).responses.create(model="orchestrion/direct", input="hi")
        events = list(client(url).responses.create(model="orchestrion/direct", input="hi", stream=True))
        kept = client(url).responses.create(model="orchestrion/direct", input="hi",
                                            extra_body={"orchestrion": {"errors_as_200": True}})
    assert failed.value.status_code == 502 and failed.value.code == "episode_failed"
    assert events[-1].type == "response.failed"
    error = events[-1].response.error
    assert error is not None and "is unreachable" in error.message and upstream not in error.message
    assert kept.status == "failed" and kept.error is not None and "is unreachable" in kept.error.message
    assert [e["status"] for e in episodes(store)] == ["error"] * 3
