from __future__ import annotations

import pytest

from orchestrion import (
    BudgetTracker,
    ModelError,
    ParaAction,
    Pool,
    RunContext,
    ScriptedModel,
    ToolRegistry,
    Tracer,
    TraceStore,
)


def make_ctx(store: TraceStore, model: ScriptedModel) -> RunContext:
    return RunContext(Pool.from_models([model]), ToolRegistry([]), Tracer(store, "ep"), BudgetTracker())


async def test_repair_that_overflows_the_context_keeps_the_record(store: TraceStore) -> None:
    model = ScriptedModel(["not json", ModelError("prompt of 2100 tokens exceeds the context")], name="m")
    decision = await make_ctx(store, model).decide(ParaAction, [{"role": "user", "content": "plan"}])
    assert not decision.valid
    assert "repair abandoned" in (decision.error or "") and "exceeds the context" in (decision.error or "")
    store.flush()
    assert [d["valid"] for d in store.decisions("ep")] == [0]


async def test_first_attempt_model_error_propagates(store: TraceStore) -> None:
    model = ScriptedModel([ModelError("server down")], name="m")
    with pytest.raises(ModelError, match="server down"):
        await make_ctx(store, model).decide(ParaAction, [{"role": "user", "content": "plan"}])


async def test_repair_quotes_a_bounded_part_of_the_bad_output(store: TraceStore) -> None:
    model = ScriptedModel(["x" * 5000, '{"thought": "", "calls": [], "final": true}'], name="m")
    decision = await make_ctx(store, model).decide(ParaAction, [{"role": "user", "content": "plan"}])
    assert decision.valid and len(decision.attempts) == 2
    quoted = model.calls[1][-2]["content"]
    assert len(quoted) == 600
