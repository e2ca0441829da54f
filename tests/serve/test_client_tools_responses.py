"""Client tools through `POST /v1/responses`: function tools give ``function_call`` output items,
and ``function_call_output`` input items continue the same episode (the official openai client,
streamed and not, and an Agents SDK ``OpenAIResponsesModel`` agent)."""

from __future__ import annotations

import json

import openai
import pytest

from orchestrion import TraceStore
from tests.serve.test_client_tools import ADD, ANSWER, CALL, PARA_FINAL, Scripted, run_sdk_agent
from tests.serve.test_server import client, episodes, ext, serving

FLAT_ADD = {"type": "function", "name": "add", "description": "adds two integers",
            "parameters": ADD["function"]["parameters"]}


def test_responses_function_call_items_then_their_outputs_continue_the_episode(store: TraceStore) -> None:
    model = Scripted([CALL, ANSWER])
    with serving(model.pool(), store) as url:
        c = client(url)
        first = c.responses.create(model="orchestrion/direct", input="What is 2+3?",
                                   tools=[FLAT_ADD])  # type: ignore[list-item]
        [item] = first.output
        assert first.status == "completed" and item.type == "function_call"
        assert item.call_id.startswith("call_") and item.name == "add"
        assert json.loads(item.arguments) == {"a": 2, "b": 3}
        second = c.responses.create(model="orchestrion/direct", tools=[FLAT_ADD],  # type: ignore[list-item]
                                    input=[{"role": "user", "content": "What is 2+3?"}, item.model_dump(),
                                           {"type": "function_call_output", "call_id": item.call_id, "output": "5"}])
        with pytest.raises(openai.BadRequestError) as unknown:
            c.responses.create(model="orchestrion/direct", input=[
                {"role": "user", "content": "What is 2+3?"},
                {"type": "function_call_output", "call_id": "call_nowhere", "output": "5"}])
    assert second.output_text == "2+3 is 5" and ext(second)["trace_id"] == ext(first)["trace_id"]
    [ep] = episodes(store)
    assert ep["status"] == "ok"
    assert unknown.value.param == "input.1.call_id"


def test_responses_stream_sends_the_function_call_items(store: TraceStore) -> None:
    model = Scripted([CALL, ANSWER])
    with serving(model.pool(), store) as url:
        c = client(url)
        with c.responses.stream(model="orchestrion/direct", input="What is 2+3?",
                                tools=[FLAT_ADD]) as stream:  # type: ignore[list-item]
            kinds = [e.type for e in stream]
            first = stream.get_final_response()
        [item] = first.output
        assert item.type == "function_call" and json.loads(item.arguments) == {"a": 2, "b": 3}
        assert kinds[-5:] == ["response.output_item.added", "response.function_call_arguments.delta",
                              "response.function_call_arguments.done", "response.output_item.done",
                              "response.completed"]
        with c.responses.stream(model="orchestrion/direct", tools=[FLAT_ADD],  # type: ignore[list-item]
                                input=[{"role": "user", "content": "What is 2+3?"}, item.model_dump(),
                                       {"type": "function_call_output", "call_id": item.call_id,
                                        "output": "5"}]) as stream:
            text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
    assert text == "2+3 is 5"
    assert [e["status"] for e in episodes(store)] == ["ok"]


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_agents_sdk_responses_agent_on_para_calls_its_function_tool(store: TraceStore,
                                                                            streamed: bool) -> None:
    one = json.dumps({"thought": "add", "calls": [{"tool": "add", "args": {"a": 2, "b": 3}}], "final": False})
    model = Scripted([one, PARA_FINAL], plain="5")
    called, output = await run_sdk_agent(model.pool(), store, "para", "OpenAIResponsesModel", streamed)
    assert called == [(2, 3)] and output == "5"
    [ep] = episodes(store)
    assert ep["status"] == "ok" and ep["strategy"] == "para"
