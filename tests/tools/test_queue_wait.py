"""A tool's time limit counts its own work, not the time its model calls queue for the model's
single slot behind other episodes' calls (eval runs 8 episodes at once on models that take one
call at a time: coders timed out having generated nothing, and answered as direct)."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from orchestrion import Pool, ScriptedModel
from orchestrion.models.types import GenerateConfig, msg
from orchestrion.tools.envelope import ToolResult, ToolStatus
from orchestrion.tools.registry import Tool, ToolRegistry


def one_slot_pool() -> Pool:
    """A scripted model that, like an embedded one, takes one call at a time (0.3 s each)."""
    pool = Pool.from_models([ScriptedModel(["ok"], name="m", delay_s=0.3)])
    pool.specs["m"] = pool.spec("m").model_copy(update={"max_concurrency": 1})
    return pool


class Ask(Tool):
    """One model call on the pool, then ``extra_s`` of its own work."""

    name = "ask"
    description = "asks the model"
    timeout_s = 0.5

    class Args(BaseModel):
        extra_s: float = 0.0

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def run(self, args: Any, ctx: Any, model: str | None) -> str:
        out = await self.pool.complete("m", [msg("user", "hi")], GenerateConfig(max_tokens=4))
        await asyncio.sleep(args.extra_s)
        return out.text


async def test_calls_queued_behind_others_do_not_time_out_their_tools() -> None:
    pool = one_slot_pool()
    tools = ToolRegistry([Ask(pool)])
    results = await asyncio.gather(*(tools.call("ask", {}) for _ in range(4)))  # the last waits 0.9 s
    assert [r.status for r in results] == [ToolStatus.OK] * 4 and [r.output for r in results] == ["ok"] * 4
    assert max(r.latency_s for r in results) > Ask.timeout_s  # the queue took longer than the limit


async def test_a_tool_whose_own_work_overruns_still_times_out() -> None:
    pool = one_slot_pool()
    tools = ToolRegistry([Ask(pool)])
    results: list[ToolResult] = await asyncio.gather(tools.call("ask", {"extra_s": 5.0}),
                                                     tools.call("ask", {"extra_s": 5.0}))
    assert [r.status for r in results] == [ToolStatus.TIMEOUT] * 2
    assert all(r.latency_s < 2.0 for r in results)  # 0.5 s of work each, plus the second's 0.3 s queued
