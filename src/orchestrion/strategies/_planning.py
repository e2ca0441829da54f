"""Asking the orchestrator for a plan: a pinned schema, checks, feedback and a fallback.

Planning strategies (milestone, topology, ...) all need the same loop: ask for a
:class:`~orchestrion.runtime.plan.Plan` under a schema whose tool and model names
are pinned (so a constrained decoder cannot invent them), check the graph before
anything runs (size, duplicate ids, unknown dependency, cycle, unknown tool or
model), show the orchestrator what was wrong and ask again a bounded number of
times, and fall back to a known-good plan when it never gets it right. Every
rejected plan stays in the trace as a decision plus a ``plan_rejected`` event.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import Field

from .._errors import ModelError, PlanError
from .._prompts import render
from ..models.types import Message, msg
from ..runtime.context import ORCHESTRATOR_CONFIG, RunContext
from ..runtime.options import StrategyOptions
from ..runtime.plan import PLAN_TOKENS, Plan, Subtask, validate_plan
from ..runtime.protocol import narrow

MAX_SUBTASKS = 8  # Plan's own limit


class PlanOptions(StrategyOptions):
    """Options of the strategies that plan with :func:`ask_plan` and run the plan (milestone, topology)."""

    max_subtasks: int = Field(default=MAX_SUBTASKS, ge=1, le=MAX_SUBTASKS,
                              description=f"most subtasks per plan (1 to {MAX_SUBTASKS})")
    plan_repairs: int = Field(default=2, ge=0,
                              description="re-prompts after a plan with a graph error, before the fallback plan")
    plan_max_tokens: int = Field(default=PLAN_TOKENS, ge=1, description="output-token limit of each planning call")
    node_timeout_s: float | None = Field(default=None, gt=0,
                                         description="time limit per plan node in seconds (default: none)")
    code_examples: bool = Field(default=True, description=(
        "on a code task (a function stub in the prompt), write the function and test it on its docstring's "
        "examples instead of planning subtasks"))


@dataclass
class PlanOutcome:
    """The plan to run and how it was obtained."""

    subtasks: list[Subtask]
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    fallback: bool = False
    invalid_outputs: int = 0


def plan_schema(ctx: RunContext, max_subtasks: int = MAX_SUBTASKS) -> dict[str, Any]:
    """Plan's JSON schema for constrained decoding: tools and models pinned, strings no longer than
    :class:`Subtask`'s own fields allow (a task of several questions hands each one on whole, with
    its options: a shorter grammar cut such copies off mid-question)."""
    # ``deps`` is optional (omitted = no deps) so that a grammar lists it after id, task and tool
    schema = narrow(Plan.model_json_schema(), {"tool": ctx.tools.names, "model": ctx.pool.names},
                    optional=("model", "deps"))
    schema["properties"]["subtasks"]["maxItems"] = max_subtasks  # 1 to MAX_SUBTASKS: option max_subtasks
    props = schema["$defs"]["Subtask"]["properties"]
    props["id"]["maxLength"] = 12
    props["deps"]["items"]["maxLength"] = 12
    props["deps"]["maxItems"] = max_subtasks - 1  # the other subtasks at most (none in a plan of one)
    return schema


def check_plan(ctx: RunContext, subtasks: list[Subtask], max_subtasks: int = MAX_SUBTASKS) -> list[str]:
    """Raise :class:`PlanError` unless the plan can run here; return a topological order."""
    if len(subtasks) > max_subtasks:
        raise PlanError(f"plan has {len(subtasks)} subtasks; at most {max_subtasks} are allowed")
    order = validate_plan(subtasks)
    for sub in subtasks:
        if sub.tool not in ctx.tools:
            raise PlanError(
                f"subtask '{sub.id}' uses unknown tool '{sub.tool}'; choose one of: {', '.join(ctx.tools.names)}"
            )
        if sub.model is not None and sub.model not in ctx.pool.names:
            raise PlanError(
                f"subtask '{sub.id}' names unknown model '{sub.model}'; choose one of: {', '.join(ctx.pool.names)}"
            )
    return order


def fallback_plan(task: str, tool: str = "reasoner") -> list[Subtask]:
    """One subtask that hands the whole objective to one agent."""
    return [Subtask(id="s1", task=task[:500] or "answer the task", tool=tool)]


async def ask_plan(
    ctx: RunContext,
    messages: list[Message],
    *,
    fallback: list[Subtask],
    fix_template: str,
    name: str = "plan",
    max_subtasks: int = MAX_SUBTASKS,
    repairs: int = 2,
    max_tokens: int = PLAN_TOKENS,
) -> PlanOutcome:
    """Ask for a plan; on a graph error, show the error and ask again (at most ``repairs`` times).

    Schema-invalid output is repaired inside :meth:`RunContext.decide`; if that
    still gives no plan, or every graph was rejected, ``fallback`` is used. The
    number of orchestrator calls is at most ``(repairs + 1) * 3``.
    """
    schema = plan_schema(ctx, max_subtasks)
    config = replace(ORCHESTRATOR_CONFIG, max_tokens=max_tokens)
    convo = list(messages)
    outcome = PlanOutcome(subtasks=fallback)
    for attempt in range(repairs + 1):
        try:
            decision = await ctx.decide(Plan, convo, json_schema=schema, config=config, name=f"{name} {attempt + 1}")
        except ModelError as exc:  # e.g. the repair conversation outgrew a small model's context
            outcome.errors.append(f"planning call failed: {exc}")
            break
        outcome.attempts += 1
        outcome.invalid_outputs += decision.invalid_attempts
        if decision.action is None:
            outcome.errors.append(f"no valid plan: {decision.error}")
            break
        subtasks = decision.action.subtasks
        try:
            check_plan(ctx, subtasks, max_subtasks)
        except PlanError as exc:
            outcome.errors.append(str(exc))
            ctx.tracer.event("plan_rejected", {"name": name, "attempt": attempt + 1, "error": str(exc),
                                               "plan": [s.model_dump() for s in subtasks]})
            shown = decision.action.model_dump_json(exclude_none=True)
            convo = [*convo, msg("assistant", shown[:800]), msg("user", render(fix_template, error=str(exc)))]
            continue
        outcome.subtasks = subtasks
        return outcome
    outcome.fallback = True
    ctx.tracer.event("plan_fallback", {"name": name, "errors": outcome.errors})
    return outcome
