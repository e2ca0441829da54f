from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from orchestrion import (
    Budget,
    ConfigError,
    GenerateConfig,
    Message,
    PlanError,
    Pool,
    ScriptedModel,
    Tool,
    ToolRegistry,
    TraceStore,
    solve,
)
from orchestrion.runtime import Subtask
from orchestrion.strategies.topology import WorkCounter, consistency, dag_features, route, support
from orchestrion.tools.agents import agent_tools
from tests.helpers import SlowTool as Slow

# -- the router ------------------------------------------------------------------------

SHAPES: dict[str, tuple[dict[str, list[str]], str]] = {
    "single node": ({"a": []}, "parallel"),
    "no edges": ({"a": [], "b": [], "c": [], "d": []}, "parallel"),
    "two in a row": ({"a": [], "b": ["a"]}, "sequential"),
    "chain": ({"a": [], "b": ["a"], "c": ["b"], "d": ["c"]}, "sequential"),
    "chain with a shortcut": ({"a": [], "b": ["a"], "c": ["b", "a"]}, "sequential"),
    "fan-in star": ({"w1": [], "w2": [], "w3": [], "agg": ["w1", "w2", "w3"]}, "hierarchical"),
    "fan-out star": ({"lead": [], "w1": ["lead"], "w2": ["lead"], "w3": ["lead"]}, "hierarchical"),
    "diamond": ({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}, "hybrid"),
    "chain plus a loose node": ({"a": [], "b": ["a"], "x": []}, "hybrid"),
    "two separate pairs": ({"a": [], "b": ["a"], "c": [], "d": ["c"]}, "hybrid"),
    "star with a tail": ({"w1": [], "w2": [], "agg": ["w1", "w2"], "tail": ["agg"]}, "hybrid"),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_shapes_map_to_topologies(shape: str) -> None:
    graph, expected = SHAPES[shape]
    assert route(graph) == expected
    subtasks = [Subtask(id=n, task=n, deps=d) for n, d in graph.items()]
    assert route(subtasks) == expected


def test_features_of_a_diamond() -> None:
    f = dag_features({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
    assert (f.nodes, f.edges, f.width, f.depth, f.max_in, f.max_out) == (4, 4, 2, 3, 2, 2)
    assert f.coupling == pytest.approx(4 / 6)


def test_router_rejects_cycles_and_unknown_deps() -> None:
    with pytest.raises(PlanError, match="cycle"):
        route({"a": ["b"], "b": ["a"]})
    with pytest.raises(PlanError, match="unknown node 'q'"):
        route({"a": ["q"]})


def _chain(n: int) -> dict[str, list[str]]:
    return {f"n{i}": [f"n{i - 1}"] if i else [] for i in range(n)}


def _fan_in(n: int) -> dict[str, list[str]]:
    return {**{f"w{i}": [] for i in range(n - 1)}, "agg": [f"w{i}" for i in range(n - 1)]}


def _layered(n: int) -> dict[str, list[str]]:
    """Every node depends on up to three earlier ones: E ~ 3V, mixed shape."""
    return {f"n{i}": [f"n{j}" for j in range(max(0, i - 3), i)] for i in range(n)}


def _independent(n: int) -> dict[str, list[str]]:
    return {f"n{i}": [] for i in range(n)}


@pytest.mark.parametrize("make", [_chain, _fan_in, _layered, _independent])
def test_router_cost_is_linear(make: Callable[[int], dict[str, list[str]]]) -> None:
    ops: dict[int, int] = {}
    for n in (250, 500, 1000, 2000):
        graph = make(n)
        counter = WorkCounter()
        route(graph, counter)
        size = len(graph) + sum(len(d) for d in graph.values())
        assert counter.ops <= 4 * size + 4  # a constant number of visits per node and edge
        ops[n] = counter.ops
    for n in (250, 500, 1000):
        assert 1.9 <= ops[2 * n] / ops[n] <= 2.1  # doubling the graph doubles the work


# -- consistency -----------------------------------------------------------------------


def test_consistency_worked_examples() -> None:
    assert consistency([]) == 1.0 and consistency(["anything"]) == 1.0
    assert consistency(["15", "15", "15"]) == 1.0
    # final lines are compared after normalisation: case, punctuation and working above do not matter
    assert consistency(["7 + 8 makes\n15", "15.", " 15 "]) == 1.0
    assert consistency(["15", "15", "16"]) == pytest.approx(1 / 3)  # 1 agreeing pair out of 3
    assert consistency(["Paris", "paris!", "Lyon", "Lyon"]) == pytest.approx(2 / 6)
    assert consistency(["a", "b"]) == 0.0
    assert support("so the answer is\n15", ["15", "15", "16"]) == pytest.approx(2 / 3)


async def test_a_plan_may_hand_on_a_whole_question_as_long_as_subtask_allows(store: TraceStore) -> None:
    question = "Which finished third? " + "A golfer finished below another one. " * 10 + "Options: (A) Amy (B) Rob"
    assert 400 < len(question) <= 500  # longer than the 200 characters the plan grammar once allowed
    schemas: list[dict[str, Any]] = []
    answered: list[str] = []

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is not None:
            schemas.append(config.json_schema)
            return plan(("q1", question, "reasoner", []))
        answered.append(messages[-1]["content"])
        return "synthesised"

    res = await run(store, ScriptedModel(reply, name="orch"))
    # the grammar a real model decodes under lets the whole question through, as Subtask does
    assert schemas[0]["$defs"]["Subtask"]["properties"]["task"]["maxLength"] == 500
    assert res.status == "ok" and any(question in text for text in answered)


# -- the strategy on a scripted model ---------------------------------------------------


def plan(*subs: tuple[str, str, str, Sequence[str]]) -> str:
    return json.dumps({"subtasks": [{"id": i, "task": t, "tool": tool, "deps": list(d)} for i, t, tool, d in subs]})


def orchestrator(plans: Sequence[str], *, reconcile: Callable[[int], str] = lambda n: f"draft {n}",
                 agent: Callable[[str], str] = lambda p: "agent out") -> tuple[ScriptedModel, dict[str, list[str]]]:
    seen: dict[str, list[str]] = {"plan": [], "reconcile": [], "synth": [], "agent": []}

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = messages[-1]["content"]
        if config.json_schema is not None:
            seen["plan"].append(text)
            return plans[min(len(seen["plan"]), len(plans)) - 1]
        if "answers disagree" in text:
            seen["reconcile"].append(text)
            return reconcile(len(seen["reconcile"]))
        if text.startswith("A team worked"):
            seen["synth"].append(text)
            return "synthesised"
        seen["agent"].append(text)
        return agent(text)

    return ScriptedModel(reply, name="orch"), seen


async def run(store: TraceStore, model: ScriptedModel, *tools: Tool, **options: Any) -> Any:
    return await solve("the task", strategy="topology", pool=Pool.from_models([model]),
                       tools=ToolRegistry([*tools, *agent_tools()]), store=store, options=options)


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


async def test_parallel_runs_all_at_once_and_agreeing_outputs_synthesise_once(store: TraceStore) -> None:
    slow = Slow(0.2, reply=lambda t: "15")
    model, seen = orchestrator([plan(("a", "A", "slow", []), ("b", "B", "slow", []), ("c", "C", "slow", []))])
    res = await run(store, model, slow)
    assert res.status == "ok" and res.answer == "synthesised"
    w = slow.windows
    assert overlap(w["A"], w["B"]) and overlap(w["B"], w["C"]) and overlap(w["A"], w["C"])
    assert res.meta["topology"] == "parallel" and res.meta["consistency"] == 1.0
    assert res.meta["loop_iterations"] == 0 and not seen["reconcile"] and len(seen["synth"]) == 1
    kinds = {e.kind: json.loads(e.data) for e in store.events(res.trace_id)}
    assert kinds["topology"]["topology"] == "parallel" and kinds["synthesis"]["consistency"] == 1.0


async def test_sequential_runs_in_order_and_each_step_sees_all_earlier_outputs(store: TraceStore) -> None:
    slow = Slow(0.05)
    model, seen = orchestrator([plan(("a", "A", "slow", []), ("b", "B", "slow", ["a"]),
                                     ("c", "combine", "reasoner", ["b"]))])
    res = await run(store, model, slow)
    assert res.meta["topology"] == "sequential"
    assert slow.windows["B"][0] >= slow.windows["A"][1]
    (prompt,) = seen["agent"]
    assert "did A" in prompt and "did B" in prompt  # c only depends on b but sees a's output too
    assert res.meta["consistency"] == 1.0 and res.meta["parallel_outputs"] == 1


async def test_hierarchical_workers_in_parallel_then_lead(store: TraceStore) -> None:
    slow = Slow(0.2)
    model, seen = orchestrator([plan(("w1", "W1", "slow", []), ("w2", "W2", "slow", []), ("w3", "W3", "slow", []),
                                     ("lead", "merge the findings", "reasoner", ["w1", "w2", "w3"]))])
    res = await run(store, model, slow)
    assert res.meta["topology"] == "hierarchical" and res.meta["lead"] == "lead"
    w = slow.windows
    assert overlap(w["W1"], w["W2"]) and overlap(w["W2"], w["W3"])
    assert all(x in seen["agent"][0] for x in ("did W1", "did W2", "did W3"))


async def test_hybrid_diamond_and_serial_variant(store: TraceStore) -> None:
    diamond = plan(("a", "A", "slow", []), ("b", "B", "slow", ["a"]), ("c", "C", "slow", ["a"]),
                   ("d", "D", "slow", ["b", "c"]))
    slow = Slow(0.1)
    model, _ = orchestrator([diamond])
    res = await run(store, model, slow)
    w = slow.windows
    assert res.meta["topology"] == "hybrid" and res.meta["features"]["depth"] == 3
    assert overlap(w["B"], w["C"]) and w["B"][0] >= w["A"][1] and w["D"][0] >= max(w["B"][1], w["C"][1])

    serial = Slow(0.05)
    model2, _ = orchestrator([diamond])
    await run(store, model2, serial, max_parallel=1)
    spans = sorted(serial.windows.values())
    assert all(nxt[0] >= prev[1] for prev, nxt in zip(spans, spans[1:]))


@pytest.mark.parametrize("cap", [2, 5])
async def test_reconcile_loop_stops_at_its_cap_when_answers_never_agree(store: TraceStore, cap: int) -> None:
    model, seen = orchestrator([plan(("a", "A", "slow", []), ("b", "B", "slow", []), ("c", "C", "slow", []))])
    options = {} if cap == 2 else {"max_reconcile": cap}
    res = await run(store, model, Slow(0.0), **options)
    assert res.meta["consistency"] == 0.0 and res.meta["parallel_outputs"] == 3
    assert res.meta["loop_iterations"] == cap == len(seen["reconcile"])
    assert not res.meta["converged"] and res.answer == f"draft {cap}"
    assert "did A" in seen["reconcile"][0] and "draft 1" in seen["reconcile"][1]  # each round sees the last draft


async def test_reconcile_loop_stops_early_on_a_stable_or_supported_draft(store: TraceStore) -> None:
    three = plan(("a", "A", "slow", []), ("b", "B", "slow", []), ("c", "C", "slow", []))
    model, seen = orchestrator([three], reconcile=lambda n: "settled")
    res = await run(store, model, Slow(0.0), max_reconcile=6)
    assert res.meta["loop_iterations"] == 2 and res.meta["converged"] and res.answer == "settled"

    # two of three outputs say 15: consistency 1/3 < 0.5, but a draft saying 15 has support 2/3
    model2, seen2 = orchestrator([three], reconcile=lambda n: "checked\n15")
    res2 = await run(store, model2, Slow(0.0, reply=lambda t: "16" if t == "C" else "15"), max_reconcile=6)
    assert res2.meta["consistency"] == pytest.approx(1 / 3)
    assert res2.meta["loop_iterations"] == 1 and res2.meta["supports"] == [pytest.approx(2 / 3)]


async def test_forced_topology_and_bad_option(store: TraceStore) -> None:
    slow = Slow(0.05)
    model, _ = orchestrator([plan(("a", "A", "slow", []), ("b", "B", "slow", []))])
    res = await run(store, model, slow, topology="sequential")
    assert res.meta["routed"] == "parallel" and res.meta["topology"] == "sequential"
    assert slow.windows["B"][0] >= slow.windows["A"][1]
    model2, _ = orchestrator([plan(("a", "A", "slow", []))])
    with pytest.raises(ConfigError, match=r"option 'topology' = 'ring': expected 'auto' \| 'parallel'"):
        await run(store, model2, Slow(0.0), topology="ring")
    assert model2.calls == []  # rejected before any model call
    assert store.query("SELECT id FROM episodes WHERE strategy = 'topology' AND status = 'error'") == []


async def test_invalid_decomposition_repaired_then_fallback(store: TraceStore) -> None:
    cyclic = plan(("a", "A", "slow", ["b"]), ("b", "B", "slow", ["a"]))
    model, seen = orchestrator([cyclic, plan(("a", "A", "slow", []))])
    res = await run(store, model, Slow(0.0))
    assert res.meta["plan_attempts"] == 2 and not res.meta["fallback"] and "cycle" in res.meta["plan_errors"][0]
    assert "cycle" in seen["plan"][1]

    model2, _ = orchestrator([cyclic])
    res2 = await run(store, model2, Slow(0.0))
    assert res2.status == "ok" and res2.meta["fallback"] and res2.meta["plan_attempts"] == 3
    assert res2.meta["topology"] == "parallel" and res2.meta["subtasks"] == 1 and res2.meta["subtasks_ok"] == 1


@pytest.mark.integration
async def test_embedded_model_run_ends_with_a_finished_trace(store: TraceStore) -> None:
    res = await solve("What is 7+8?", strategy="topology", pool=Pool.default(), store=store, budget=Budget(wall_s=120),
                      options={"max_subtasks": 3, "plan_repairs": 1})
    assert res.status in ("ok", "budget_exceeded", "error")
    assert res.status != "ok" or (res.answer and res.meta["topology"] in ("parallel", "sequential", "hierarchical",
                                                                          "hybrid"))
    episode = store.episode(res.trace_id)
    assert episode is not None and episode.finished == 1
    assert store.decisions(res.trace_id)
