from __future__ import annotations

from orchestrion import Pool, RunContext, ScriptedModel, ToolRegistry, TraceStore
from orchestrion.runtime import BudgetTracker, Harness, Revision, SubAgent
from orchestrion.trace import Tracer
from tests.helpers import LookupTool, act


def make_ctx(store: TraceStore, *models: ScriptedModel) -> RunContext:
    return RunContext(Pool.from_models(list(models)), ToolRegistry([LookupTool()]), Tracer(store, "ep"),
                      BudgetTracker())


async def test_asks_for_missing_tool_gets_it_and_continues_with_history(store: TraceStore) -> None:
    worker = ScriptedModel([
        act(action="tool", tool="lookup", input="x"),   # not allowed yet
        act(action="revise", status="blocked", request="need the lookup tool", evidence="tool missing"),
        act(action="tool", tool="lookup", input="x"),   # after revision
        act(action="finish", answer="x is found", evidence="found:x"),
    ], name="w")
    ctx = make_ctx(store, worker)
    agent = SubAgent(ctx, Harness(instruction="find x", model="w", tools=[], step_budget=10), name="a1")
    report = await agent.run()
    assert report.kind == "revise" and "lookup" in report.request
    history_before = list(agent.history)
    assert any("not available" in m["content"] for m in history_before)
    agent.revise(Revision(add_tools=["lookup"], add_context="x is a letter"))
    assert agent.harness.tools == ["lookup"]
    report = await agent.run()
    assert report.kind == "finish" and report.answer == "x is found"
    # same agent, earlier steps intact: the history grew, it was not replaced
    assert agent.history[: len(history_before)] == history_before
    assert any(m["content"].startswith("Result of lookup: status=OK found:x") for m in agent.history)
    # the model saw the revision note and the new context in its later prompts
    last_prompt = worker.calls[-1]
    assert "x is a letter" in last_prompt[0]["content"]
    assert any("Revision from the orchestrator" in m["content"] for m in last_prompt)
    store.flush()
    kinds = [e.kind for e in store.events("ep")]
    assert kinds.count("subagent_message") == 2 and "revision" in kinds


async def test_step_budget_ends_with_exhausted_and_revision_adds_steps(store: TraceStore) -> None:
    worker = ScriptedModel([act(action="tool", tool="lookup", input="y")], name="w")
    ctx = make_ctx(store, worker)
    agent = SubAgent(ctx, Harness(instruction="loop", model="w", tools=["lookup"], step_budget=2))
    report = await agent.run()
    assert report.kind == "exhausted" and agent.steps_used == 2
    agent.revise(Revision(add_steps=3))
    report = await agent.run()
    assert report.kind == "exhausted" and agent.steps_used == 5


async def test_executor_replacement_and_scope_change(store: TraceStore) -> None:
    small = ScriptedModel([act(action="stop", status="too hard", evidence="needs a bigger model")], name="small")
    big = ScriptedModel([act(action="finish", answer="done")], name="big")
    ctx = make_ctx(store, small, big)
    agent = SubAgent(ctx, Harness(instruction="prove it", model="small"))
    assert (await agent.run()).kind == "stop"
    agent.revise(Revision(scope="reduce", instruction="prove only the first half", executor="replace", model="big"))
    assert agent.harness.model == "big" and agent.harness.instruction == "prove only the first half"
    assert (await agent.run()).answer == "done"
    assert "prove only the first half" in big.calls[0][0]["content"]


async def test_invalid_actions_do_not_crash(store: TraceStore) -> None:
    worker = ScriptedModel(["garbage"], name="w")
    ctx = make_ctx(store, worker)
    agent = SubAgent(ctx, Harness(instruction="x", model="w", step_budget=2))
    report = await agent.run()
    assert report.kind == "exhausted"
    store.flush()
    assert all(d.valid == 0 for d in store.decisions("ep"))


async def test_long_history_is_windowed_for_the_model_but_kept_whole(store: TraceStore) -> None:
    worker = ScriptedModel([act(action="tool", tool="lookup", input="x" * 500)], name="w")
    ctx = make_ctx(store, worker)
    ctx.pool.specs["w"].context_size = 1024  # about 1,500 characters of history fit
    agent = SubAgent(ctx, Harness(instruction="loop", model="w", tools=["lookup"], step_budget=8))
    await agent.run()
    assert sum(len(m["content"]) for m in agent.history) > 4000  # nothing was dropped from the record
    seen = worker.calls[-1]
    # the decision appends the JSON schema to the last message, so that one is compared by prefix
    assert sum(len(m["content"]) for m in seen[1:-1]) + len(agent.history[-3]["content"]) <= 1024 * 3 * 0.5 + 100
    assert seen[1]["content"] == "Begin." and "earlier messages omitted" in seen[2]["content"]
    # the last call saw the latest result (its own reply and the tool result after it came later)
    assert seen[-1]["content"].startswith(agent.history[-3]["content"])
