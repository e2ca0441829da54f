from __future__ import annotations

import asyncio

import pytest

from orchestrion import (
    Budget,
    BudgetExceededError,
    ConfigError,
    ModelUnavailableError,
    Pool,
    ScriptedModel,
    ToolRegistry,
    TraceStore,
    Usage,
    solve,
)
from orchestrion.runtime import BudgetTracker


def test_parse_cli_budget() -> None:
    b = Budget.parse_cli(["tokens=100", "wall_s=2.5"])
    assert b.tokens == 100 and b.wall_s == 2.5
    with pytest.raises(ConfigError, match="expected NAME=VALUE"):
        Budget.parse_cli(["tokns=1"])
    with pytest.raises(ConfigError, match="--budget"):
        Budget.parse_cli(["tokens=-3"])


def test_tracker_limits() -> None:
    t = BudgetTracker(Budget(tokens=10, rounds=2))
    t.charge(Usage(input_tokens=4, output_tokens=5))
    t.check()
    t.new_round()
    t.new_round()
    with pytest.raises(BudgetExceededError, match="rounds"):
        t.new_round()
    t.charge(Usage(output_tokens=1))
    with pytest.raises(BudgetExceededError, match="tokens used 10 of 10"):
        t.check()


def test_unknown_cost_does_not_trip_cost_limit() -> None:
    t = BudgetTracker(Budget(cost_usd=0.01))
    t.charge(Usage(input_tokens=1, cost_usd=None))
    t.check()  # unknown is reported as unknown, not as over or under


async def test_token_budget_caps_generation_and_stops(store: TraceStore) -> None:
    seen: list[int] = []

    def reply(messages, config):  # type: ignore[no-untyped-def]
        seen.append(config.max_tokens)
        return '{"calls": [{"tool": "nosuch", "input": "x"}], "final": false}'

    m = ScriptedModel(reply, name="m")
    res = await solve("q", strategy="para", pool=Pool.from_models([m]), tools=ToolRegistry([]), store=store,
                      budget=Budget(tokens=400))
    assert res.status == "budget_exceeded" and "tokens" in (res.error or "")
    assert seen[0] == 384  # the orchestrator's own cap, below the remaining budget
    assert seen[-1] < 400 - 100  # later calls were capped to what was left
    ep = store.episode(res.trace_id)
    assert ep is not None and ep.finished == 1 and ep.input_tokens + ep.output_tokens >= 400


async def test_unreachable_model_is_a_recorded_status(store: TraceStore) -> None:
    m = ScriptedModel([ModelUnavailableError("model 'm' at http://127.0.0.1:9 is unreachable; is the server running?")],
                      name="m")
    res = await solve("q", strategy="direct", pool=Pool.from_models([m]), tools=ToolRegistry([]), store=store)
    assert res.status == "error" and "unreachable" in (res.error or "")
    ep = store.episode(res.trace_id)
    assert ep is not None and ep.finished == 1 and ep.status == "error"
    calls = [s for s in store.spans(res.trace_id) if s.kind == "call"]
    assert calls[0].status == "error"


async def test_cancelled_episode_is_recorded_and_finished(store: TraceStore) -> None:
    m = ScriptedModel(["slow"], name="m", delay_s=10)
    task = asyncio.create_task(solve("q", strategy="direct", pool=Pool.from_models([m]), tools=ToolRegistry([]),
                                     store=store))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (ep,) = store.query("SELECT * FROM episodes")
    assert ep["status"] == "cancelled" and ep["finished"] == 1
