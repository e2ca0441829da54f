"""Baselines: single-model strategies to compare orchestration against."""

from __future__ import annotations

from .._prompts import render
from ..models._types import GenerateConfig, msg
from ..runtime.context import RunContext
from .base import Answer, Strategy, Task, register


@register
class Direct(Strategy):
    name = "direct"
    summary = "one call to the orchestrator model, no tools"

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        max_tokens = int(ctx.option("max_tokens", 256))
        out = await ctx.generate(
            [msg("user", render("direct", task=task.prompt))],
            config=GenerateConfig(max_tokens=max_tokens, temperature=float(ctx.option("temperature", 0.7))),
            name="answer",
        )
        return Answer(out.text.strip())
