from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from orchestrion import GenerateConfig, Message, Pool, ScriptedModel, Tool, ToolRegistry, TraceStore, solve
from orchestrion.tools.agents import agent_tools
from tests.helpers import CrashTool as Crash
from tests.helpers import SlowTool as Slow


def sub(id: str, task: str, tool: str = "slow", deps: Sequence[str] = ()) -> dict[str, Any]:
    return {"id": id, "task": task, "tool": tool, "deps": list(deps)}


def plan(*subs: dict[str, Any]) -> str:
    return json.dumps({"subtasks": list(subs)})


def step(milestone: str = "", done: bool = False) -> str:
    return json.dumps({"thought": "t", "done": done, "milestone": milestone})


def orchestrator(
    milestones: Sequence[str] | Callable[[int], str], plans: Sequence[str], *, agent: str = "agent out",
    final: str = "final"
) -> tuple[ScriptedModel, dict[str, list[str]]]:
    """A scripted orchestrator: replies by prompt kind, in order within each kind; keeps the prompts."""
    seen: dict[str, list[str]] = {"milestone": [], "plan": [], "agent": [], "synth": []}

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = messages[-1]["content"]
        if config.json_schema is not None and "subtasks" in config.json_schema.get("properties", {}):
            seen["plan"].append(text)
            return plans[min(len(seen["plan"]), len(plans)) - 1]
        if config.json_schema is not None:
            seen["milestone"].append(text)
            if callable(milestones):
                return milestones(len(seen["milestone"]))
            return milestones[min(len(seen["milestone"]), len(milestones)) - 1]
        if text.startswith("A team worked"):
            seen["synth"].append(text)
            return final
        seen["agent"].append(text)
        return agent

    return ScriptedModel(reply, name="orch"), seen


async def run(store: TraceStore, model: ScriptedModel, *tools: Tool, **options: Any) -> Any:
    return await solve("the task", strategy="milestone", pool=Pool.from_models([model]),
                       tools=ToolRegistry([*tools, *agent_tools()]), store=store, options=options)


async def test_independent_nodes_overlap_and_dependent_waits(store: TraceStore) -> None:
    slow = Slow(0.2)
    model, _ = orchestrator([step("gather"), step(done=True)],
                            [plan(sub("a", "A"), sub("b", "B"), sub("c", "C", deps=["a"]))])
    res = await run(store, model, slow)
    assert res.status == "ok" and res.answer == "final"
    a, b, c = slow.windows["A"], slow.windows["B"], slow.windows["C"]
    assert b[0] < a[1] and a[0] < b[1]  # a and b ran at the same time
    assert c[0] >= a[1]  # c only after its dependency
    (m,) = res.meta["milestones"]
    assert m["planned"] == ["a", "b", "c"] and m["executed_ok"] == ["a", "b", "c"] and m["completeness"] == 1.0
    assert res.meta["stop"] == "done" and res.meta["done"] is True
    events = [e for e in store.events(res.trace_id) if e.kind == "milestone"]
    assert len(events) == 1 and json.loads(events[0].data)["planned"] == ["a", "b", "c"]
    nodes = [s for s in store.spans(res.trace_id) if s.kind == "node"]
    assert {n.name for n in nodes} == {"a", "b", "c"}


async def test_serial_variant_never_overlaps(store: TraceStore) -> None:
    slow = Slow(0.05)
    model, _ = orchestrator([step("gather"), step(done=True)], [plan(sub("a", "A"), sub("b", "B"), sub("c", "C"))])
    await run(store, model, slow, max_parallel=1)
    spans = sorted(slow.windows.values())
    assert len(spans) == 3 and all(nxt[0] >= prev[1] for prev, nxt in zip(spans, spans[1:]))


async def test_replanning_sees_previous_results(store: TraceStore) -> None:
    slow = Slow(0.0)
    model, seen = orchestrator(
        [step("collect"), step("combine"), step(done=True)],
        [plan(sub("x", "alpha")), plan(sub("y", "merge it", tool="reasoner"))],
    )
    res = await run(store, model, slow)
    assert [m["milestone"] for m in res.meta["milestones"]] == ["collect", "combine"]
    # the second milestone decision, the second plan and the second milestone's agent all saw milestone 1's result
    assert "did alpha" not in seen["milestone"][0]
    assert "did alpha" in seen["milestone"][1] and "did alpha" in seen["milestone"][2]
    assert "Current milestone: combine" in seen["plan"][1] and "did alpha" in seen["plan"][1]
    assert "did alpha" in seen["agent"][0]
    assert "did alpha" in seen["synth"][0] and "agent out" in seen["synth"][0]


async def test_invalid_plan_is_fed_back_and_repaired(store: TraceStore) -> None:
    slow = Slow(0.0)
    cyclic = plan(sub("a", "A", deps=["b"]), sub("b", "B", deps=["a"]))
    model, seen = orchestrator([step("go"), step(done=True)], [cyclic, plan(sub("a", "A"), sub("b", "B", deps=["a"]))])
    res = await run(store, model, slow)
    (m,) = res.meta["milestones"]
    assert m["plan_attempts"] == 2 and not m["fallback"]
    assert "cycle" in m["plan_errors"][0]
    assert "cannot be run" in seen["plan"][1] and "cycle" in seen["plan"][1]
    assert m["executed_ok"] == ["a", "b"]
    kinds = [e.kind for e in store.events(res.trace_id)]
    assert "plan_rejected" in kinds and "plan_fallback" not in kinds


async def test_plan_that_never_validates_falls_back_cleanly(store: TraceStore) -> None:
    bad_dep = plan(sub("a", "A"), sub("b", "B", deps=["zzz"]))
    bad_tool = plan(sub("a", "A", tool="nosuch"))
    model, seen = orchestrator([step("go"), step(done=True)], [bad_dep, bad_tool])
    res = await run(store, model, Slow(0.0), plan_repairs=1)
    assert res.status == "ok"
    (m,) = res.meta["milestones"]
    assert m["fallback"] and m["plan_attempts"] == 2 and len(seen["plan"]) == 2
    assert "unknown node 'zzz'" in m["plan_errors"][0] and "unknown tool 'nosuch'" in m["plan_errors"][1]
    assert m["subtasks"][0]["tool"] == "reasoner" and m["subtasks"][0]["task"] == "go"
    assert m["executed_ok"] == ["s1"]


async def test_schema_invalid_output_is_repaired_and_counted(store: TraceStore) -> None:
    model, seen = orchestrator([step("go"), step(done=True)], ["not json at all", plan(sub("a", "A"))])
    res = await run(store, model, Slow(0.0))
    (m,) = res.meta["milestones"]
    assert m["executed_ok"] == ["a"] and res.meta["invalid_decisions"] == 1
    assert [d.valid for d in store.decisions(res.trace_id)][:3] == [1, 0, 1]


async def test_milestones_are_bounded_and_repeats_stop(store: TraceStore) -> None:
    model, _ = orchestrator(lambda n: step(f"m{n}"), [plan(sub("a", "A"))])
    res = await run(store, model, Slow(0.0), max_milestones=3)
    assert len(res.meta["milestones"]) == 3 and res.meta["stop"] == "max_milestones" and not res.meta["done"]

    model2, _ = orchestrator([step("same"), step("same")], [plan(sub("a", "A"))])
    res2 = await run(store, model2, Slow(0.0))
    assert len(res2.meta["milestones"]) == 1 and res2.meta["stop"] == "repeated_milestone"


async def test_first_milestone_cannot_be_done_and_failures_count_against_completeness(store: TraceStore) -> None:
    model, seen = orchestrator([step(done=True)],
                               [plan(sub("a", "A"), sub("b", "B", tool="crash"), sub("c", "C", deps=["b"]))])
    res = await run(store, model, Slow(0.0), Crash())
    (m,) = res.meta["milestones"]  # "done" on milestone 1 is read as: work on the task itself
    assert m["milestone"] == "the task" and "Nothing has been done yet" in seen["milestone"][0]
    assert [s["status"] for s in m["subtasks"]] == ["ok", "error", "skipped"]
    assert m["executed_ok"] == ["a"] and abs(m["completeness"] - 1 / 3) < 1e-9
    assert res.meta["subtasks"] == 3 and res.meta["subtasks_ok"] == 1
