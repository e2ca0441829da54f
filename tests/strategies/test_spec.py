from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrion import (
    GenerateConfig,
    Message,
    ModelError,
    PlanError,
    Pool,
    ScriptedModel,
    ToolRegistry,
    TraceStore,
    solve,
)
from orchestrion.strategies.spec import (
    DUTY_MAX,
    OrchestrationSpec,
    Role,
    _capacity_lines,
    compile_spec,
    map_capacity,
    sinks,
    spec_error,
)
from orchestrion.tools.agents import agent_tools
from tests.helpers import script

TASK = "What is 7+8?"


def role(name: str, capacity: str = "low", deps: list[str] | None = None,
         primitive: str = "reasoner") -> dict[str, Any]:
    return {"name": name, "duty": f"duty of {name}", "capacity": capacity, "primitive": primitive,
            "depends_on": deps or []}


def spec_json(*roles: dict[str, Any]) -> str:
    return json.dumps({"roles": list(roles)})


def spec_of(*roles: dict[str, Any]) -> OrchestrationSpec:
    return OrchestrationSpec.model_validate({"roles": list(roles)})




def tiered(models: list[ScriptedModel], tiers: dict[str, int]) -> Pool:
    pool = Pool.from_models(models, orchestrator=models[0].name)
    for name, tier in tiers.items():
        pool.specs[name].tier = tier
    return pool


@pytest.mark.parametrize(("roles", "error"), [
    ((), "the spec has no roles; give at least one"),
    ((role("a"), role("a")), "duplicate role 'a'; role names must be unique"),
    ((role("a", capacity="huge"),), "role 'a': unknown capacity 'huge'; use one of low, medium, high"),
    ((role("a", primitive="oracle"),), "role 'a': unknown primitive 'oracle'"),
    ((role("a"), role("b", deps=["ghost"])), "role 'b' depends on unknown role 'ghost'"),
    ((role("a", deps=["a"]),), "role 'a' depends on itself (a cycle)"),
    ((role("a", deps=["c"]), role("b", deps=["a"]), role("c", deps=["b"]), role("d")),
     "dependency cycle among roles: a, b, c"),
])
def test_invalid_specs_get_one_line_errors_naming_the_role(roles: tuple[dict[str, Any], ...], error: str) -> None:
    found = spec_error(spec_of(*roles))
    assert found is not None and found.startswith(error) and "\n" not in found


def test_valid_spec_has_no_error_and_its_sinks() -> None:
    spec = spec_of(role("a"), role("b"), role("c", deps=["a", "b"]), role("d", deps=["a"]))
    assert spec_error(spec) is None
    assert sinks(spec) == ["c", "d"]


def test_capacity_maps_to_models_by_tier() -> None:
    tiers = {"mid": 3, "tiny": 1, "huge": 5}
    assert [map_capacity(level, tiers) for level in ("low", "medium", "high")] == ["tiny", "mid", "huge"]
    # medium aims at tier 2.5 of 1..4: nearest is 2 or 3; the tie goes to the lower tier
    assert map_capacity("medium", {"a": 1, "b": 2, "c": 3, "d": 4}) == "b"
    assert map_capacity("medium", {"a": 1, "c": 4, "d": 5}) == "c"  # target 3: tier 4 is nearest
    assert map_capacity("high", {"x": 2, "y": 2}) == "x"  # equal tiers: pool order
    assert {map_capacity(level, {"only": 1}) for level in ("low", "medium", "high")} == {"only"}
    five = ("l1", "l2", "l3", "l4", "l5")
    assert [map_capacity(level, {"t1": 1, "t3": 3, "t5": 5}, five) for level in five] == ["t1", "t1", "t3", "t3", "t5"]
    with pytest.raises(ValueError, match="unknown capacity 'huge'"):
        map_capacity("huge", tiers)


def test_compile_spec_maps_roles_to_subtasks_and_rejects_an_edited_invalid_spec() -> None:
    pool = tiered([ScriptedModel(["x"], name=n) for n in ("orch", "small", "mid", "big")],
                  {"orch": 2, "small": 1, "mid": 3, "big": 5})
    spec = spec_of(role("r", "low"), role("c", "medium", primitive="reviewer"), role("w", "high", ["r", "c"]))
    plan = compile_spec(spec, pool)
    assert [(s.id, s.tool, s.model, s.deps) for s in plan] == [
        ("r", "reasoner", "small", []), ("c", "reviewer", "mid", []), ("w", "reasoner", "big", ["r", "c"])]
    assert plan[0].task == "You are the r. duty of r"
    edited = spec.model_copy(update={"roles": [*spec.roles[:2], Role(**role("w", "high", ["w"]))]})  # one field changed
    with pytest.raises(PlanError, match="invalid orchestration spec: role 'w' depends on itself"):
        compile_spec(edited, pool)


def test_capacity_lines_describe_each_level_s_model() -> None:
    pool = tiered([ScriptedModel(["x"], name=n) for n in ("orch", "small", "big")], {"orch": 2, "small": 1, "big": 5})
    pool.specs["small"].description = "fast, weak at arithmetic"
    lines = _capacity_lines(pool).splitlines()
    assert lines[0].startswith("- low: small (tier 1") and lines[0].endswith("): fast, weak at arithmetic")
    assert lines[2].startswith("- high: big (tier 5") and lines[2].endswith(")")  # no description, no colon


def test_a_duty_holds_a_copied_question_and_the_longest_role_still_compiles() -> None:
    pool = tiered([ScriptedModel(["x"], name=n) for n in ("orch", "small")], {"orch": 2, "small": 1})
    question = ("Which of these is a prime number? Options: (A) 21 (B) 27 (C) 29 (D) 33. " * 6)[:400]
    assert compile_spec(spec_of({**role("q1"), "duty": question}), pool)[0].task.endswith(question)
    longest = spec_of({**role("n" * 24), "duty": "d" * DUTY_MAX})
    assert len(compile_spec(longest, pool)[0].task) <= 500  # the plan's own limit on a subtask's text
    with pytest.raises(ValidationError, match="at most"):
        Role(**{**role("r"), "duty": "d" * (DUTY_MAX + 1)})


async def test_execution_order_follows_dependencies_and_answer_comes_from_sinks(store: TraceStore) -> None:
    def worker(prompt: str) -> str:
        if prompt.startswith("A team worked"):
            return "final 15"
        return "out of " + prompt.splitlines()[-1].removeprefix("Subtask: You are the ").split(".")[0]

    spec = spec_json(role("researcher", "low"), role("analyst", "low"),
                     role("writer", "high", ["researcher", "analyst"]))
    orch = ScriptedModel(script([spec], worker), name="orch")
    small = ScriptedModel(lambda m, c: worker(m[-1]["content"]), name="small", delay_s=0.2)
    big = ScriptedModel(lambda m, c: worker(m[-1]["content"]), name="big")
    pool = tiered([orch, small, big], {"orch": 3, "small": 1, "big": 5})
    res = await solve(TASK, strategy="spec", pool=pool, tools=ToolRegistry(agent_tools()), store=store)
    assert res.status == "ok" and res.answer == "final 15"
    assert len(small.calls) == 2 and small.max_active == 2  # the independent roles overlapped
    assert len(big.calls) == 1  # high capacity -> the highest tier
    writer_prompt = big.calls[0][-1]["content"]
    assert "[researcher] out of researcher" in writer_prompt and "[analyst] out of analyst" in writer_prompt
    assert "Overall task: What is 7+8?" in writer_prompt
    nodes = {s.name: s for s in store.spans(res.trace_id) if s.kind == "node"}
    assert nodes["writer"].started >= max(nodes["researcher"].ended, nodes["analyst"].ended)
    synthesis = orch.calls[-1][-1]["content"]
    assert "[writer]" in synthesis and "[researcher]" not in synthesis  # only the sink feeds the answer
    assert res.meta["sinks"] == ["writer"] and res.meta["roles"] == {"researcher": "ok", "analyst": "ok",
                                                                     "writer": "ok"}
    assert [c["model"] for c in res.meta["compiled"]] == ["small", "small", "big"]
    events = [json.loads(e.data) for e in store.events(res.trace_id) if e.kind == "spec"]
    assert len(events) == 1 and events[0]["spec"] == json.loads(spec)
    assert OrchestrationSpec.model_validate(res.meta["spec"]) == OrchestrationSpec.model_validate_json(spec)


async def test_invalid_spec_is_rejected_then_repaired(store: TraceStore) -> None:
    bad = spec_json(role("a", deps=["b"]), role("b", deps=["a"]))
    good = spec_json(role("a"), role("b", deps=["a"]))
    orch = ScriptedModel(script([bad, good], lambda p: "15"), name="orch")
    res = await solve(TASK, strategy="spec", pool=Pool.from_models([orch]), tools=ToolRegistry(agent_tools()),
                      store=store)
    assert res.status == "ok"
    decisions = store.decisions(res.trace_id)
    assert [d.valid for d in decisions] == [0, 1]
    assert "dependency cycle among roles: a, b" in decisions[0].error
    assert "dependency cycle among roles: a, b" in orch.calls[1][-1]["content"]  # the repair prompt quotes it
    assert res.meta["invalid_decisions"] == 1 and res.meta["roles"] == {"a": "ok", "b": "ok"}


async def test_spec_that_stays_invalid_fails_cleanly(store: TraceStore) -> None:
    orch = ScriptedModel(script([spec_json(role("solver", capacity="huge"))]), name="orch")
    res = await solve(TASK, strategy="spec", pool=Pool.from_models([orch]), tools=ToolRegistry(agent_tools()),
                      store=store)
    assert res.status == "invalid_spec" and res.answer == ""
    assert "role 'solver': unknown capacity 'huge'" in res.meta["error"]
    assert len(orch.calls) == 3  # one try and max_repairs=2 repairs, no executor work
    assert [d.valid for d in store.decisions(res.trace_id)] == [0, 0, 0]
    episode = store.episode(res.trace_id)
    assert episode is not None and episode.finished == 1 and episode.status == "invalid_spec"
    assert [e.kind for e in store.events(res.trace_id)] == ["spec_invalid"]


async def test_unknown_role_with_fewer_repairs_or_single_role_fallback(store: TraceStore) -> None:
    bad = spec_json(role("a"), role("b", deps=["ghost"]))
    orch = ScriptedModel(script([bad], lambda p: "15"), name="orch")
    res = await solve(TASK, strategy="spec", pool=Pool.from_models([orch]), tools=ToolRegistry(agent_tools()),
                      store=store,
                      options={"max_repairs": 0})
    assert res.status == "invalid_spec" and "role 'b' depends on unknown role 'ghost'" in res.meta["error"]
    assert len(orch.calls) == 1
    res = await solve(TASK, strategy="spec", pool=Pool.from_models([orch]), tools=ToolRegistry(agent_tools()),
                      store=store,
                      options={"max_repairs": 0, "on_invalid": "single_role"})
    assert res.status == "ok" and res.meta["fallback"] is True
    assert [r["name"] for r in res.meta["spec"]["roles"]] == ["solver"]


async def test_decision_schema_pins_capacity_and_available_primitives(store: TraceStore) -> None:
    seen: list[dict[str, Any]] = []

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is not None:
            seen.append(config.json_schema)
            return spec_json(role("solo", primitive="coder"))  # coder is unavailable: no python tool
        return "15"

    orch = ScriptedModel(reply, name="orch")
    res = await solve(TASK, strategy="spec", pool=Pool.from_models([orch]), tools=ToolRegistry(agent_tools()),
                      store=store,
                      options={"max_repairs": 0})
    role_schema = seen[0]["$defs"]["Role"]
    assert role_schema["properties"]["capacity"] == {"enum": ["low", "medium", "high"]}
    assert role_schema["properties"]["primitive"] == {"enum": ["reasoner", "reviewer", "ensemble"]}
    assert role_schema["required"] == ["name", "duty", "capacity", "primitive", "depends_on"]
    assert seen[0]["properties"]["roles"]["minItems"] == 1
    assert res.status == "invalid_spec" and "role 'solo': unknown primitive 'coder'" in res.meta["error"]
    assert "- low: orch (tier 1" in orch.calls[0][0]["content"]


async def test_model_failure_during_repairs_is_a_recorded_invalid_spec(store: TraceStore) -> None:
    orch = ScriptedModel(["{\"roles\": []}", ModelError("prompt exceeds the context of 2048")], name="orch")
    res = await solve(TASK, strategy="spec", pool=Pool.from_models([orch]), tools=ToolRegistry(agent_tools()),
                      store=store)
    assert res.status == "invalid_spec"
    assert "the spec has no roles" in res.meta["error"] and "exceeds the context" in res.meta["error"]
    assert store.episode(res.trace_id).finished == 1  # type: ignore[union-attr]
    assert [e.kind for e in store.events(res.trace_id)] == ["spec_invalid"]
