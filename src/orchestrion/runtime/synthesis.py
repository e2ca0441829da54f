"""Answer synthesis: turn a trajectory's results into the final answer (shared by strategies)."""

from __future__ import annotations

from .._prompts import render
from ..models._types import GenerateConfig, msg
from .context import RunContext


async def synthesize(task: str, results: list[str], ctx: RunContext) -> str:
    """Turn a trajectory's results into the final answer on the synthesis model."""
    body = "\n".join(f"- {r}" for r in results[-12:]) or "- (no results; answer from your own knowledge)"
    out = await ctx.generate(
        [msg("user", render("synthesize", task=task, results=body))],
        model=str(ctx.option("synthesizer", ctx.pool.synthesizer)),
        config=GenerateConfig(max_tokens=int(ctx.option("max_tokens", 256))),
        name="synthesis",
    )
    return out.text.strip()
