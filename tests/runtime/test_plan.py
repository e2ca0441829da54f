from __future__ import annotations

import pytest

from orchestrion import PlanError, Pool, RunContext, ScriptedModel, Tool, ToolRegistry, TraceStore
from orchestrion.runtime import BudgetTracker
from orchestrion.runtime.plan import Subtask, execute_plan, results_text
from orchestrion.tools.agents import agent_tools
from orchestrion.trace import Tracer
from tests.helpers import SlowTool


def make_ctx(store: TraceStore, *tools: Tool, model: ScriptedModel | None = None) -> RunContext:
    pool = Pool.from_models([model or ScriptedModel(["agent says hi"], name="m")])
    return RunContext(pool, ToolRegistry(tools), Tracer(store, "ep"), BudgetTracker())


async def test_independent_overlap_dependent_waits_and_gets_context(store: TraceStore) -> None:
    slow = SlowTool(0.2)
    model = ScriptedModel(lambda m, c: "combined: " + m[-1]["content"], name="m")
    ctx = make_ctx(store, slow, *agent_tools(), model=model)
    plan = [
        Subtask(id="a", task="A", tool="slow"),
        Subtask(id="b", task="B", tool="slow"),
        Subtask(id="c", task="combine", tool="reasoner", deps=["a", "b"]),
    ]
    res = await execute_plan(ctx, plan)
    w = slow.windows
    assert w["B"][0] < w["A"][1] and w["A"][0] < w["B"][1]
    assert res["c"].status == "ok"
    assert "[a] did A" in res["c"].value.output and "[b] did B" in res["c"].value.output
    store.flush()
    nodes = [s for s in store.spans("ep") if s.kind == "node"]
    assert {n.name for n in nodes} == {"a", "b", "c"}
    assert '"deps":["a","b"]' in next(n.attrs for n in nodes if n.name == "c")
    lines = results_text(plan, res)
    assert lines[0].startswith("[a] A (ok): did A")


async def test_failed_node_skips_dependents(store: TraceStore) -> None:
    ctx = make_ctx(store, SlowTool())
    plan = [Subtask(id="x", task="t", tool="nosuch"), Subtask(id="y", task="u", tool="slow", deps=["x"])]
    res = await execute_plan(ctx, plan)
    assert res["x"].status == "error" and "NOT_FOUND" in (res["x"].error or "")
    assert res["y"].status == "skipped"


async def test_bad_plans_rejected(store: TraceStore) -> None:
    ctx = make_ctx(store, SlowTool())
    with pytest.raises(PlanError, match="cycle"):
        await execute_plan(ctx, [Subtask(id="a", task="t", deps=["b"]), Subtask(id="b", task="t", deps=["a"])])
    with pytest.raises(PlanError, match="duplicate subtask ids: a"):
        await execute_plan(ctx, [Subtask(id="a", task="t"), Subtask(id="a", task="u")])
    with pytest.raises(PlanError, match="unknown node 'q'"):
        await execute_plan(ctx, [Subtask(id="a", task="t", deps=["q"])])
