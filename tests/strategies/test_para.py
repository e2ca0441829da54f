from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from orchestrion import (
    Budget,
    ConfigError,
    GenerateConfig,
    Message,
    Pool,
    ScriptedModel,
    ToolRegistry,
    TraceStore,
    solve,
)
from orchestrion.models.cost import Price
from orchestrion.tools.agents import agent_tools
from tests.helpers import CrashTool, SlowTool


def action(calls: list[dict[str, Any]], final: bool = False) -> str:
    return json.dumps({"thought": "t", "calls": calls, "final": final})


def overlapping(spans: list[tuple[float, float]]) -> bool:
    spans = sorted(spans)
    return all(b[0] < a[1] for a, b in zip(spans, spans[1:]))


async def test_calls_of_one_round_overlap_in_time(store: TraceStore) -> None:
    slow = SlowTool(0.3)
    orch = ScriptedModel([action([{"tool": "slow", "input": str(i)} for i in range(4)]), action([], True), "answer: 4"],
                         name="orch")
    res = await solve("q", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([slow]), store=store)
    assert res.status == "ok" and res.answer == "answer: 4"
    assert len(slow.spans) == 4 and overlapping(slow.spans)
    # the trace shows the same overlap
    tools = [s for s in store.spans(res.trace_id) if s.kind == "tool"]
    assert len(tools) == 4
    assert max(t.started for t in tools) < min(t.ended for t in tools)


async def test_serial_variant_does_not_overlap(store: TraceStore) -> None:
    slow = SlowTool(0.05)
    orch = ScriptedModel([action([{"tool": "slow", "input": str(i)} for i in range(3)]), action([], True), "x"],
                         name="orch")
    await solve("q", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([slow]), store=store,
                options={"max_parallel": 1})
    spans = sorted(slow.spans)
    assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:]))


async def test_at_most_max_calls_per_round_and_rounds_capped(store: TraceStore) -> None:
    slow = SlowTool(0.0)
    # the scripted orchestrator never says final; rounds stop at max_rounds=3, 2 calls per round
    n = iter(range(100))
    orch = ScriptedModel(lambda m, c: "final" if c.json_schema is None else action(
        [{"tool": "slow", "input": f"x{next(n)}"} for _ in range(2)]), name="orch")
    res = await solve("q", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([slow]), store=store,
                      options={"max_rounds": 3, "max_calls": 2})
    assert len(slow.spans) == 6
    assert res.meta["rounds"] == 3
    assert res.answer == "final"


async def test_max_calls_is_the_actions_limit_six_calls_run_in_one_round(store: TraceStore) -> None:
    # the limit of the action schema is the option, not the paper's 4: six calls validate and run together
    slow = SlowTool(0.2)
    decisions = [action([{"tool": "slow", "input": str(i)} for i in range(6)]), action([], True)]
    schemas: list[dict[str, Any]] = []

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is None:
            return "answer: 6"
        schemas.append(config.json_schema)
        return decisions.pop(0)

    orch = ScriptedModel(reply, name="orch")
    res = await solve("q", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([slow]), store=store,
                      options={"max_calls": 6})
    assert res.status == "ok" and res.meta["calls"] == 6 and res.meta["invalid_decisions"] == 0
    assert sorted(slow.windows) == [str(i) for i in range(6)] and overlapping(slow.spans)
    first = store.decisions(res.trace_id)[0]
    assert first.valid and first.schema_name == "ParaAction"
    assert schemas[0]["properties"]["calls"]["maxItems"] == 6  # what a constrained decoder is held to


async def test_an_action_over_max_calls_is_invalid_and_repaired(store: TraceStore) -> None:
    slow = SlowTool(0.0)
    three = action([{"tool": "slow", "input": str(i)} for i in range(3)])
    two = action([{"tool": "slow", "input": str(i)} for i in range(2)])
    orch = ScriptedModel([three, two, action([], True), "done"], name="orch")
    res = await solve("q", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([slow]), store=store,
                      options={"max_calls": 2})
    decisions = store.decisions(res.trace_id)
    assert [d.valid for d in decisions][:2] == [False, True] and "at most 2 items" in (decisions[0].error or "")
    assert len(slow.spans) == 2 and res.meta["calls"] == 2


@pytest.mark.parametrize("value", [0, 65])
async def test_max_calls_out_of_range_is_refused_before_the_episode(store: TraceStore, value: int) -> None:
    orch = ScriptedModel(["x"], name="orch")
    with pytest.raises(ConfigError, match="option 'max_calls'"):
        await solve("q", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([]), store=store,
                    options={"max_calls": value})
    assert orch.calls == [] and store.episodes() == []


async def test_failures_become_statuses_fed_back(store: TraceStore) -> None:
    orch = ScriptedModel([
        action([{"tool": "crash", "input": "a"}, {"tool": "nosuch", "input": "b"}, {"tool": "slow",
                                                                                    "args": {"wrong": 1}}]),
        action([], True),
        "done",
    ], name="orch")
    res = await solve("q", strategy="para", pool=Pool.from_models([orch]),
                      tools=ToolRegistry([SlowTool(0), CrashTool("disk on fire")]), store=store)
    assert res.status == "ok"
    second_prompt = orch.calls[1][-1]["content"]
    assert "status=EXEC_ERROR" in second_prompt and "disk on fire" in second_prompt
    assert "status=NOT_FOUND" in second_prompt
    assert "status=INVALID_ARGS" in second_prompt
    statuses = sorted(s.status for s in store.spans(res.trace_id) if s.kind == "tool")
    assert statuses == ["exec_error", "invalid_args", "not_found"]


async def test_invalid_action_is_recorded_and_repaired(store: TraceStore) -> None:
    orch = ScriptedModel(["I think we should add", '{"calls": "nope"}', action([], True), "ok"], name="orch")
    res = await solve("q", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([]), store=store)
    decisions = store.decisions(res.trace_id)
    assert [d.valid for d in decisions] == [0, 0, 1]
    assert "no JSON" in decisions[0].error
    assert "calls" in decisions[1].error
    # the repair prompt quoted the validation error
    assert "not a valid action" in orch.calls[1][-1]["content"]
    assert res.status == "ok"


async def test_agent_calls_use_the_chosen_model_and_cost_rolls_up(store: TraceStore) -> None:
    orch = ScriptedModel([action([{"tool": "reasoner", "input": "half", "model": "big"}]), action([], True), "42"],
                         name="orch", price=Price(input_per_mtok=1, output_per_mtok=2))
    big = ScriptedModel(["forty two"], name="big", price=Price(input_per_mtok=10, output_per_mtok=20))
    res = await solve("q", strategy="para", pool=Pool.from_models([orch, big]), tools=ToolRegistry(agent_tools()),
                      store=store)
    assert len(big.calls) == 1
    calls = [s for s in store.spans(res.trace_id) if s.kind == "call"]
    total = sum(c.cost_usd for c in calls)
    assert res.cost_usd == pytest.approx(total) and total > 0
    ep = store.episode(res.trace_id)
    assert ep is not None and ep.finished == 1 and ep.cost_usd == pytest.approx(total)


async def test_budget_stop_keeps_the_trace(store: TraceStore) -> None:
    n = iter(range(100))  # a new call every round: the orchestrator never stops on its own
    orch = ScriptedModel(lambda m, c: action([{"tool": "slow", "input": f"x{next(n)}"}]), name="orch")
    res = await solve("q", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([SlowTool(0)]),
                      store=store,
                      budget=Budget(steps=5))
    assert res.status == "budget_exceeded"
    assert "steps" in (res.error or "")
    ep = store.episode(res.trace_id)
    assert ep is not None and ep.finished == 1 and ep.status == "budget_exceeded"
    assert len([s for s in store.spans(res.trace_id) if s.kind == "tool"]) >= 1


async def test_wall_budget_stops_a_hanging_model(store: TraceStore) -> None:
    orch = ScriptedModel(["never"], name="orch", delay_s=30)
    res = await solve("q", strategy="direct", pool=Pool.from_models([orch]), tools=ToolRegistry([]), store=store,
                      budget=Budget(wall_s=0.2))
    assert res.status == "budget_exceeded" and res.wall_s < 5
    assert store.episode(res.trace_id).finished == 1  # type: ignore[union-attr]


async def test_a_round_that_only_repeats_calls_ends_the_loop(store: TraceStore) -> None:
    slow = SlowTool(0.0)
    same = {"tool": "slow", "input": "count"}
    orch = ScriptedModel([action([same, same]), action([same, {"tool": "slow", "input": "other"}]), action([same]),
                          "syn"], name="orch")
    res = await solve("q", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([slow]), store=store,
                      options={"max_rounds": 6})
    assert len(slow.spans) == 2  # 'count' once (not twice in round 1, not again in round 2), then 'other'
    assert res.meta["rounds"] == 3 and res.meta["stop"] == "repeated_calls" and res.answer == "syn"
    [event] = [e.data_value() for e in store.events(res.trace_id) if e.kind == "repeated_calls"]
    assert event["round"] == 3


async def test_calls_sent_with_final_run_then_stop(store: TraceStore) -> None:
    slow = SlowTool(0.0)
    orch = ScriptedModel([action([{"tool": "slow", "input": "a"}, {"tool": "slow", "input": "b"}], final=True), "syn"],
                         name="orch")
    res = await solve("q", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([slow]), store=store)
    assert len(slow.spans) == 2 and res.meta["rounds"] == 1 and res.answer == "syn"
    assert "did a" in orch.calls[-1][-1]["content"]  # the synthesis saw the results


async def test_answer_meta_is_stored_with_the_episode(store: TraceStore) -> None:
    orch = ScriptedModel([action([], True), "syn"], name="orch")
    res = await solve("q", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([]), store=store)
    meta = json.loads(store.episode(res.trace_id).meta)  # type: ignore[union-attr]
    assert meta["result"] == {"rounds": 1, "calls": 0, "invalid_decisions": 0, "stop": "final"}
    assert "options" in meta and "budget" in meta


async def test_a_first_round_with_no_call_and_no_final_is_shown_back_as_invalid(store: TraceStore) -> None:
    from orchestrion.strategies.para import EMPTY_ACTION

    slow = SlowTool(0.0)
    orch = ScriptedModel([action([]), action([{"tool": "slow", "input": "a"}]), action([], True), "syn"], name="orch")
    res = await solve("q", strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([slow]), store=store)
    assert len(slow.spans) == 1 and res.answer == "syn"
    assert res.meta["rounds"] == 3 and res.meta["invalid_decisions"] == 1 and res.meta["stop"] == "final"
    assert EMPTY_ACTION in orch.calls[1][-1]["content"]  # round 2's prompt says why round 1 did nothing
    assert [e.data_value() for e in store.events(res.trace_id) if e.kind == "empty_action"] == [{"round": 1}]
    # once a result exists, an empty reply stops the loop as before, final or not
    again = ScriptedModel([action([{"tool": "slow", "input": "a"}]), action([]), "syn"], name="orch")
    res = await solve("q", strategy="para", pool=Pool.from_models([again]), tools=ToolRegistry([slow]), store=store)
    assert res.meta["rounds"] == 2 and res.meta["stop"] == "final" and res.meta["invalid_decisions"] == 0


async def test_para_stops_after_rounds_in_a_row_without_a_valid_action(store: TraceStore) -> None:
    """Three invalid rounds in a row end the deciding (a valid round in between resets the count)."""
    from orchestrion.tools.calculator import CalculatorTool

    bad = "not an action"
    call = '{"calls": [{"tool": "calculator", "input": "2+2"}], "final": false}'
    # round 1 invalid (3 attempts), round 2 valid, rounds 3-5 invalid -> stop; then the synthesis
    replies = [bad] * 3 + [call] + [bad] * 9 + ["4"]
    model = ScriptedModel(replies, name="m")
    res = await solve("What is 2+2?", strategy="para", pool=Pool.from_models([model]),
                      tools=ToolRegistry([CalculatorTool()]), store=store, options={"max_invalid_rounds": 3})
    assert res.meta["rounds"] == 5 and res.meta["invalid_decisions"] == 4 and res.meta["calls"] == 1
    assert len(model.calls) == len(replies)  # nothing decided after the stop; the last call is the synthesis


async def test_a_program_without_the_tasks_numbers_goes_to_the_coder_with_the_whole_task(store: TraceStore) -> None:
    from orchestrion.strategies.para import uses_task_numbers
    from orchestrion.tools.agents import CoderAgent
    from orchestrion.tools.envelope import ToolResult
    from tests.tools.test_agents import FakePython

    task = "I have a goat, three bears and a fish. How many animals do I have? Also, what is 706 times 280?"
    guess = "len(['goat', 'three bears', 'fish'])"  # the quantities are lost: 3, where the task has 5

    def reply(messages: Any, config: Any) -> str:
        if config.json_schema is not None:  # the orchestrator
            n = sum(1 for m in messages if "Results so far" in m["content"])
            return action([{"tool": "python", "input": guess}, {"tool": "python", "input": "706 * 280"}]) \
                if n == 0 else action([], True)
        if "Python program" in messages[-1]["content"]:  # the coder
            return "```python\nprint(1 + 3 + 1)\n```"
        return "Answer: 5 and 197680"

    fake = FakePython([ToolResult(output="5\n"), ToolResult(output="197680\n")])
    model = ScriptedModel(reply, name="m")
    res = await solve(task, strategy="para", pool=Pool.from_models([model]),
                      tools=ToolRegistry([CoderAgent(), fake]), store=store)
    assert res.status == "ok"
    assert sorted(c.strip() for c in fake.codes) == ["706 * 280", "print(1 + 3 + 1)"]  # the coder ran, not the guess
    coder = [s for s in store.spans(res.trace_id) if s.kind == "agent"]
    assert [s.attrs_value()["args"] for s in coder] == [{"task": task}]
    [event] = [e.data_value() for e in store.events(res.trace_id) if e.kind == "program_to_coder"]
    assert event["code"] == guess and event["round"] == 1
    assert uses_task_numbers("706 * 280", task) and not uses_task_numbers("datetime.now()", task)
    fake_off = FakePython([ToolResult(output="3\n"), ToolResult(output="197680\n")])
    model_off = ScriptedModel(reply, name="m")
    await solve(task, strategy="para", pool=Pool.from_models([model_off]),
                tools=ToolRegistry([CoderAgent(), fake_off]), store=store, options={"programs_by_coder": False})
    assert sorted(c.strip() for c in fake_off.codes) == ["706 * 280", guess]  # off: the program runs as written


async def test_a_round_that_only_recomputes_known_results_ends_the_loop(tmp_path: Any) -> None:
    """The calculator gives 156, then python computes 12*13 again: no third decision is asked for."""
    import json as _json

    from orchestrion import Pool, ScriptedModel, TraceStore, solve
    from orchestrion.tools.defaults import default_tools

    decisions: list[int] = []

    def reply(messages: Any, config: Any) -> str:
        if config.json_schema is None:
            return "Answer: [R1]"
        decisions.append(1)
        calls = ([{"tool": "calculator", "input": "12*13"}] if len(decisions) == 1 else
                 [{"tool": "python", "input": "print(12*13)"}] if len(decisions) == 2 else [])
        return _json.dumps({"calls": calls, "final": False})

    store = TraceStore(tmp_path / "t.db")
    res = await solve("What is 12*13?", strategy="para", pool=Pool.from_models([ScriptedModel(reply, name="m")]),
                      tools=default_tools(), store=store, options={"programs_by_coder": False})
    await store.aflush()
    assert len(decisions) == 2 and res.meta["stop"] == "recomputed" and "156" in res.answer
    assert [e.kind for e in store.events(res.trace_id) if e.kind == "recomputed_results"] == ["recomputed_results"]
    store.close()


async def test_once_results_exist_the_round_prompt_offers_stopping_first(store: TraceStore) -> None:
    """Round 1 reads no stopping line (there is nothing to stop on); every later round does, after its results."""
    from orchestrion.strategies.para import ANSWERED_HINT
    from orchestrion.tools.defaults import default_tools

    prompts: list[str] = []

    def reply(messages: Any, config: Any) -> str:
        if config.json_schema is None:
            return "Answer: 156"
        prompts.append(messages[-1]["content"])
        return action([{"tool": "calculator", "input": "12*13"}] if len(prompts) == 1 else [], final=len(prompts) > 1)

    res = await solve("What is 12*13?", strategy="para", pool=Pool.from_models([ScriptedModel(reply, name="m")]),
                      tools=default_tools(), store=store)
    assert res.status == "ok" and res.meta["stop"] == "final" and len(prompts) == 2
    assert ANSWERED_HINT.strip() not in prompts[0]
    results_at, hint_at = prompts[1].index("Results so far"), prompts[1].index(ANSWERED_HINT.strip())
    assert results_at < prompts[1].index("156") < hint_at
