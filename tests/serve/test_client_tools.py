"""Client tools through `orchestrion serve` (chat completions): the strategy calls a request's
``tools``, the response carries ``tool_calls``, and the client's next request with the ``tool``
messages continues the same episode. On the scripted model (deterministic decisions) and the
official openai client (the wire shape, streamed and not)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from orchestrion import GenerateConfig, Message, Pool, ScriptedModel, TraceStore
from tests.serve.test_server import ASK, client, episodes, ext, post, serving, wait_for

ADD: ChatCompletionToolParam = {"type": "function", "function": {
    "name": "add", "description": "adds two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}
NOW: ChatCompletionToolParam = {"type": "function", "function": {"name": "now", "description": "the time"}}
TOOLS = [ADD, NOW]
CALL = json.dumps({"tool": "add", "arguments": {"a": 2, "b": 3}})
ANSWER = json.dumps({"answer": "2+3 is 5"})


class Scripted:
    """Decisions (constrained calls) from a list, the last repeating; plain calls answer ``plain``.
    Keeps each decision's messages and JSON schema."""

    def __init__(self, decisions: list[str], plain: str = "5") -> None:
        self.decisions = list(decisions)
        self.plain = plain
        self.seen: list[tuple[list[Message], dict[str, Any] | None]] = []

    def __call__(self, messages: Sequence[Message], config: GenerateConfig) -> str:
        self.seen.append((list(messages), config.json_schema))
        if config.json_schema is None:
            return self.plain
        return self.decisions.pop(0) if len(self.decisions) > 1 else self.decisions[0]

    def pool(self) -> Pool:
        return Pool.from_models([ScriptedModel(self)])


def send_result(c: openai.OpenAI, model: str, first: Any, call_id: str, result: str) -> Any:
    """The client's next request: the conversation, the assistant's tool call, and its result."""
    return c.chat.completions.create(model=model, tools=TOOLS, messages=[
        *ASK, first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call_id, "content": result}])


def spans(store: TraceStore, trace_id: str, kind: str) -> list[dict[str, Any]]:
    return store.query("SELECT * FROM spans WHERE episode_id = ? AND kind = ? ORDER BY started", (trace_id, kind))


def test_a_tool_call_then_its_result_continue_one_episode(store: TraceStore) -> None:
    model = Scripted([CALL, ANSWER])
    with serving(model.pool(), store) as url:
        c = client(url)
        first = c.chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS)
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        [call] = choice.message.tool_calls or []
        assert call.id.startswith("call_") and call.type == "function" and call.function.name == "add"
        assert json.loads(call.function.arguments) == {"a": 2, "b": 3}
        assert ext(first)["status"] == "running" and ext(first)["waiting_for"] == [call.id]
        assert first.usage is not None and first.usage.completion_tokens > 0
        messages: list[ChatCompletionMessageParam] = [
            *ASK, choice.message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": call.id, "content": "5"}]
        time.sleep(0.2)  # the wait is measured
        second = c.chat.completions.create(model="orchestrion/direct", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "2+3 is 5" and second.choices[0].finish_reason == "stop"
    trace_id = ext(first)["trace_id"]
    assert ext(second)["trace_id"] == trace_id and ext(second)["status"] == "ok"
    assert len(episodes(store)) == 1  # one episode over both requests
    ep = store.episode(trace_id)
    assert ep is not None and ep.status == "ok" and ep.answer == "2+3 is 5"
    assert second.usage is not None and first.usage is not None
    assert first.usage.total_tokens + second.usage.total_tokens == ep.input_tokens + ep.output_tokens
    # the second decision read the result
    last_messages, schema = model.seen[-1]
    assert schema is not None and "Result of add (status ok): 5" in last_messages[-1]["content"]
    [span] = spans(store, trace_id, "client_tool")
    attrs = json.loads(span["attrs"])
    assert span["name"] == "add" and span["status"] == "ok"
    assert attrs["args"] == {"a": 2, "b": 3} and attrs["output"] == "5" and attrs["call_id"] == call.id
    assert attrs["wait_s"] >= 0.2


def test_the_decision_is_constrained_by_the_tools_schemas(store: TraceStore) -> None:
    model = Scripted([ANSWER])
    with serving(model.pool(), store) as url:
        done = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS)
    assert done.choices[0].message.content == "2+3 is 5" and done.choices[0].finish_reason == "stop"
    [(_, schema)] = model.seen
    assert schema is not None
    branches = schema["anyOf"]
    assert branches[0]["required"] == ["answer"]
    add = branches[1]
    assert add["properties"]["tool"] == {"enum": ["add"]}
    assert add["properties"]["arguments"]["required"] == ["a", "b"]
    assert branches[2]["properties"]["tool"] == {"enum": ["now"]}


def test_invalid_arguments_are_repaired_and_recorded(store: TraceStore) -> None:
    bad = json.dumps({"tool": "add", "arguments": {"a": "two", "b": 3}})
    model = Scripted([bad, CALL])
    with serving(model.pool(), store) as url:
        first = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS)
    [call] = first.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"a": 2, "b": 3}
    rows = store.query("SELECT valid, error FROM decisions ORDER BY seq")
    assert [r["valid"] for r in rows] == [0, 1]
    assert "arguments.a: expected integer" in rows[0]["error"]


@pytest.mark.parametrize(("choice", "branches"), [
    ("required", [["add"], ["now"]]),
    ({"type": "function", "function": {"name": "now"}}, [["now"]]),
])
def test_tool_choice_required_or_named_leaves_no_answer(store: TraceStore, choice: Any,
                                                        branches: list[list[str]]) -> None:
    model = Scripted([json.dumps({"tool": branches[0][0], "arguments": {"a": 1, "b": 1}
                                  if branches[0][0] == "add" else {}})])
    with serving(model.pool(), store) as url:
        done = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS,
                                                   tool_choice=choice)
    assert done.choices[0].finish_reason == "tool_calls"
    [(_, schema)] = model.seen
    assert schema is not None
    found = [b["properties"]["tool"]["enum"] for b in schema.get("anyOf", [schema])]
    assert found == branches


def test_tool_choice_none_answers_without_tools(store: TraceStore) -> None:
    model = Scripted([CALL], plain="five")
    with serving(model.pool(), store) as url:
        done = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS,
                                                   tool_choice="none")
    assert done.choices[0].message.content == "five" and done.choices[0].finish_reason == "stop"
    assert [schema for _, schema in model.seen] == [None]


def test_the_streamed_tool_call_is_sent_as_openai_sends_it(store: TraceStore) -> None:
    model = Scripted([CALL, ANSWER])
    with serving(model.pool(), store) as url:
        c = client(url)
        chunks = list(c.chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS, stream=True,
                                                stream_options={"include_usage": True}))
        calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
        head, args = calls[0][0], calls[1][0]
        assert head.id and head.id.startswith("call_") and head.type == "function" and head.index == 0
        assert head.function is not None and head.function.name == "add" and head.function.arguments == ""
        assert args.id is None and args.function is not None and json.loads(args.function.arguments or "") == {
            "a": 2, "b": 3}
        [last] = [c for c in chunks if c.choices and c.choices[0].finish_reason]
        assert last.choices[0].finish_reason == "tool_calls"
        assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
        messages: list[ChatCompletionMessageParam] = [
            *ASK, {"role": "assistant", "tool_calls": [{"id": head.id, "type": "function",
                                                        "function": {"name": "add", "arguments": '{"a":2,"b":3}'}}]},
            {"role": "tool", "tool_call_id": head.id, "content": "5"}]
        rest = list(c.chat.completions.create(model="orchestrion/direct", messages=messages, tools=TOOLS,
                                              stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in rest if c.choices) == "2+3 is 5"
    assert [c.choices[0].finish_reason for c in rest if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert len(episodes(store)) == 1 and episodes(store)[0]["status"] == "ok"


def test_an_unanswered_call_ends_the_episode_interrupted(store: TraceStore) -> None:
    model = Scripted([CALL])
    with serving(model.pool(), store, client_tool_timeout_s=0.3) as url:
        first = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS)
        trace_id = ext(first)["trace_id"]

        def ended() -> bool:
            ep = store.episode(trace_id)
            return ep is not None and ep.finished == 1
        deadline = time.monotonic() + 10
        while not ended() and time.monotonic() < deadline:
            time.sleep(0.05)
    ep = store.episode(trace_id)
    assert ep is not None and ep.status == "interrupted" and "client tool" in (ep.error or "")
    [span] = spans(store, trace_id, "client_tool")
    assert span["status"] == "timeout"


def test_a_full_server_ends_the_longest_paused_episode_instead_of_refusing(store: TraceStore) -> None:
    """A paused episode computes nothing: a new request on a full server ends the one that has
    waited longest (LangChain's structured output by function calling never sends results)."""
    model = Scripted([CALL])
    with serving(model.pool(), store, max_concurrent=2) as url:
        c = client(url)
        paused = [ext(c.chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS))["trace_id"]
                  for _ in range(2)]
        third = c.chat.completions.create(model="orchestrion/direct", messages=ASK)  # no 429

        def ended() -> Any:
            ep = store.episode(paused[0])
            return ep is not None and ep.finished == 1
        assert wait_for(ended)
        second = store.episode(paused[1])
        assert second is not None and second.status == "running"  # the younger one still waits
    assert third.choices[0].message.content == "5"
    ep = store.episode(paused[0])
    assert ep is not None and ep.status == "interrupted" and "--max-concurrent" in (ep.error or "")
    [span] = spans(store, paused[0], "client_tool")
    assert span["status"] == "timeout"


def test_results_no_episode_waits_for_start_a_new_one_with_them_as_context(store: TraceStore) -> None:
    model = Scripted([ANSWER])
    messages: list[ChatCompletionMessageParam] = [
        *ASK, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_old", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "call_old", "content": "5"}]
    with serving(model.pool(), store) as url:
        done = client(url).chat.completions.create(model="orchestrion/direct", messages=messages, tools=TOOLS)
    assert done.choices[0].message.content == "2+3 is 5"
    prompt = model.seen[0][0][-1]["content"]
    assert 'Assistant called add with {"a": 2, "b": 3}' in prompt and "Tool result (add): 5" in prompt


BAD_REQUESTS: dict[str, tuple[dict[str, Any], str]] = {
    "schema not an object": ({"tools": [{"type": "function", "function": {
        "name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "int"}}}}}]},
        "tools.0.function.parameters.properties.a.type"),
    "arguments not an object": ({"tools": [{"type": "function", "function": {
        "name": "add", "parameters": {"type": "array"}}}]}, "tools.0.function.parameters.type"),
    "bad name": ({"tools": [{"type": "function", "function": {"name": "add two"}}]}, "tools.0.function.name"),
    "no function": ({"tools": [{"type": "function"}]}, "tools.0.function"),
    "a second add": ({"tools": [ADD, ADD]}, "tools.1.function.name"),
    "absent tool named": ({"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "mul"}}},
                          "tool_choice"),
    "required without tools": ({"tool_choice": "required"}, "tool_choice"),
    "unknown tool call id": ({"tools": [ADD], "messages": [
        *ASK, {"role": "tool", "tool_call_id": "call_nowhere", "content": "5"}]}, "messages.1.tool_call_id"),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_tool_input_is_a_one_line_400(store: TraceStore, case: str) -> None:
    extra, param = BAD_REQUESTS[case]
    with serving(Scripted([ANSWER]).pool(), store) as url:
        r = post(url, {"model": "orchestrion/direct", "messages": ASK, **extra})
        with pytest.raises(openai.BadRequestError):
            client(url).chat.completions.create(model="orchestrion/direct", **{"messages": ASK, **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and "\n" not in error["message"] and error["type"] == "invalid_request_error"
    assert episodes(store) == []


def test_trace_show_lists_the_client_tool_span(store: TraceStore) -> None:
    from typer.testing import CliRunner

    from orchestrion.cli import app

    model = Scripted([CALL, ANSWER])
    with serving(model.pool(), store) as url:
        c = client(url)
        first = c.chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS)
        [call] = first.choices[0].message.tool_calls or []
        send_result(c, "orchestrion/direct", first, call.id, "5")
    shown = CliRunner().invoke(app, ["trace", "show", ext(first)["trace_id"], "--db", str(store.path)],
                               env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    [line] = [ln for ln in shown.output.splitlines() if "client_tool" in ln]
    assert f"add [{call.id}]" in line and 'args={"a":2,"b":3}' in line and "→ 5 waited" in line
    assert "status=ok" in line


async def run_sdk_agent(pool: Pool, store: TraceStore, strategy: str, model_class: str,
                        streamed: bool) -> tuple[list[tuple[int, int]], Any]:
    """An Agents SDK agent with one function tool ``add`` on ``orchestrion/<strategy>`` through the SDK's
    ``model_class`` (OpenAIChatCompletionsModel or OpenAIResponsesModel), run to completion: the calls
    the tool got and the agent's final output."""
    agents = pytest.importorskip("agents")
    called: list[tuple[int, int]] = []

    @agents.function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        called.append((a, b))
        return a + b

    agents.set_tracing_disabled(True)  # the SDK would export its own traces to OpenAI's platform
    with serving(pool, store) as url:
        api = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        model = getattr(agents, model_class)(model=f"orchestrion/{strategy}", openai_client=api)
        agent = agents.Agent(name="calc", instructions="Use the tools.", tools=[add], model=model)
        if streamed:
            run = agents.Runner.run_streamed(agent, "What is 2+3?")
            async for _ in run.stream_events():
                pass
            output = run.final_output
        else:
            output = (await agents.Runner.run(agent, "What is 2+3?")).final_output
        await api.close()
    return called, output


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_agents_sdk_agent_calls_its_function_tool_and_finishes(store: TraceStore, streamed: bool) -> None:
    model = Scripted([CALL, json.dumps({"answer": "The sum is 5."})])
    called, output = await run_sdk_agent(model.pool(), store, "direct", "OpenAIChatCompletionsModel", streamed)
    assert called == [(2, 3)] and output == "The sum is 5."
    [ep] = episodes(store)
    assert ep["status"] == "ok"
    [span] = spans(store, ep["id"], "client_tool")
    assert json.loads(span["attrs"])["output"] == "5"


PARA_CALL = json.dumps({"thought": "add", "calls": [{"tool": "add", "args": {"a": 2, "b": 3}},
                                                    {"tool": "calculator", "input": "2*3"}], "final": False})
PARA_FINAL = json.dumps({"thought": "done", "calls": [], "final": True})


def test_para_calls_a_client_tool_beside_its_own_and_goes_on_with_the_result(store: TraceStore) -> None:
    model = Scripted([PARA_CALL, PARA_FINAL], plain="5")
    with serving(model.pool(), store) as url:
        c = client(url)
        first = c.chat.completions.create(model="orchestrion/para", messages=ASK, tools=TOOLS)
        [call] = first.choices[0].message.tool_calls or []
        assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "add"
        assert json.loads(call.function.arguments) == {"a": 2, "b": 3}
        second = send_result(c, "orchestrion/para", first, call.id, "5")
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content == "5"
    [ep] = episodes(store)
    assert ep["status"] == "ok" and ext(second)["trace_id"] == ep["id"]
    # the client tool sat beside the pool's, marked, and its schema constrained the calls
    round_one, schema = next((m, s) for m, s in model.seen if s is not None)
    assert "Client tools" in round_one[-1]["content"] and "- add: adds two integers" in round_one[-1]["content"]
    assert schema is not None
    branches = schema["properties"]["calls"]["items"]["anyOf"]
    assert branches[0] == {"$ref": "#/$defs/Call"} and branches[1]["properties"]["tool"] == {"enum": ["add"]}
    # both calls of round 1 ran, and round 2's decision read both results
    round_two = [m for m, s in model.seen if s is not None][1]
    assert "add <- '{\"a\":2,\"b\":3}' -> status=OK 5" in round_two[-1]["content"]
    assert "calculator <- '2*3' -> status=OK 6" in round_two[-1]["content"]
    kinds = [s["kind"] for s in store.query("SELECT kind FROM spans WHERE episode_id = ? ORDER BY started",
                                            (ep["id"],))]
    assert kinds.count("client_tool") == 1 and kinds.count("tool") == 1 and kinds.count("round") == 2


def test_para_without_parallel_tool_calls_makes_one_client_call_per_round(store: TraceStore) -> None:
    two = json.dumps({"thought": "both", "calls": [{"tool": "add", "args": {"a": 2, "b": 3}},
                                                   {"tool": "now", "args": {}}], "final": False})
    model = Scripted([two, json.dumps({"thought": "one", "calls": [{"tool": "now", "args": {}}], "final": False})])
    with serving(model.pool(), store) as url:
        first = client(url).chat.completions.create(model="orchestrion/para", messages=ASK, tools=TOOLS,
                                                    parallel_tool_calls=False)
    assert [c.function.name for c in first.choices[0].message.tool_calls or []] == ["now"]
    rows = store.query("SELECT valid, error FROM decisions ORDER BY seq")
    assert rows[0]["valid"] == 0 and "one client tool call per round" in rows[0]["error"]


def test_para_may_call_several_client_tools_in_one_round(store: TraceStore) -> None:
    two = json.dumps({"thought": "both", "calls": [{"tool": "add", "args": {"a": 2, "b": 3}},
                                                   {"tool": "now", "args": {}}], "final": False})
    model = Scripted([two, PARA_FINAL])
    with serving(model.pool(), store) as url:
        c = client(url)
        first = c.chat.completions.create(model="orchestrion/para", messages=ASK, tools=TOOLS)
        calls = first.choices[0].message.tool_calls or []
        assert [x.function.name for x in calls] == ["add", "now"]
        second = c.chat.completions.create(model="orchestrion/para", tools=TOOLS, messages=[
            *ASK, first.choices[0].message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": calls[0].id, "content": "5"},
            {"role": "tool", "tool_call_id": calls[1].id, "content": "noon", "status": "error"}])  # type: ignore[misc]
    assert second.choices[0].finish_reason == "stop"
    statuses = [s["status"] for s in store.query("SELECT status FROM spans WHERE kind = 'client_tool' ORDER BY name")]
    assert statuses == ["ok", "exec_error"]


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_agents_sdk_agent_on_para_calls_its_function_tool_and_finishes(store: TraceStore,
                                                                               streamed: bool) -> None:
    one = json.dumps({"thought": "add", "calls": [{"tool": "add", "args": {"a": 2, "b": 3}}], "final": False})
    model = Scripted([one, PARA_FINAL], plain="5")
    called, output = await run_sdk_agent(model.pool(), store, "para", "OpenAIChatCompletionsModel", streamed)
    assert called == [(2, 3)] and output == "5"
    [ep] = episodes(store)
    assert ep["status"] == "ok" and ep["strategy"] == "para"
    [span] = spans(store, ep["id"], "client_tool")
    attrs = json.loads(span["attrs"])
    assert attrs["args"] == {"a": 2, "b": 3} and attrs["output"] == "5" and attrs["wait_s"] >= 0


def test_client_tool_calls_have_per_tool_metrics(store: TraceStore) -> None:
    model = Scripted([CALL, ANSWER])
    with serving(model.pool(), store) as url:
        c = client(url)
        first = c.chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS)
        [call] = first.choices[0].message.tool_calls or []
        send_result(c, "orchestrion/direct", first, call.id, "5")
        text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10).text
    assert 'orchestrion:tool_calls_total{status="ok",strategy="direct",tool="add"} 1.0' in text
    assert 'orchestrion:tool_call_latency_seconds_count{strategy="direct",tool="add"} 1.0' in text


def test_direct_answers_instead_of_repeating_a_call_it_made(store: TraceStore) -> None:
    model = Scripted([CALL, CALL], plain="5")
    with serving(model.pool(), store) as url:
        c = client(url)
        first = c.chat.completions.create(model="orchestrion/direct", messages=ASK, tools=TOOLS)
        [call] = first.choices[0].message.tool_calls or []
        second = send_result(c, "orchestrion/direct", first, call.id, "5")
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content == "5"
    answer_prompt = model.seen[-1][0][-1]["content"]
    assert 'Called add with {"a":2,"b":3}' in answer_prompt and "Result of add (status ok): 5" in answer_prompt
    assert store.query("SELECT kind FROM events WHERE kind = 'repeated_client_call'")
