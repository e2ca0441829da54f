from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from orchestrion import (
    GenerateConfig,
    Message,
    ModelError,
    ModelUnavailableError,
    Pool,
    ScriptedModel,
    ToolRegistry,
    TraceStore,
    solve,
)
from orchestrion.models.cost import Price
from orchestrion.runtime.context import ORCHESTRATOR_CONFIG
from orchestrion.runtime.plan import PLAN_TOKENS, TASK_MAX
from orchestrion.strategies._uno_pairs import Pair, admissible_pairs, choose_pair, inadmissible_reason, utility
from orchestrion.strategies.uno import DirectPrimitive, UnoStep
from orchestrion.tools.agents import agent_tools
from orchestrion.tools.retrieval import Corpus, RetrievalTool
from orchestrion.trace import SpanRow
from tests.helpers import script

TASK = "What is 7+8?"




def direct(model: str, primitive: str) -> str:
    return json.dumps({"thought": "easy", "mode": "direct", "model": model, "primitive": primitive, "subtasks": []})


def decompose(steps: list[tuple[str, str, str, list[str]]]) -> str:
    subtasks = [{"id": i, "task": f"do {i}", "model": m, "primitive": p, "deps": d} for i, m, p, d in steps]
    return json.dumps({"thought": "split", "mode": "decompose", "model": "x", "primitive": "x", "subtasks": subtasks})


def priced_pool(*models: ScriptedModel, **setup: tuple[int, Price | None]) -> Pool:
    """A pool over scripted models with tiers and prices set per name: name=(tier, price)."""
    pool = Pool.from_models(list(models), orchestrator=models[0].name)
    for name, (tier, price) in setup.items():
        pool.specs[name].tier = tier
        pool.specs[name].price = price
    return pool


SMALL = Price(input_per_mtok=0.1, output_per_mtok=0.4)
BIG = Price(input_per_mtok=10, output_per_mtok=30)


def spans(store: TraceStore, trace_id: str, kind: str) -> list[SpanRow]:
    return [s for s in store.spans(trace_id) if s.kind == kind]


async def test_direct_mode_is_one_decision_and_one_call(store: TraceStore) -> None:
    orch = ScriptedModel(script([direct("orch", "cot")], worker=lambda p: "7 plus 8\n15"), name="orch")
    res = await solve(TASK, strategy="uno", pool=Pool.from_models([orch]), tools=ToolRegistry(agent_tools()),
                      store=store)
    assert res.status == "ok" and res.answer == "7 plus 8\n15"
    assert res.meta["mode"] == "direct" and res.meta["fallback"] is False
    assert res.meta["pairs"] == [{"model": "orch", "primitive": "cot", "status": "ok"}]
    assert len(orch.calls) == 2  # the decision and the reasoner; no synthesis call
    assert "step by step" in orch.calls[1][-1]["content"]
    assert [a.name for a in spans(store, res.trace_id, "agent")] == ["cot on orch"]
    assert not spans(store, res.trace_id, "node")


async def test_decompose_mode_runs_a_plan_on_the_chosen_pairs_then_synthesises(store: TraceStore) -> None:
    def worker(prompt: str) -> str:
        return "final: 15" if prompt.startswith("A team worked") else "R-" + prompt.splitlines()[-1]

    plan = decompose([("a", "orch", "cot", []), ("b", "big", "direct", []), ("c", "big", "cot", ["a", "b"])])
    orch = ScriptedModel(script([plan], worker), name="orch")
    big = ScriptedModel(lambda m, c: worker(m[-1]["content"]), name="big")
    res = await solve(TASK, strategy="uno", pool=Pool.from_models([orch, big], orchestrator="orch"),
                      tools=ToolRegistry(agent_tools()), store=store)
    assert res.status == "ok" and res.answer == "final: 15"
    assert res.meta["mode"] == "decompose"
    assert [(p["id"], p["model"], p["primitive"], p["status"]) for p in res.meta["pairs"]] == [
        ("a", "orch", "cot", "ok"), ("b", "big", "direct", "ok"), ("c", "big", "cot", "ok")]
    assert len(orch.calls) == 3  # decision, subtask a, synthesis
    assert len(big.calls) == 2  # subtasks b and c
    c_prompt = big.calls[1][-1]["content"]
    assert (
        "[a] R-Subtask: do a" in c_prompt
        and "[b] R-Task: do b" in c_prompt
        and "Overall task: What is 7+8?" in c_prompt
    )
    assert sorted(n.name for n in spans(store, res.trace_id, "node")) == ["a", "b", "c"]
    assert len(spans(store, res.trace_id, "agent")) == 3
    assert "[c] do c (ok)" in orch.calls[-1][-1]["content"]


def test_admissibility_excludes_unknown_model_missing_tool_and_over_cap() -> None:
    pool = priced_pool(ScriptedModel(["x"], name="small"), ScriptedModel(["x"], name="big"),
                       ScriptedModel(["x"], name="mystery"),
                       small=(1, SMALL), big=(5, BIG), mystery=(3, None))
    tools = ToolRegistry([*agent_tools(), DirectPrimitive(), RetrievalTool(None)])  # no python, retrieve has no corpus
    assert inadmissible_reason(pool, tools, "ghost", "cot", 0.0, None) == "model 'ghost' is not in the pool"

    pairs, excluded = admissible_pairs(pool, tools, TASK)
    labels = {p.label for p in pairs}
    assert {"small/cot", "big/ensemble", "mystery/direct"} <= labels
    assert excluded["small/code"] == "tool 'python' is not available"
    assert excluded["big/retrieval"] == "tool 'retrieve' is not available (no corpus)"
    assert next(p for p in pairs if p.model == "mystery").est_cost is None  # unknown stays unknown

    capped, excluded = admissible_pairs(pool, tools, TASK, cap=0.01)
    labels = {p.label for p in capped}
    assert {"big/direct", "big/cot", "small/ensemble"} <= labels
    assert "big/ensemble" not in labels and "over the cost cap" in excluded["big/ensemble"]
    assert not any(p.model == "mystery" for p in capped) and "unknown" in excluded["mystery/cot"]

    with_corpus = ToolRegistry([*agent_tools(), RetrievalTool(Corpus([("d1", "seven plus eight")]))])
    assert inadmissible_reason(pool, with_corpus, "small", "retrieval", 0.0, None) is None


async def test_the_decision_schema_and_prompt_offer_only_admissible_pairs(store: TraceStore) -> None:
    seen: list[dict[str, Any]] = []

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is not None:
            seen.append({**config.json_schema, "temperature": config.temperature})
            return direct("small", "cot")
        return "15"

    orch = ScriptedModel(reply, name="small")
    pool = priced_pool(orch, ScriptedModel(["x"], name="big"), small=(1, SMALL), big=(5, BIG))
    res = await solve(TASK, strategy="uno", pool=pool, tools=ToolRegistry(agent_tools()), store=store,
                      options={"max_cost_usd": 0.01, "decision_temperature": 0.2})
    assert res.status == "ok"
    schema = seen[0]
    assert schema["temperature"] == 0.2  # option decision_temperature reaches the decision
    assert schema["properties"]["model"] == {"enum": ["small", "big"]}
    assert schema["properties"]["primitive"] == {"enum": ["direct", "cot", "ensemble"]}  # no python, no retrieve
    assert schema["$defs"]["UnoStep"]["required"] == ["id", "task", "model", "primitive", "deps"]
    prompt = orch.calls[0][0]["content"]
    assert "big (tier 5, $10/$30 per Mtok in/out)" in prompt and "Not allowed: big/ensemble" in prompt


async def test_inadmissible_choice_is_rejected_and_repaired(store: TraceStore) -> None:
    orch = ScriptedModel(script([direct("big", "ensemble"), direct("small", "cot")], lambda p: "15"), name="small")
    pool = priced_pool(orch, ScriptedModel(["x"], name="big"), small=(1, SMALL), big=(5, BIG))
    res = await solve(TASK, strategy="uno", pool=pool, tools=ToolRegistry(agent_tools()), store=store,
                      options={"max_cost_usd": 0.01})
    decisions = store.decisions(res.trace_id)
    assert [d.valid for d in decisions] == [0, 1]
    assert "pair 'big/ensemble' is not admissible" in decisions[0].error
    assert "pair 'big/ensemble' is not admissible" in orch.calls[1][-1]["content"]
    assert res.meta["pairs"][0]["model"] == "small" and res.meta["invalid_decisions"] == 1


async def test_bad_decompositions_are_rejected_with_the_reason(store: TraceStore) -> None:
    none = decompose([])  # (one subtask is read as the direct mode on its pair)
    loop = decompose([("a", "m", "cot", ["b"]), ("b", "m", "cot", ["a"])])
    good = decompose([("a", "m", "cot", []), ("b", "m", "cot", ["a"])])
    orch = ScriptedModel(script([none, loop, good], lambda p: "ok"), name="m")
    res = await solve(TASK, strategy="uno", pool=Pool.from_models([orch]), tools=ToolRegistry(agent_tools()),
                      store=store)
    errors = [d.error for d in store.decisions(res.trace_id)]
    assert "decompose needs 2 to 6 subtasks, got 0" in errors[0]
    assert "cycle among subtasks: a, b" in errors[1]
    assert errors[2] is None and res.meta["mode"] == "decompose"


def test_utility_worked_examples() -> None:
    assert utility(0.8, 0.01, 10) == pytest.approx(0.7)
    assert utility(0.6, 0.0, 100) == pytest.approx(0.6)
    assert utility(0.9, None, 10) is None  # unknown cost is not 0

    small = Pair("small", "direct", 1, 0.35, 0.0001)
    big = Pair("big", "ensemble", 5, 0.9, 0.03)
    assert choose_pair([small, big], 0) is big  # cost ignored: the accurate pair
    assert choose_pair([small, big], 10) is big  # 0.9 - 0.3 = 0.6 > 0.35 - 0.001
    assert choose_pair([small, big], 30) is small  # 0.9 - 0.9 = 0 < 0.347
    mystery = Pair("mystery", "ensemble", 5, 0.99, None)
    assert choose_pair([mystery, small, big], 0) is big  # a known-priced pair beats an unknown one
    other = Pair("other", "cot", 3, 0.6, None)
    assert choose_pair([other, mystery], 10) is mystery  # only unknown costs: the best accuracy prior
    a, b = Pair("a", "cot", 2, 0.75, 0.25), Pair("b", "cot", 2, 0.625, 0.125)
    assert choose_pair([a, b], 1) is b  # equal utility 0.5: the cheaper one
    assert choose_pair([], 1) is None


def test_chooser_on_pool_estimates() -> None:
    pool = priced_pool(ScriptedModel(["x"], name="small"), ScriptedModel(["x"], name="big"), small=(1, SMALL),
                       big=(5, BIG))
    pairs, _ = admissible_pairs(pool, ToolRegistry([*agent_tools(), DirectPrimitive()]), TASK)
    # big/cot: 0.88 - 10 x $0.00812 = 0.799 beats big/direct 0.787 and big/ensemble 0.656
    assert choose_pair(pairs, 10).label == "big/cot"  # type: ignore[union-attr]
    # λ=100: big/direct 0.83 - 100 x $0.00428 = 0.402 beats small/cot 0.389 and big/cot 0.068
    assert choose_pair(pairs, 100).label == "big/direct"  # type: ignore[union-attr]
    # λ=300: the big model no longer pays; small/cot 0.368 beats small/direct 0.333 and small/ensemble 0.324
    assert choose_pair(pairs, 300).label == "small/cot"  # type: ignore[union-attr]


async def test_invalid_output_after_repairs_falls_back_to_the_best_utility_pair(store: TraceStore) -> None:
    orch = ScriptedModel(script(["I would just answer it"], lambda p: "nope"), name="small")
    big = ScriptedModel(["15"], name="big")
    pool = priced_pool(orch, big, small=(1, SMALL), big=(5, BIG))
    res = await solve(TASK, strategy="uno", pool=pool, tools=ToolRegistry(agent_tools()), store=store,
                      options={"max_repairs": 1})
    assert res.status == "ok" and res.answer == "15"
    assert [d.valid for d in store.decisions(res.trace_id)] == [0, 0]
    assert res.meta["fallback"] is True and res.meta["mode"] == "direct"
    assert res.meta["pairs"] == [{"model": "big", "primitive": "cot", "status": "ok"}]
    assert len(big.calls) == 1 and len(orch.calls) == 2
    events = [e for e in store.events(res.trace_id) if e.kind == "uno_fallback"]
    assert len(events) == 1 and json.loads(events[0].data)["pair"] == "big/cot"
    # a higher cost weight makes the same fallback stay on the cheap model
    res = await solve(TASK, strategy="uno", pool=pool, tools=ToolRegistry(agent_tools()), store=store,
                      options={"max_repairs": 0, "cost_weight": 300})
    assert res.meta["pairs"][0]["model"] == "small" and res.meta["pairs"][0]["primitive"] == "cot"


async def test_model_failure_during_repairs_falls_back_but_an_unreachable_model_still_fails(store: TraceStore) -> None:
    def overflow(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is None:
            return "15"
        if len(messages) > 2:  # a repair turn: the prompt has outgrown the context window
            raise ModelError("prompt of 2100 tokens plus max_tokens 384 exceeds the context of 2048")
        return "not json"

    orch = ScriptedModel(overflow, name="m")
    res = await solve(TASK, strategy="uno", pool=Pool.from_models([orch]), tools=ToolRegistry(agent_tools()),
                      store=store)
    assert res.status == "ok" and res.answer == "15" and res.meta["fallback"] is True
    assert "exceeds the context" in res.meta["error"]
    assert [d.valid for d in store.decisions(res.trace_id)] == [0]  # the attempt before the failure is kept
    down = ScriptedModel([ModelUnavailableError("server down")], name="m")
    res = await solve(TASK, strategy="uno", pool=Pool.from_models([down]), tools=ToolRegistry(agent_tools()),
                      store=store)
    assert res.status == "error" and "server down" in (res.error or "")


def test_a_decomposition_into_one_subtask_is_the_direct_mode() -> None:
    from orchestrion.strategies.uno import UnoAction

    action = UnoAction.model_validate({"thought": "t", "mode": "decompose", "model": "a", "primitive": "direct",
                                       "subtasks": [{"id": "x", "task": "all of it", "model": "b", "primitive": "code",
                                                     "deps": []}]})
    assert (action.mode, action.model, action.primitive, action.subtasks) == ("direct", "b", "code", [])


async def test_a_step_holds_a_whole_copied_question_up_to_the_plans_subtask_limit(store: TraceStore) -> None:
    # one question of several, copied with its table, is longer than a sentence: it reaches its
    # agent whole (a step was once cut at 200 characters, mid-table, by the decision's grammar)
    table = "\n".join(f"name{i}, {i}, {50 + i}, {10 + i}" for i in range(20))
    question = ("Here is a table of penguins:\nname, age, height (cm), weight (kg)\n"
                f"{table}\nHow many penguins are there?")
    assert 400 < len(question) <= TASK_MAX
    steps = [{"id": "q1", "task": question, "model": "orch", "primitive": "direct", "deps": []},
             {"id": "q2", "task": "What is 2+2?", "model": "orch", "primitive": "direct", "deps": []}]
    plan = json.dumps({"thought": "two questions", "mode": "decompose", "model": "orch", "primitive": "direct",
                       "subtasks": steps})
    orch = ScriptedModel(script([plan], worker=lambda p: "12" if "penguins" in p else "4"), name="orch")
    res = await solve(TASK, strategy="uno", pool=Pool.from_models([orch]), tools=ToolRegistry(agent_tools()),
                      store=store)
    assert res.meta["mode"] == "decompose" and res.meta["fallback"] is False
    assert any(question in call[-1]["content"] for call in orch.calls[1:])
    too_long = {**steps[0], "task": "x" * (TASK_MAX + 1)}
    with pytest.raises(ValueError, match="at most 500 characters"):
        UnoStep.model_validate(too_long)


@pytest.mark.parametrize("strategy", ["uno", "spec"])
@pytest.mark.parametrize(("options", "expected"), [({}, PLAN_TOKENS), ({"decision_tokens": 200}, 200)])
async def test_the_one_big_decision_gets_a_planning_calls_token_limit(
        store: TraceStore, strategy: str, options: dict[str, Any], expected: int) -> None:
    # uno's steps and spec's duties may each copy a question of up to TASK_MAX characters: at a single
    # decision's limit (ORCHESTRATOR_CONFIG, 384 tokens) three such steps ran out mid-string
    limits: list[int] = []

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is None:
            return "15"
        limits.append(config.max_tokens)
        if strategy == "uno":
            return direct("orch", "direct")
        return json.dumps({"roles": [{"name": "solver", "duty": "answer", "capacity": "low",
                                      "primitive": "reasoner", "depends_on": []}]})

    orch = ScriptedModel(reply, name="orch")
    res = await solve(TASK, strategy=strategy, pool=Pool.from_models([orch]), tools=ToolRegistry(agent_tools()),
                      store=store, options=options)
    assert res.status == "ok", res.meta
    assert limits == [expected]
    assert PLAN_TOKENS > ORCHESTRATOR_CONFIG.max_tokens
