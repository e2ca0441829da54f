from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Sequence
from typing import Any

import pytest

from orchestrion import (
    Budget,
    Completion,
    ConfigError,
    GenerateConfig,
    Message,
    Pool,
    RunContext,
    ScriptedModel,
    ToolRegistry,
    TraceStore,
    solve,
)
from orchestrion._prompts import render
from orchestrion.runtime import BudgetTracker, Harness, Revision
from orchestrion.strategies._proactive_protocol import PausingSubAgent, ProactiveAction, decision_schema
from orchestrion.tools.agents import SolveDirectlyAgent
from orchestrion.trace import Tracer
from tests.helpers import LookupTool, act


def events(store: TraceStore, trace_id: str, kind: str) -> list[dict[str, Any]]:
    store.flush()
    return [json.loads(e.data) for e in store.events(trace_id) if e.kind == kind]


def team(prompt: str) -> dict[str, tuple[str, str]]:
    """name -> (state, instruction) from the orchestrator's state prompt."""
    return {n: (s, i) for n, s, i in re.findall(r"^- (a\d+) \[(\w+)\] on .*?: (.*)$", prompt, re.MULTILINE)}


async def test_subagent_gets_missing_tool_and_continues_with_its_history(store: TraceStore) -> None:
    orch = ScriptedModel([
        act(action="delegate_task", instruction="find x", tools=[], step_budget=5),
        act(action="revise_task", target="a1", scope="keep", tools=["lookup"], context="x is a letter"),
        act(action="complete", answer="x is found"),
    ], name="orch")
    worker = ScriptedModel([
        act(action="tool", tool="lookup", input="x"),  # not in its harness yet
        act(action="revise", status="blocked", request="please add the lookup tool",
            evidence="lookup is not available"),
        act(action="tool", tool="lookup", input="x"),
        act(action="finish", answer="x is found", evidence="found:x"),
    ], name="w")
    res = await solve("find x", strategy="proactive",
                      pool=Pool.from_models([orch, worker], orchestrator="orch", executor="w"),
                      tools=ToolRegistry([LookupTool()]), store=store)
    assert res.status == "ok" and res.answer == "x is found"
    assert res.meta["stop_reason"] == "complete" and res.meta["subagents"] == 1 and res.meta["revisions"] == 1
    # the orchestrator saw the request with its evidence
    second = orch.calls[1][-1]["content"]
    assert (
        "Sub-agent a1 paused" in second
        and "please add the lookup tool" in second
        and "lookup is not available" in second
    )
    # same sub-agent: its later prompt starts with its earlier steps, then the revision note
    before, after = worker.calls[1], worker.calls[3]
    assert after[1:len(before) - 1] == before[1:-1]  # (the last message seen carried the schema suffix)
    assert before[-1]["content"].startswith(after[len(before) - 1]["content"])
    assert any(m["content"].startswith("Revision from the orchestrator") and "lookup" in m["content"] for m in after)
    assert any(m["content"].startswith("Result of lookup: status=OK found:x") for m in after)
    assert "x is a letter" in after[0]["content"] and "lookup(" in after[0]["content"]
    assert "lookup(" not in before[0]["content"]
    assert len(events(store, res.trace_id, "delegation")) == 1
    [rev] = events(store, res.trace_id, "revision")
    assert rev["agent"] == "a1" and rev["add_tools"] == ["lookup"]


async def test_executor_replacement_moves_the_same_subagent_to_another_model(store: TraceStore) -> None:
    orch = ScriptedModel([
        act(action="delegate_task", instruction="prove it", model="small"),
        act(action="revise_task", target="a1", scope="reduce", instruction="prove only the first half",
            executor="replace", model="big"),
        act(action="complete", answer="first half done"),
    ], name="orch")
    small = ScriptedModel([act(action="stop", status="too hard", evidence="needs a bigger model")], name="small")
    big = ScriptedModel([act(action="finish", answer="first half done")], name="big")
    res = await solve("prove it", strategy="proactive", pool=Pool.from_models([orch, small, big], orchestrator="orch"),
                      tools=ToolRegistry([]), store=store)
    assert res.answer == "first half done"  # supported by big's result: kept
    assert len(small.calls) == 1 and len(big.calls) == 1
    seen = big.calls[0]
    assert "prove only the first half" in seen[0]["content"]
    assert any("too hard" in m["content"] for m in seen if m["role"] == "assistant")  # small's step is in its history
    assert any("you now run on model big" in m["content"] for m in seen)
    [rev] = events(store, res.trace_id, "revision")
    assert rev["executor"] == "replace" and rev["model"] == "big" and rev["scope"] == "reduce"
    finish = [m for m in events(store, res.trace_id, "subagent_message") if m["kind"] == "finish"]
    assert finish[0]["agent"] == "a1" and finish[0]["answer"] == "first half done"


async def test_max_subagents_ends_cleanly_and_synthesizes(store: TraceStore) -> None:
    schemas: list[dict[str, Any]] = []

    def orch_reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is None:
            return "synth"
        schemas.append(config.json_schema)
        return act(action="delegate_task", instruction="try")

    orch = ScriptedModel(orch_reply, name="orch")
    worker = ScriptedModel([act(action="finish", answer="partial")], name="w")
    res = await solve("q", strategy="proactive",
                      pool=Pool.from_models([orch, worker], orchestrator="orch", executor="w"),
                      tools=ToolRegistry([]), store=store, options={"max_subagents": 2})
    assert res.status == "ok" and res.answer == "synth"
    assert res.meta["subagents"] == 2 and res.meta["stop_reason"] == "max_subagents"
    assert res.meta["synthesized"] is True
    # once the limit was reached, delegate_task was no longer offered to a constrained decoder
    assert "delegate_task" in schemas[0]["properties"]["action"]["enum"]
    assert schemas[2]["properties"]["action"]["enum"] == ["revise_task", "complete"]
    assert [e["limit"] for e in events(store, res.trace_id, "limit")] == ["max_subagents"]
    assert "partial" in orch.calls[-1][-1]["content"]  # the synthesis saw the reports


async def test_step_limits_cap_each_subagent_and_the_total(store: TraceStore) -> None:
    orch = ScriptedModel(lambda m, c: "synth" if c.json_schema is None else act(action="delegate_task", step_budget=10),
                         name="orch")
    n = iter(range(1000))
    worker = ScriptedModel(lambda m, c: act(action="tool", tool="lookup", input=str(next(n))), name="w")
    res = await solve("q", strategy="proactive",
                      pool=Pool.from_models([orch, worker], orchestrator="orch", executor="w"),
                      tools=ToolRegistry([LookupTool()]), store=store,
                      options={"max_steps": 5, "subagent_steps": 3, "max_fruitless": 0})
    assert len(worker.calls) == 5 and res.meta["steps"] == 5
    assert [d["step_budget"] for d in events(store, res.trace_id, "delegation")] == [3, 2]
    assert res.meta["stop_reason"] == "max_steps" and res.meta["agents"] == {"a1": "exhausted", "a2": "exhausted"}
    assert res.answer == "synth"


async def test_budget_revision_grants_steps_up_to_the_per_subagent_cap(store: TraceStore) -> None:
    orch = ScriptedModel([
        act(action="delegate_task", instruction="count", tools=["lookup"], step_budget=2),
        act(action="revise_task", target="a1", step_budget=5),
        act(action="complete", answer="found:3"),
    ], name="orch")
    n = iter(range(1000))
    worker = ScriptedModel(lambda m, c: act(action="tool", tool="lookup", input=str(next(n))), name="w")
    res = await solve("q", strategy="proactive",
                      pool=Pool.from_models([orch, worker], orchestrator="orch", executor="w"),
                      tools=ToolRegistry([LookupTool()]), store=store, options={"subagent_steps": 4})
    assert res.answer == "found:3" and len(worker.calls) == 4 and res.meta["steps"] == 4
    [rev] = events(store, res.trace_id, "revision")
    assert rev["add_steps"] == 2  # 5 asked, capped at subagent_steps=4 in all
    assert any("2 more steps granted" in m["content"] for m in worker.calls[2])
    assert any(m["content"].startswith("Result of lookup: status=OK found:1") for m in worker.calls[2])


@pytest.mark.timeout(30)
async def test_orchestrator_that_never_completes_still_yields_an_answer(store: TraceStore) -> None:
    def orch_reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is None:
            return "synthesized answer"
        if "a1" not in team(messages[-1]["content"]):
            return act(action="delegate_task", instruction="dig")
        return act(action="revise_task", target="a1", context="keep digging")

    orch = ScriptedModel(orch_reply, name="orch")
    worker = ScriptedModel([act(action="revise", status="stuck", request="need more hints", evidence="nothing yet")],
                           name="w")
    res = await solve("q", strategy="proactive",
                      pool=Pool.from_models([orch, worker], orchestrator="orch", executor="w"),
                      tools=ToolRegistry([]), store=store, options={"max_decisions": 4})
    assert res.status == "ok" and res.answer == "synthesized answer"
    assert res.meta["stop_reason"] == "max_decisions" and res.meta["decisions"] == 4 and res.meta["revisions"] == 3
    # the sub-agent only asked for help: no result, so the answer is direct's on the synthesizer
    assert orch.calls[-1][-1]["content"] == render("direct", task="q")
    ep = store.episode(res.trace_id)
    assert ep is not None and ep.finished == 1


async def test_invalid_decisions_fall_back_to_delegating_the_whole_task(store: TraceStore) -> None:
    orch = ScriptedModel(lambda m, c: "synth from 15" if c.json_schema is None else "I am not JSON", name="orch")
    worker = ScriptedModel([act(action="finish", answer="15", evidence="7+8")], name="w")
    res = await solve("What is 7+8?", strategy="proactive",
                      pool=Pool.from_models([orch, worker], orchestrator="orch", executor="w"),
                      tools=ToolRegistry([LookupTool()]), store=store)
    assert res.answer == "synth from 15"
    assert res.meta["stop_reason"] == "invalid_decisions" and res.meta["invalid_decisions"] == 4
    [d] = events(store, res.trace_id, "delegation")
    assert d["fallback"] is True and d["instruction"] == "What is 7+8?" and d["tools"] == ["lookup"]
    assert "15" in orch.calls[-1][-1]["content"]
    assert [r.valid for r in store.decisions(res.trace_id) if r.schema_name == "ProactiveAction"] == [0] * 12


async def test_delegating_while_one_waits_supersedes_it_when_serial(store: TraceStore) -> None:
    orch = ScriptedModel([act(action="delegate_task", instruction="one"), act(action="delegate_task",
                                                                              instruction="two"),
                          act(action="complete", answer="ok")], name="orch")
    worker = ScriptedModel([act(action="revise", request="help"), act(action="finish", answer="done")], name="w")
    res = await solve("q", strategy="proactive",
                      pool=Pool.from_models([orch, worker], orchestrator="orch", executor="w"),
                      tools=ToolRegistry([]), store=store)
    assert res.meta["agents"] == {"a1": "removed", "a2": "done"}
    [end] = events(store, res.trace_id, "subagent_end")
    assert end["agent"] == "a1" and "superseded" in end["reason"]


async def test_episode_budget_stop_cancels_workers_and_keeps_the_trace(store: TraceStore) -> None:
    orch = ScriptedModel([act(action="delegate_task", instruction="loop")], name="orch")
    n = iter(range(1000))
    worker = ScriptedModel(lambda m, c: act(action="tool", tool="lookup", input=str(next(n))), name="w")
    res = await solve("q", strategy="proactive",
                      pool=Pool.from_models([orch, worker], orchestrator="orch", executor="w"),
                      tools=ToolRegistry([LookupTool()]), store=store, budget=Budget(steps=7))
    assert res.status == "budget_exceeded" and "steps" in (res.error or "")
    ep = store.episode(res.trace_id)
    assert ep is not None and ep.finished == 1 and ep.status == "budget_exceeded"
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("proactive:") and not t.done()]


class TimedModel(ScriptedModel):
    """Records (assignment tag, start, end) for every call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.windows: list[tuple[str, float, float]] = []

    async def complete(self, messages: Sequence[Message], config: GenerateConfig) -> Completion:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        out = await super().complete(messages, config)
        tag = "alpha" if "alpha" in messages[0]["content"] else "beta" if "beta" in messages[0]["content"] else "?"
        self.windows.append((tag, t0, loop.time()))
        return out


def worker_reply(messages: Sequence[Message], config: GenerateConfig) -> str:
    """Asks for its key once, then finishes with the key found in its own context."""
    system = messages[0]["content"]
    if not any(m["content"].startswith("Revision from the orchestrator") for m in messages):
        return act(action="revise", status="need key", request="send my key", evidence="no key in context")
    key = re.search(r"KEY=(\S+)", system)
    return act(action="finish", answer=key.group(1) if key else "no key", evidence="from context")


def parallel_orchestrator(messages: Sequence[Message], config: GenerateConfig) -> str:
    if config.json_schema is None:
        return "synth"
    prompt = messages[-1]["content"]
    agents = team(prompt)
    paused = re.search(r"Sub-agent (a\d+) paused", prompt)
    if paused:
        name = paused.group(1)
        kind = agents[name][1].split()[0]
        return act(action="revise_task", target=name, context=f"KEY={kind}-key")
    if "a1" not in agents:
        return act(action="delegate_task", instruction="alpha task", model="fast")
    if "a2" not in agents:
        return act(action="delegate_task", instruction="beta task", model="slow")
    if all(state == "done" for state, _ in agents.values()):
        return act(action="complete", answer="beta-key")
    return act(action="wait")


async def _run_pair(store: TraceStore, options: dict[str, Any]) -> tuple[Any, TimedModel, TimedModel, TimedModel]:
    orch = TimedModel(parallel_orchestrator, name="orch")
    fast = TimedModel(worker_reply, name="fast", delay_s=0.05)
    slow = TimedModel(worker_reply, name="slow", delay_s=0.5)
    res = await solve("two things", strategy="proactive",
                      pool=Pool.from_models([orch, fast, slow], orchestrator="orch"),
                      tools=ToolRegistry([]), store=store, options=options)
    return res, orch, fast, slow


async def test_max_active_two_overlaps_and_routes_each_revision_to_its_subagent(store: TraceStore) -> None:
    res, _, fast, slow = await _run_pair(store, {"max_active": 2})
    assert res.answer == "beta-key" and res.meta["revisions"] == 2
    alpha = [(a, b) for tag, a, b in fast.windows if tag == "alpha"]
    beta = [(a, b) for tag, a, b in slow.windows if tag == "beta"]
    assert len(alpha) == 2 and len(beta) == 2
    # alpha asked, got its revision and finished while beta's first step was still running
    assert beta[0][0] < alpha[-1][1] < beta[0][1]
    finished = {m["agent"]: m["answer"] for m in events(store, res.trace_id,
                                                        "subagent_message") if m["kind"] == "finish"}
    assert finished == {"a1": "alpha-key", "a2": "beta-key"}
    assert all("beta-key" not in m["content"] for call in fast.calls for m in call)
    assert all("alpha-key" not in m["content"] for call in slow.calls for m in call)
    revisions = {e["agent"]: e["add_context"] for e in events(store, res.trace_id, "revision")}
    assert revisions == {"a1": "KEY=alpha-key", "a2": "KEY=beta-key"}


async def test_default_max_active_one_runs_subagents_one_after_another(store: TraceStore) -> None:
    res, _, fast, slow = await _run_pair(store, {})
    assert res.answer == "beta-key"
    windows = sorted([(a, b) for _, a, b in fast.windows + slow.windows])
    assert all(nxt[0] >= prev[1] for prev, nxt in itertools.pairwise(windows))
    assert res.meta["agents"] == {"a1": "done", "a2": "done"}


def test_decision_schema_pins_names_and_only_requires_action() -> None:
    schema = decision_schema(["revise_task", "complete"], ["a2"], ["m1", "m2"], ["calculator"])
    props = schema["properties"]
    assert schema["required"] == ["action"]
    assert props["action"] == {"enum": ["revise_task", "complete"]}
    assert props["target"] == {"enum": ["a2"]} and props["model"] == {"enum": ["m1", "m2"]}
    assert props["tools"]["items"] == {"enum": ["calculator"]}
    bare = decision_schema(["delegate_task", "complete"], [], ["m1"], [])
    assert not {"target", "scope", "tools", "state"} & set(bare["properties"])
    assert ProactiveAction.model_validate({"action": "complete"}).answer is None


async def test_a_stuck_agent_pauses_on_repeats_and_on_invalid_output_read_from_its_step_log(
    store: TraceStore,
) -> None:
    same = act(action="tool", tool="lookup", input="x")
    worker = ScriptedModel([same, same, same, same, same, "not json at all"] + ["still not json"] * 6, name="w")
    ctx = RunContext(Pool.from_models([worker]), ToolRegistry([LookupTool()]), Tracer(store, "ep"), BudgetTracker())
    agent = PausingSubAgent(ctx, Harness(instruction="find x", model="w", tools=["lookup"], step_budget=20),
                            name="a1", stall=3)
    report = await agent.run()
    assert report.kind == "stop" and report.status.startswith("no progress") and agent.steps_used == 3
    assert [s.kind for s in agent.log] == ["action", "tool_result"] * 3
    # a revision resets the count: two more repeats are not enough to pause again
    agent.revise(Revision(add_context="x is a letter"))
    report = await agent.run()
    assert agent.steps_used >= 6 and report.kind == "stop"
    assert report.status == "no valid action after repairs" and "not json" in report.evidence
    kinds = [s.kind for s in agent.log]
    assert kinds[6] == "revision" and kinds[-1] == "invalid"


async def test_a_complete_answer_no_result_supports_is_recorded_and_replaced(store: TraceStore) -> None:
    """The issue's case: the calculator failed, and the orchestrator completed with a number of its own."""
    orch = ScriptedModel(lambda m, c: "Answer: 309,357" if c.json_schema is None else next(steps), name="orch")
    steps = iter([act(action="delegate_task", instruction="add them", tools=["lookup"]),
                  act(action="complete", answer="342168")])
    worker = ScriptedModel([act(action="tool", tool="lookup", input="x"), act(action="finish", answer="309357")],
                           name="w")
    res = await solve("Compute 123*456 + 789*321.", strategy="proactive",
                      pool=Pool.from_models([orch, worker], orchestrator="orch", executor="w"),
                      tools=ToolRegistry([LookupTool()]), store=store)
    assert res.answer == "Answer: 309,357"  # synthesised from the results, which support it (the sub-agent's 309357)
    [unsupported] = events(store, res.trace_id, "unsupported_answer")
    assert unsupported["answer"] == "342168" and unsupported["reason"] == "no result supports it"


async def test_solve_directly_is_an_orchestrator_action_whose_answer_is_a_result(store: TraceStore) -> None:
    orch = ScriptedModel([act(action="solve_directly", model="big"), act(action="complete", answer="Paris")],
                         name="orch")
    big = ScriptedModel(["Answer: Paris"], name="big")
    res = await solve("Capital of France?", strategy="proactive", pool=Pool.from_models([orch, big]),
                      tools=ToolRegistry([SolveDirectlyAgent()]), store=store)
    assert res.answer == "Paris" and res.meta["solved_directly"] == 1
    assert big.calls[0][-1]["content"] == render("direct", task="Capital of France?")


@pytest.mark.parametrize(("options", "message"), [
    ({"max_active": 0}, "option 'max_active' = 0"),
    ({"max_invalid": 0}, "option 'max_invalid' = 0"),
    ({"stall_steps": -1}, "option 'stall_steps' = -1"),
    ({"decision_tokens": 0}, "option 'decision_tokens' = 0"),
    ({"max_steps": 0}, "option 'max_steps' = 0"),
    ({"max_subagents": 0}, "option 'max_subagents' = 0"),
    ({"subagent_steps": 0}, "option 'subagent_steps' = 0"),
    ({"max_decisions": 0}, "option 'max_decisions' = 0"),
    ({"max_fruitless": -1}, "option 'max_fruitless' = -1"),
    ({"worker_model": "bogus"}, "option 'worker_model' = 'bogus' is not a model of the pool"),
])
async def test_bad_options_are_refused_before_the_episode(store: TraceStore, options: dict[str, Any],
                                                          message: str) -> None:
    # each refused by its Field or the pool check, as para's are: no clamp, no episode, no model call
    orch, worker = ScriptedModel([act(action="complete", answer="x")], name="orch"), ScriptedModel(["x"], name="w")
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        await solve("q", strategy="proactive", pool=Pool.from_models([orch, worker]), store=store, options=options)
    assert "\n" not in str(caught.value)
    assert "its models: orch, w" in str(caught.value) or "worker_model" not in message
    assert store.episodes() == [] and not orch.calls and not worker.calls


async def test_the_worker_model_option_names_the_sub_agents_model(store: TraceStore) -> None:
    orch = ScriptedModel([act(action="delegate_task", instruction="do it", tools=[], step_budget=2),
                          act(action="complete", answer="done")], name="orch")
    worker = ScriptedModel([act(action="finish", answer="42")], name="w")
    res = await solve("q", strategy="proactive", pool=Pool.from_models([orch, worker]), store=store,
                      options={"worker_model": "w"})
    assert res.status == "ok" and worker.calls
    [delegation] = events(store, res.trace_id, "delegation")
    assert delegation["model"] == "w"
