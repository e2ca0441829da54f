"""Agent tools (Agent-as-Tool): executor strategies with the same call shape as tools.

Each agent tool runs a subtask on a model the caller chooses (``model``), through
the run context, so its model calls are traced and costed under the tool's span.
"""

from __future__ import annotations

import ast
import asyncio
import re
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field

from .._prompts import render
from .._text import PYTHON_FENCES, code_blocks, last_line, normalize, only_comments, without_answer_line_hint
from ..models.types import GenerateConfig, msg
from .envelope import ToolResult, ToolStatus
from .registry import Tool

if TYPE_CHECKING:
    from .context import ToolContext


class AgentArgs(BaseModel):
    task: str = Field(min_length=1, max_length=4000, description="the subtask, self-contained")
    context: str = Field(default="", max_length=8000, description="facts or results the agent needs")


ORIGINAL_MAX_CHARS = 4000  # the original task shown beside a subtask, at most


def _context(args: AgentArgs, ctx: ToolContext) -> str:
    """The ``{context}`` block: the episode's task verbatim when the subtask is not that task
    (an orchestrator's paraphrase must not lose facts, options or the answer format), then the
    caller's context."""
    parts = []
    original = (ctx.original_task or "").strip()
    part_of_it = bool(original) and normalize(original) != normalize(args.task)
    if part_of_it and original not in args.context:
        parts.append("The whole task, as the user wrote it (your subtask is part of it):\n"
                     + original[:ORIGINAL_MAX_CHARS])
    if args.context:
        parts.append(f"Context: {args.context}")
    if part_of_it:  # a task of several questions shown whole: the agent answered them all, not its own
        parts.append("Work only on what follows, not on the rest of the whole task.")
    return "".join(p + "\n\n" for p in parts)


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
        prompt = render(self.template, task=args.task, context=_context(args, ctx))
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


_ANSWER_LINE = re.compile(r"^(?:final answer|answer)\s*:.*$", re.IGNORECASE | re.MULTILINE)


def program_of(text: str) -> str:
    """The first Python code block of a reply, else the whole reply. Small models copy the task's
    answer-format line ("Answer: ...") into the program: when the code does not compile, such
    lines (at the start of a line, never valid Python there) are dropped if that makes it compile."""
    found = [code for lang, code in code_blocks(text) if lang in PYTHON_FENCES]
    code = found[0] if found else text
    try:
        compile(code, "<program>", "exec")
    except (SyntaxError, ValueError):
        cleaned = _ANSWER_LINE.sub("", code)
        if not cleaned.strip():  # nothing but an answer line: no program to run
            return code
        try:
            compile(cleaned, "<program>", "exec")
        except (SyntaxError, ValueError):
            return code
        return cleaned
    return code


_BRANCHES = (ast.If, ast.IfExp, ast.For, ast.While, ast.Try, ast.Match, ast.comprehension, ast.BoolOp, ast.Compare)


def prints_only_literals(code: str) -> bool:
    """True when ``code`` runs straight through (no branch, loop, comparison or condition) and
    every ``print`` in it prints literals only: its output was typed in, not computed. A literal
    printed under a condition (``if ok: print("True")``) is computed and does not count."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    prints = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id == "print"]
    if not prints or any(isinstance(n, _BRANCHES) for n in ast.walk(tree)):
        return False
    args = [a for call in prints for a in call.args]
    return bool(args) and all(isinstance(a, ast.Constant) for a in args)


def _program_problem(result: ToolResult, code: str) -> str | None:
    """Why a program's run does not answer (failed, printed nothing, or printed a value typed into
    it); None when it does."""
    if only_comments(code):
        return ("it is only comments, so it computes and prints nothing; write Python statements that hold the "
                "task's data as values, compute the answer from them, and print() it")
    if prints_only_literals(code):
        return ("it prints a value typed into the program, not one it computes; put the task's data into "
                "variables and compute the answer from them with Python statements, then print() it")
    if not result.ok:
        return f"it failed ({result.status.value}): {(result.error or result.output).strip()[-600:]}"
    if not result.output.strip() or result.data.get("empty"):
        return "it printed nothing; it must end by printing the answer with print()"
    return None


def _worked(examples: list[tuple[str, str]]) -> str:
    """The program library's examples as the coder prompt's ``{examples}`` block ("" for none)."""
    if not examples:
        return ""
    shown = "\n".join(f"\nTask: {without_answer_line_hint(task)[:1200]}\n```python\n{code.strip()[:1500]}\n```"
                      for task, code in examples)
    return render("agent_coder_examples", examples=shown)


class CoderAgent(Tool):
    """Writes a program for a (sub)task, runs it in the sandbox and returns what it printed.

    The prompt names no kind of task: it asks for the question actually asked (the last,
    unanswered item of a few-shot prompt), a program that computes it from the task's own data,
    and one printed answer in the task's form. Programs that answered similar ``@train`` tasks
    correctly before (the run context's program library, option ``worked_programs``) are shown
    as worked examples. A run that fails, prints nothing or, for the whole task, prints an answer
    that does not fit the task's format (its options, a number) is retried once with the reason."""

    name = "coder"
    kind = "agent"
    description = ("writes a Python program that computes the answer from the task's data (counting, sorting, "
                   "dates, orderings, arithmetic, checks), runs it in the sandbox and returns what it printed")
    Args = AgentArgs
    cost_units = 2.0
    retries = 1  # a failed, silent or out-of-format run is retried once, with the reason shown
    max_tokens = 384  # of each program
    # Two programs of up to 384 tokens each: at 15 tokens/s (the 1.5B on 2 cores) that is about a
    # minute before prompts, so the registry's default 60 s cut every retry of a long first program.
    timeout_s = 180.0

    async def run(self, args: Any, ctx: ToolContext | None, model: str | None) -> ToolResult | str:
        ctx = _need(ctx, self.name)
        examples = _worked(await ctx.worked_programs(ctx.original_task or args.task))
        whole = normalize(ctx.original_task or args.task) == normalize(args.task)
        shown = without_answer_line_hint(args.task)  # the program prints its answer; it writes no "Answer:" line
        convo = [msg("user", render("agent_coder", task=shown, context=_context(args, ctx), examples=examples))]
        result = ToolResult(status=ToolStatus.EXEC_ERROR, error="no program was written")
        for attempt in range(1 + self.retries):
            out = await ctx.generate(convo, model=model or ctx.pool.executor,
                                     config=ctx.config("agent", self.max_tokens),
                                     name=self.name if attempt == 0 else f"{self.name} retry {attempt}")
            code = program_of(out.text)
            result = await ctx.call_tool("python", {"code": code, "timeout_s": 10})
            result.data.update(code=code, attempts=attempt + 1, worked_examples=examples.count("\nTask: "))
            problem = _program_problem(result, code)
            if problem is not None and out.finish_reason == "length":
                problem = (f"the program was cut off at the {self.max_tokens}-token limit before it ended, so "
                           f"{problem}; write a shorter one: no comments, a loop instead of repeated lines")
            printed = last_line(result.output) or ""
            if problem is None and whole and (misfit := ctx.answer_misfit(printed)):
                problem = f"it printed {printed[:200]!r}, which is not an answer: {misfit}"
            if problem is None:
                break
            result = ToolResult(status=result.status if not result.ok else ToolStatus.EXEC_ERROR,
                                output=result.output, error=problem, data=result.data)
            convo = [*convo, msg("assistant", out.text), msg("user", render("agent_coder_retry", problem=problem))]
        return result


class SolveDirectlyArgs(BaseModel):
    task: str = Field(default="", max_length=4000, description="leave empty: the task goes to the model unchanged")


class SolveDirectlyAgent(Tool):
    """The ``direct`` baseline as an action: the unchanged task, on the chosen model."""

    name = "solve_directly"
    kind = "agent"
    description = ("sends the whole task, unchanged, to the chosen model to answer by itself; best when the "
                   "task needs judgment or reading rather than computation")
    Args = SolveDirectlyArgs

    async def run(self, args: Any, ctx: ToolContext | None, model: str | None) -> ToolResult | str:
        ctx = _need(ctx, self.name)
        task = ctx.original_task or args.task
        if not task.strip():
            return ToolResult(status=ToolStatus.INVALID_ARGS, error="no task to send: the episode has none and "
                                                                    "the call gave none")
        out = await ctx.generate([msg("user", render("direct", task=task))], model=model or ctx.pool.orchestrator,
                                 config=ctx.config("agent", 256), name=self.name)
        return out.text.strip()


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
    """Samples ``samples`` solutions and returns the majority of their last lines; on the whole of
    a multi-part task, of their labelled lines taken whole (a tie goes to the first sample)."""

    name = "ensemble"
    kind = "agent"
    description = "samples several independent solutions in parallel and returns the majority answer"
    Args = AgentArgs
    samples: int = 3

    async def run(self, args: Any, ctx: ToolContext | None, model: str | None) -> ToolResult | str:
        ctx = _need(ctx, self.name)
        prompt = render("agent_reasoner", task=args.task, context=_context(args, ctx))
        outs = await asyncio.gather(*(
            ctx.generate([msg("user", prompt)], model=model or ctx.pool.executor,
                         config=GenerateConfig(max_tokens=256, temperature=0.9), name=f"{self.name}[{i}]")
            for i in range(self.samples)
        ))
        # the whole of a multi-part task: each sample's labelled lines, not its last line alone
        whole = normalize(ctx.original_task or args.task) == normalize(args.task)
        answers = [(ctx.parts_answer(o.text) if whole else None) or last_line(o.text) or "" for o in outs]
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
    return [ReasonerAgent(), ReviewerAgent(), CoderAgent(), SearcherAgent(), EnsembleAgent(), SolveDirectlyAgent()]
