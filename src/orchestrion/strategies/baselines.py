"""Baselines: single-model strategies to compare orchestration against.

- ``direct``: one call, no tools (on option ``model``, default the orchestrator); given client
  tools (serve's ``tools``), each decision answers or calls one of them
  (:func:`~orchestrion.runtime.client_actions.answer_with_client_tools`).
- ``program``: the coder agent writes and runs a program for the whole task.
- ``cot``: one chain-of-thought call; the answer is its marked final answer, else its
  last line (:func:`~orchestrion._text.extract_answer`, as the scorers read it).
- ``vote``: ``k`` chain-of-thought samples in parallel, majority after normalisation.
- ``self-refine``: draft, then critique and refine until the critic is satisfied
  or ``max_iters`` rounds have run (Madaan et al., 2023).
- ``react``: one sub-agent holding every registered tool; its history is
  synthesised into an answer when it ends without one.

``cot``, ``vote`` and ``self-refine`` take the answer out of the model's text with
:func:`~orchestrion.runtime.parts.task_answer`: a multi-part task's answer is its labelled lines
(``1: ...``, ``2: ...``), not the last of them; ``vote`` then votes part by part.

Every baseline except ``direct`` records the model it ran on in ``meta["model"]``,
so its scored episodes are data for the ``router`` baseline.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pydantic import Field

from .._errors import BudgetExceededError
from .._prompts import render
from .._text import normalize
from ..models.types import GenerateConfig, msg
from ..runtime.client_actions import answer_with_client_tools
from ..runtime.context import RunContext
from ..runtime.options import POOL_MODEL, StrategyOptions
from ..runtime.parts import is_multipart, parse_parts, task_answer
from ..runtime.subagent import Harness, SubAgent, SubAgentReport
from ..runtime.synthesis import Evidence, answer_directly, synthesize
from ..tools.agents import majority
from .base import Answer, EpisodeStatus, Strategy, Task, register

_VERDICT = re.compile(r"verdict", re.IGNORECASE)
_APPROVE = {"ok", "okay", "correct", "fine", "good", "accept", "accepted"}
_REJECT = {"revise", "incorrect", "wrong", "not", "no", "reject", "rejected", "improve"}


def critique_satisfied(text: str) -> bool:
    """Whether a critique approves the draft: its last ``VERDICT`` line says ok/correct
    and has no negating word. No verdict line counts as not satisfied."""
    for line in reversed(text.splitlines()):
        if _VERDICT.search(line):
            words = set(re.findall(r"[a-z]+", line.lower()))
            return bool(words & _APPROVE) and not words & _REJECT
    return False


class SamplingOptions(StrategyOptions):
    """Options of the baselines that sample answers themselves."""

    temperature: float | None = Field(
        default=None, ge=0, description="sampling temperature of the answer calls (default: the agent temperature)")


class ModelOptions(SamplingOptions):
    """Sampling options plus the model the baseline runs on."""

    model: str | None = Field(default=None, json_schema_extra=POOL_MODEL,
                              description="pool model to run on (default: the pool's orchestrator)")


def _model(ctx: RunContext, opts: ModelOptions) -> str:
    """Option ``model`` (checked against the pool), else the pool's orchestrator."""
    name = opts.model or ctx.pool.orchestrator
    ctx.pool.spec(name)
    return name


def _config(ctx: RunContext, opts: SamplingOptions, *, temperature: float | None = None,
            seed: int | None = None) -> GenerateConfig:
    """Sampling settings from the options; the ``seed`` option makes a run repeatable."""
    if temperature is None:
        temperature = ctx.temperature("agent") if opts.temperature is None else opts.temperature
    return GenerateConfig(max_tokens=opts.max_tokens, temperature=temperature, seed=opts.seed if seed is None else seed)


@register
class Direct(Strategy):
    name = "direct"
    summary = "one call to the orchestrator model, no tools"
    answers_directly = True
    calls_client_tools = True  # serve's client tools: it answers or calls one per decision

    class Options(ModelOptions):
        """``model``, ``temperature``, ``max_tokens`` and ``seed`` of the one call."""

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        if ctx.client_tools is not None and ctx.client_tools.spec.offered:  # serve's client tools: it may call them
            text = await answer_with_client_tools(task.prompt, ctx, model=_model(ctx, opts), config=_config(ctx, opts))
            return Answer(text, meta={"model": _model(ctx, opts), "client_tool_calls": ctx.client_tools.called})
        out = await answer_directly(task.prompt, ctx, model=_model(ctx, opts), config=_config(ctx, opts))
        return Answer(out.text.strip(), meta={"model": out.model})


@register
class Program(Strategy):
    """The ``coder`` agent tool on the unchanged task: it writes a program, runs it in the
    sandbox and retries a failed run once; the answer is the last line the program printed,
    as printed (a synthesis step retyped correct sorted lists wrongly in 12 of 13 misses on
    ``word_sorting``), or, when no run printed anything, ``direct``'s answer."""

    name = "program"
    summary = "the coder agent writes and runs a program for the whole task; the answer is grounded on its output"

    class Options(ModelOptions):
        """``model`` the coder writes on (default: the pool's executor); ``max_tokens`` of the answer."""

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        model = opts.model or ctx.pool.executor
        ctx.pool.spec(model)
        result = await ctx.call_tool("coder", {"task": task.prompt[:4000]}, model=model)
        printed = Evidence(result.output).citable() if result.ok else ""
        if printed:  # the program printed the answer: it is the answer, retyped by no model
            return Answer(f"Answer: {printed}", meta={"model": model, "program_ok": True})
        text = await synthesize(task.prompt, [], ctx)  # no result: direct's answer (no evidence, no harm)
        return Answer(text, meta={"model": model, "program_ok": False})


@register
class ChainOfThought(Strategy):
    """Answer.text is the extracted answer line; the full reasoning is in ``meta["reasoning"]``."""

    name = "cot"
    summary = "one chain-of-thought call; the answer is the last line"

    class Options(ModelOptions):
        """``model``, ``temperature``, ``max_tokens`` and ``seed`` of the one call."""

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        model = _model(ctx, opts)
        out = await ctx.generate([msg("user", render("cot", task=task.prompt))], model=model,
                                 config=_config(ctx, opts), name="cot")
        reasoning = out.text.strip()
        return Answer(task_answer(task, reasoning) or reasoning, meta={"model": model, "reasoning": reasoning})


@register
class Vote(Strategy):
    """Majority vote over ``k`` concurrent chain-of-thought samples.

    Answers are compared after :func:`~orchestrion._text.normalize`; a tie
    goes to the tied answer that was sampled first (sample index order, not
    completion order), and the text returned is that sample's own spelling.
    A multi-part task is voted part by part (:func:`part_majorities`): whole multi-part answers
    rarely agree, each part's answer often does.
    """

    name = "vote"
    summary = "majority vote over k chain-of-thought samples run in parallel (k=5)"

    class Options(ModelOptions):
        k: int = Field(default=5, ge=1, description="chain-of-thought samples to vote over (at least 1)")
        temperature: float = Field(default=0.8, ge=0, description="sampling temperature of the samples")

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        k = opts.k
        model = _model(ctx, opts)
        seed = opts.seed
        prompt = [msg("user", render("cot", task=task.prompt))]
        outs = await ctx.parallel(
            ctx.generate(prompt, model=model, name=f"sample {i}",
                         config=_config(ctx, opts, temperature=opts.temperature,
                                        seed=None if seed is None else seed + i))
            for i in range(k)
        )
        answers = [task_answer(task, o.text) or "" for o in outs]
        if is_multipart(task) and (by_part := part_majorities(answers)):
            text = "\n".join(f"{n}: {winner}" for n, (winner, _) in by_part.items())
            return Answer(text, meta={"model": model, "k": k, "answers": answers,
                                      "votes": {str(n): votes for n, (_, votes) in by_part.items()}})
        winner, votes = majority(answers)
        distribution = dict(Counter(normalize(a) for a in answers).most_common())
        return Answer(winner, meta={"model": model, "k": k, "votes": votes, "answers": answers,
                                    "distribution": distribution})


def part_majorities(answers: list[str]) -> dict[int, tuple[str, int]]:
    """Each part's majority over multi-part answers, by part number in order: (its answer, its
    votes), as :func:`~orchestrion.tools.agents.majority` picks it among the answers that have
    the part; empty when no answer has a labelled line."""
    parsed = [parse_parts(a) for a in answers]
    numbers = sorted({n for p in parsed for n in p})
    return {n: majority([p[n] for p in parsed if n in p]) for n in numbers}


@register
class SelfRefine(Strategy):
    """Draft, then up to ``max_iters`` rounds of critique + refinement.

    The loop stops early when a critique approves the current draft
    (:func:`critique_satisfied`); otherwise it ends after exactly ``max_iters``
    refinements, so it always terminates. A budget stop after the first draft
    returns the latest draft with status ``budget_exceeded``.
    """

    name = "self-refine"
    summary = "draft, then critique and refine on the same model until approved (max_iters=3)"

    class Options(ModelOptions):
        max_iters: int = Field(default=3, ge=0, description="most critique + refine rounds after the draft "
                                                            "(0 = the draft alone)")

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        max_iters = opts.max_iters
        model = _model(ctx, opts)
        cfg = _config(ctx, opts)
        draft = (await ctx.generate([msg("user", render("cot", task=task.prompt))], model=model,
                                    config=cfg, name="draft")).text.strip()
        critiques: list[str] = []
        refinements, stopped, status = 0, "max_iters", EpisodeStatus.OK
        try:
            for i in range(1, max_iters + 1):
                critique = (await ctx.generate([msg("user", render("refine_critique", task=task.prompt, draft=draft))],
                                               model=model, config=cfg, name=f"critique {i}")).text.strip()
                critiques.append(critique)
                if critique_satisfied(critique):
                    stopped = "satisfied"
                    break
                prompt = render("refine_improve", task=task.prompt, draft=draft, feedback=critique)
                draft = (await ctx.generate([msg("user", prompt)], model=model, config=cfg,
                                            name=f"refine {i}")).text.strip()
                refinements += 1
        except BudgetExceededError as exc:
            stopped, status = f"budget: {exc}", EpisodeStatus.BUDGET_EXCEEDED
        meta = {"model": model, "refinements": refinements, "stopped": stopped, "critiques": critiques,
                "final_draft": draft}
        return Answer(task_answer(task, draft) or draft, status=status, meta=meta)


@register
class ReAct(Strategy):
    """One sub-agent (ReAct loop) with every registered tool and a step budget.

    Its ``finish`` answer is the answer. When it ends otherwise (revise, stop,
    exhausted, or finish without an answer) the answer is synthesised from its
    tool results and final message; ``meta["ended"]`` records how it ended. The
    status is ``ok`` whenever an answer came out, else ``no_answer``.
    """

    name = "react"
    summary = "one ReAct agent holding every tool, with a step budget (max_steps=10)"

    class Options(StrategyOptions):
        model: str | None = Field(default=None, json_schema_extra=POOL_MODEL,
                                  description="pool model the agent runs on (default: the pool's orchestrator)")
        max_steps: int = Field(default=10, ge=1, description="step budget of the agent")

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        model = opts.model or ctx.pool.orchestrator
        ctx.pool.spec(model)
        harness = Harness(instruction=task.prompt, model=model, tools=list(ctx.tools.names),
                          step_budget=opts.max_steps)
        ctx.budget.new_subagent()
        agent = SubAgent(ctx, harness, name="react")
        report = await agent.run()
        tool_results = [step.text for step in agent.log if step.kind == "tool_result"]
        meta: dict[str, Any] = {"model": model, "ended": report.kind, "steps": agent.steps_used,
                                "tool_calls": len(tool_results), "synthesized": False}
        if report.kind == "finish" and report.answer.strip():
            return Answer(report.answer.strip(), meta=meta)
        text = await synthesize(task.prompt, _findings(tool_results, report), ctx)
        meta["synthesized"] = True
        return Answer(text, status=EpisodeStatus.OK if text else EpisodeStatus.NO_ANSWER, meta=meta)


def _findings(tool_results: list[str], report: SubAgentReport) -> list[str]:
    """What the agent learned, for synthesis: its tool results, then its last message."""
    out = list(tool_results)
    if report.kind != "exhausted" or report.answer or report.evidence:
        out.append("agent's last message: " + report.summary())
    return out
