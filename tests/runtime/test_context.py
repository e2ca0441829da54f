from __future__ import annotations

import pytest

from orchestrion import ModelError, Pool, RunContext, ScriptedModel, ToolRegistry, TraceStore
from orchestrion.runtime import BudgetTracker
from orchestrion.strategies.para import ParaAction
from orchestrion.trace import Tracer


def make_ctx(store: TraceStore, model: ScriptedModel) -> RunContext:
    return RunContext(Pool.from_models([model]), ToolRegistry([]), Tracer(store, "ep"), BudgetTracker())


async def test_repair_that_overflows_the_context_keeps_the_record(store: TraceStore) -> None:
    model = ScriptedModel(["not json", ModelError("prompt of 2100 tokens exceeds the context")], name="m")
    decision = await make_ctx(store, model).decide(ParaAction, [{"role": "user", "content": "plan"}])
    assert not decision.valid
    assert "repair abandoned" in (decision.error or "") and "exceeds the context" in (decision.error or "")
    store.flush()
    assert [d.valid for d in store.decisions("ep")] == [0]


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


async def test_a_failed_greedy_decision_is_repaired_by_sampling(store: TraceStore) -> None:
    temperatures: list[float] = []

    def reply(messages: object, config: object) -> str:
        temperatures.append(config.temperature)  # type: ignore[attr-defined]
        return "not json" if len(temperatures) == 1 else '{"thought": "t", "calls": [], "final": true}'

    ctx = make_ctx(store, ScriptedModel(reply, name="m"))
    decision = await ctx.decide(ParaAction, [{"role": "user", "content": "go"}])
    assert decision.valid and temperatures[0] == 0.0 and temperatures[1] > 0


def test_a_reply_cut_off_at_the_limit_is_not_shown_back_to_the_model() -> None:
    from orchestrion.models.structured import repair_messages

    looped = "{" + "12*13 = 198, " * 50
    shown = repair_messages([{"role": "user", "content": "go"}], looped, "no JSON", truncated=False)
    hidden = repair_messages([{"role": "user", "content": "go"}], looped, "no JSON", truncated=True)
    assert any("12*13 = 198" in m["content"] for m in shown)
    assert not any("12*13 = 198" in m["content"] for m in hidden) and "cut off" in hidden[-1]["content"]


@pytest.mark.parametrize(("mode", "stated"), [("auto", True), ("prompt", True), ("none", False)])
async def test_structured_none_leaves_the_prompt_as_trained(store: TraceStore, mode: str, stated: bool) -> None:
    """A model that cannot constrain JSON gets the schema in its prompt, unless its pool entry says
    ``structured: none`` (an orchestrator trained on prompts without it)."""
    model = ScriptedModel(['{"thought": "", "calls": [], "final": true}'], name="m")
    pool = Pool.from_models([model])
    pool.specs["m"] = pool.spec("m").model_copy(update={"structured": mode})
    ctx = RunContext(pool, ToolRegistry([]), Tracer(store, "ep"), BudgetTracker())
    decision = await ctx.decide(ParaAction, [{"role": "user", "content": "plan"}])
    assert decision.valid
    assert ("JSON schema" in model.calls[0][-1]["content"]) is stated
