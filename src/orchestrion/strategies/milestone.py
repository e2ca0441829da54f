"""E3-Orch: milestone -> plan -> act, re-planned after every milestone.

Instead of planning every subtask up front, the orchestrator works towards one
*milestone* (a mid-level objective) at a time:

1. **milestone** - given the task and the results so far, it names the next
   milestone or declares the task done (not before the first milestone has
   been acted on: the orchestrator delegates, it does not answer by itself);
2. **plan** - for that milestone it writes a dependency-aware plan (a DAG of at
   most 8 subtasks, each with a tool or agent tool and optionally a pool model);
   a plan that cannot run (cycle, unknown dependency, unknown tool, ...) is
   shown back with its error and re-asked a bounded number of times, then
   replaced by one reasoner subtask;
3. **act** - the runtime runs the plan: independent subtasks at once, each
   dependent subtask after its dependencies, with their outputs as context.

Then it goes back to 1 with the new results, at most ``max_milestones`` times
(default 4). A milestone that repeats an earlier one ends the loop (no progress).
The final answer comes from the shared synthesis step.

A code task (a function stub in the prompt; ``code_examples``, on by default) has fixed milestones
instead: implement the function, then test it on its docstring's examples and repair it (:mod:`._code`).

For each milestone the planned subtasks and the ones that ran OK are recorded in
``Answer.meta["milestones"]`` and as a ``milestone`` trace event, which is what
E3-Orch's planning-completeness reward needs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .._prompts import render
from .._text import normalize
from ..models.types import Message, msg
from ..runtime.code_work import code_plan
from ..runtime.context import RunContext
from ..runtime.plan import Subtask, execute_plan, results_text
from ..runtime.protocol import narrow
from ..runtime.synthesis import synthesize
from ._code import milestone_repairs
from ._planning import PlanOptions, ask_plan, fallback_plan
from .base import Answer, Strategy, Task, model_lines, register, tool_lines


class MilestoneStep(BaseModel):
    """The orchestrator's milestone decision: the next objective, or done."""

    model_config = ConfigDict(extra="ignore")

    thought: str = Field(default="", max_length=200)
    done: bool = False
    milestone: str = Field(default="", max_length=300)

    @model_validator(mode="after")
    def _named(self) -> MilestoneStep:
        if not self.done and not self.milestone.strip():
            raise ValueError("milestone is empty: name the next milestone, or set done to true")
        return self


def _progress(records: list[dict[str, Any]], lines: list[str], keep: int = 10) -> str:
    """What has been done so far, short enough for a small model's context."""
    if not records:
        return "Nothing has been done yet."
    done = "\n".join(
        f"Milestone {r['index']}: {r['milestone']} ({len(r['executed_ok'])}/{len(r['planned'])} subtasks ok)"
        for r in records
    )
    shown = lines[-keep:]
    return f"{done}\nResults:\n" + "\n".join(shown)


def _record(index: int, milestone: str, subtasks: list[Subtask], results: dict[str, Any],
            attempts: int, errors: list[str], fallback: bool) -> dict[str, Any]:
    statuses = {s.id: (results[s.id].status if s.id in results else "missing") for s in subtasks}
    ok = [i for i, st in statuses.items() if st == "ok"]
    return {
        "index": index,
        "milestone": milestone,
        "planned": [s.id for s in subtasks],
        "subtasks": [{"id": s.id, "task": s.task, "tool": s.tool, "model": s.model, "deps": list(s.deps),
                      "status": statuses[s.id]} for s in subtasks],
        "executed_ok": ok,
        "completeness": len(ok) / len(subtasks) if subtasks else 0.0,
        "plan_attempts": attempts,
        "plan_errors": errors,
        "fallback": fallback,
    }


@register
class Milestone(Strategy):
    name = "milestone"
    summary = "E3-Orch: milestone -> dependency-aware plan -> parallel act, re-planned after each milestone"
    paper = "E3-Orch: Towards Effective, Efficient, and Extensible Agentic Orchestration with RL"

    class Options(PlanOptions):
        max_milestones: int = Field(default=4, ge=1, description="most milestones, each planned and run in turn")

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        if opts.code_examples and (code := code_plan(task.prompt)) is not None:
            return await milestone_repairs(ctx, task, code, model=ctx.pool.executor, max_milestones=opts.max_milestones)
        max_milestones = opts.max_milestones
        max_subtasks = opts.max_subtasks
        system = msg("system", render("milestone_system", tools=tool_lines(ctx), models=model_lines(ctx),
                                      max_subtasks=max_subtasks))
        step_schema = narrow(MilestoneStep.model_json_schema(), {}, optional=())
        first_schema = narrow(MilestoneStep.model_json_schema(), {}, drop=("done",), optional=())
        records: list[dict[str, Any]] = []
        lines: list[str] = []
        seen: set[str] = set()
        invalid, declared_done, stop_reason = 0, False, "max_milestones"
        for index in range(1, max_milestones + 1):
            ctx.budget.new_round()
            with ctx.tracer.span("milestone", f"milestone {index}") as span:
                if records:
                    prompt = render("milestone_next", task=task.prompt, progress=_progress(records, lines),
                                    index=index, max_milestones=max_milestones)
                else:  # the first milestone cannot be "done": the orchestrator does not answer by itself
                    prompt = render("milestone_first", task=task.prompt, max_milestones=max_milestones)
                step = await ctx.decide(MilestoneStep, [system, msg("user", prompt)],
                                        json_schema=step_schema if records else first_schema, name=f"milestone {index}")
                invalid += step.invalid_attempts
                if step.action is None:
                    if records:  # keep what was done; synthesis answers from it
                        stop_reason = "invalid_milestone"
                        break
                    objective = task.prompt  # nothing done yet: the task itself is the first milestone
                elif step.action.done and records:
                    declared_done, stop_reason = True, "done"
                    break
                else:
                    objective = step.action.milestone.strip() or task.prompt
                key = normalize(objective)
                if key in seen:
                    stop_reason = "repeated_milestone"
                    break
                seen.add(key)
                span.set(milestone=objective)
                record = await self._plan_and_act(ctx, opts, task, system, objective, index, records, lines,
                                                  max_subtasks)
                invalid += record.pop("invalid_outputs")
                records.append(record)
                ctx.tracer.event("milestone", record)
        text = await synthesize(task.prompt, lines, ctx)
        planned = sum(len(r["planned"]) for r in records)
        ok = sum(len(r["executed_ok"]) for r in records)
        meta = {"milestones": records, "done": declared_done, "stop": stop_reason, "invalid_decisions": invalid,
                "subtasks": planned, "subtasks_ok": ok, "completeness": ok / planned if planned else 0.0}
        return Answer(text, meta=meta)

    @staticmethod
    async def _plan_and_act(ctx: RunContext, opts: PlanOptions, task: Task, system: Message, objective: str,
                            index: int, records: list[dict[str, Any]], lines: list[str],
                            max_subtasks: int) -> dict[str, Any]:
        """Plan one milestone, run the plan, append its result lines, and return its record."""
        prompt = render("milestone_plan", task=task.prompt, milestone=objective, progress=_progress(records, lines),
                        max_subtasks=max_subtasks)
        outcome = await ask_plan(ctx, [system, msg("user", prompt)], fallback=fallback_plan(objective),
                                 fix_template="milestone_fix", name=f"plan {index}",
                                 max_subtasks=max_subtasks, repairs=opts.plan_repairs,
                                 max_tokens=opts.plan_max_tokens)
        context = "\n".join(lines[-8:])
        context = (
            f"Overall task: {task.prompt}\nEarlier results:\n{context}" if context else f"Overall task: {task.prompt}"
        )
        results = await execute_plan(ctx, outcome.subtasks, context=context,
                                     node_timeout_s=opts.node_timeout_s or None)
        lines.extend(f"M{index} {line}" for line in results_text(outcome.subtasks, results, limit=300))
        record = _record(index, objective, outcome.subtasks, results, outcome.attempts, outcome.errors,
                         outcome.fallback)
        record["invalid_outputs"] = outcome.invalid_outputs
        return record
