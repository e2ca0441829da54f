"""Agent tools (Agent-as-Tool): executor strategies with the same call shape as tools.

Each agent tool runs a subtask on a model the caller chooses (``model``), through
the run context, so its model calls are traced and costed under the tool's span.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field

from .._prompts import render
from .._text import PYTHON_FENCES, code_blocks, last_line, normalize
from ..models.types import GenerateConfig, msg
from .envelope import ToolResult, ToolStatus
from .registry import Tool

if TYPE_CHECKING:
    from .context import ToolContext


class AgentArgs(BaseModel):
    task: str = Field(min_length=1, max_length=4000, description="the subtask, self-contained")
    context: str = Field(default="", max_length=8000, description="facts or results the agent needs")


def _context(args: AgentArgs) -> str:
    return f"Context: {args.context}\n\n" if args.context else ""


def _need(ctx: ToolContext | None, name: str) -> ToolContext:
    if ctx is None:
        raise RuntimeError(f"agent tool '{name}' needs a run context (a pool to run its model on)")
    return ctx


class PromptAgent(Tool):
    """An agent tool that is one prompt template and one model call."""

    kind = "agent"
    Args = AgentArgs
    template: ClassVar[str]
    max_tokens: ClassVar[int] = 256

    async def run(self, args: Any, ctx: ToolContext | None, model: str | None) -> ToolResult | str:
        ctx = _need(ctx, self.name)
        prompt = render(self.template, task=args.task, context=_context(args))
        out = await ctx.generate([msg("user", prompt)], model=model or ctx.pool.executor,
                                 config=ctx.config("agent", self.max_tokens), name=self.name)
        return out.text.strip()


class ReasonerAgent(PromptAgent):
    name = "reasoner"
    description = "solves a subtask by step-by-step reasoning on the chosen model"
    template = "agent_reasoner"


class ReviewerAgent(PromptAgent):
    name = "reviewer"
    description = "critically checks a claim or solution and gives a verdict"
    template = "agent_reviewer"


class CoderAgent(Tool):
    name = "coder"
    kind = "agent"
    description = "writes a Python program for the subtask, runs it in the sandbox, returns its output"
    Args = AgentArgs
    cost_units = 2.0

    async def run(self, args: Any, ctx: ToolContext | None, model: str | None) -> ToolResult | str:
        ctx = _need(ctx, self.name)
        prompt = render("agent_coder", task=args.task, context=_context(args))
        out = await ctx.generate([msg("user", prompt)], model=model or ctx.pool.executor,
                                 config=ctx.config("agent", 384), name=self.name)
        found = [code for lang, code in code_blocks(out.text) if lang in PYTHON_FENCES]
        code = found[0] if found else out.text
        result = await ctx.call_tool("python", {"code": code, "timeout_s": 10})
        result.data["code"] = code
        return result


class SearcherAgent(Tool):
    name = "searcher"
    kind = "agent"
    description = "retrieves passages from the local corpus and answers from them"
    Args = AgentArgs

    async def run(self, args: Any, ctx: ToolContext | None, model: str | None) -> ToolResult | str:
        ctx = _need(ctx, self.name)
        hits = await ctx.call_tool("retrieve", {"query": args.task, "k": 3})
        if not hits.ok:
            return hits
        prompt = render("agent_searcher", task=args.task, passages=hits.output)
        out = await ctx.generate([msg("user", prompt)], model=model or ctx.pool.executor,
                                 config=ctx.config("agent"), name=self.name)
        return out.text.strip()


class EnsembleAgent(Tool):
    name = "ensemble"
    kind = "agent"
    description = "samples several independent solutions in parallel and returns the majority answer"
    Args = AgentArgs
    samples: int = 3

    async def run(self, args: Any, ctx: ToolContext | None, model: str | None) -> ToolResult | str:
        ctx = _need(ctx, self.name)
        prompt = render("agent_reasoner", task=args.task, context=_context(args))
        outs = await asyncio.gather(*(
            ctx.generate([msg("user", prompt)], model=model or ctx.pool.executor,
                         config=GenerateConfig(max_tokens=256, temperature=0.9), name=f"{self.name}[{i}]")
            for i in range(self.samples)
        ))
        answers = [last_line(o.text) or "" for o in outs]
        winner, votes = majority(answers)
        return ToolResult(status=ToolStatus.OK, output=winner, data={"answers": answers, "votes": votes})


def majority(answers: list[str]) -> tuple[str, int]:
    """The most common answer after :func:`~orchestrion._text.normalize`; ties go to the one seen first."""
    if not answers:
        return "", 0
    counts = Counter(normalize(a) for a in answers)
    best = max(counts.values())
    for a in answers:
        if counts[normalize(a)] == best:
            return a, best
    return answers[0], best


def agent_tools() -> list[Tool]:
    return [ReasonerAgent(), ReviewerAgent(), CoderAgent(), SearcherAgent(), EnsembleAgent()]
