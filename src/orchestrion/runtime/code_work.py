"""Writing a code task's function with its own examples as feedback, on the run context.

The strategies that work on code tasks (``topology``'s candidates, ``milestone``'s implement → test
→ repair) share these steps: :func:`code_plan` reads the stub and its examples (maybe none) from the task's
prompt (never from its metadata, where a dataset keeps hidden tests); :func:`write` asks one model
for the function (the task as written, as ``direct`` asks it, or a repair that shows the failing
examples) and :func:`check` runs the examples on it in the sandbox through the ``python`` tool, so
both are traced and budgeted like any call; :func:`best` picks among candidates by the examples
they pass; :func:`code_answer` is the final answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._prompts import render
from ..models.types import Message, msg
from ..tools.envelope import ToolResult
from .code_examples import CodeExample, CodeStub, ExampleCheck, check_program, code_stub, docstring_examples, program_in
from .context import RunContext
from .synthesis import direct_config

CHECK_TIMEOUT_S = 10.0  # one sandboxed run of a program and all its examples


@dataclass(frozen=True)
class CodePlan:
    """The function a code task asks for and the examples its docstring shows."""

    stub: CodeStub
    examples: list[CodeExample]


@dataclass
class Candidate:
    """One version of the function: who wrote it, how, and what its examples showed."""

    program: str
    check: ExampleCheck
    model: str
    label: str
    conversation: list[Message]

    def record(self) -> dict[str, object]:
        return {"label": self.label, "model": self.model, "passed": self.check.passed, "total": self.check.total,
                "error": self.check.error[:200]}


def code_plan(prompt: str) -> CodePlan | None:
    """The stub and the examples its docstring shows (maybe none) when ``prompt`` is a code task."""
    stub = code_stub(prompt)
    return CodePlan(stub, docstring_examples(stub)) if stub is not None else None


async def check(ctx: RunContext, plan: CodePlan, program: str, label: str) -> ExampleCheck:
    """Run the task's examples on ``program`` in the sandbox (the ``python`` tool, traced)."""

    async def run(source: str) -> tuple[bool, str, str]:
        result: ToolResult = await ctx.call_tool("python", {"code": source, "timeout_s": CHECK_TIMEOUT_S},
                                                 label=f"examples: {label}")
        return result.ok, result.output, result.error or ""

    outcome = await check_program(program, plan.examples, run)
    ctx.tracer.event("examples", {"label": label, "passed": outcome.passed, "total": outcome.total,
                                  "error": outcome.error[:300], "failures": outcome.failures[:6]})
    return outcome


async def write(ctx: RunContext, task: str, plan: CodePlan, *, model: str, label: str,
                repair_of: Candidate | None = None, review: str = "") -> Candidate:
    """One candidate on ``model``: the task as written (as ``direct`` asks it), or, with
    ``repair_of``, that candidate's conversation followed by its failing examples (and a
    reviewer's ``review`` of them, when given); then checked."""
    if repair_of is None:
        convo = [msg("user", task)]
    else:
        failures = repair_of.check.feedback() or "no example passed"
        if review:
            failures = f"{failures}\n\nA reviewer read your function and says:\n{review.strip()}"
        convo = [*repair_of.conversation, msg("user", render("code_repair", failures=failures))]
    out = await ctx.generate(convo, model=model, config=direct_config(ctx), name=label)
    program = program_in(out.text, plan.stub)
    outcome = await check(ctx, plan, program, label)
    return Candidate(program, outcome, out.model or model, label, [*convo, msg("assistant", out.text)])


def repeats(candidate: Candidate, earlier: list[Candidate]) -> bool:
    """Whether ``candidate``'s program is one already written (a repair that changed nothing)."""
    return any(c is not candidate and c.program.strip() == candidate.program.strip() for c in earlier)


def best(candidates: list[Candidate]) -> Candidate:
    """The candidate that passes the most examples; a tie goes to the one made first."""
    return max(candidates, key=lambda c: (c.check.passed, -candidates.index(c)))


def code_answer(candidate: Candidate) -> str:
    """The final answer: the chosen program in one Python code block."""
    return f"```python\n{candidate.program.strip()}\n```"


def candidate_models(ctx: RunContext, first: str, most: int) -> list[str]:
    """``first``, then the pool's other models from the highest tier down, ``most`` in all."""
    ranked = sorted(ctx.pool.describe(), key=lambda r: -int(r["tier"]))
    return [first, *[str(r["name"]) for r in ranked if r["name"] != first]][:most]
