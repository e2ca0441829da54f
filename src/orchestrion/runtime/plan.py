"""Plans: a DAG of subtasks, each delegated to a tool or agent tool, run by the scheduler.

Strategies that plan (milestone, topology, uno, spec) describe their plan as
:class:`Subtask` rows and call :func:`execute_plan`; the runtime validates the
graph (unknown dependency, cycle, duplicate id), runs every ready subtask at
once (bounded by ``max_parallel`` and per-model limits), hands each subtask the
outputs of its dependencies as context, and traces each node as a ``node`` span
whose attributes carry its dependencies (so viewers can draw the DAG).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..status import NodeStatus
from ..tools.envelope import ToolResult, ToolStatus
from .context import RunContext
from .scheduler import Node, NodeResult, run_dag, topological_order

ID_MAX = 24  # characters of one subtask's id
TASK_MAX = 500  # characters of one subtask's text
# output tokens of one call that writes a plan: several subtasks that each copy a long question fit
PLAN_TOKENS = 512


class Subtask(BaseModel):
    """One plan node as an orchestrator writes it."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1, max_length=ID_MAX)
    task: str = Field(min_length=1, max_length=TASK_MAX)
    tool: str = Field(default="reasoner", max_length=40)
    model: str | None = Field(default=None, max_length=80)
    deps: list[str] = Field(default_factory=list, max_length=8)


class Plan(BaseModel):
    """A list of subtasks with dependencies; order does not matter."""

    model_config = ConfigDict(extra="ignore")

    subtasks: list[Subtask] = Field(min_length=1, max_length=8)


def validate_plan(subtasks: list[Subtask]) -> list[str]:
    """Check ids and dependencies; return a topological order or raise PlanError."""
    from .._errors import PlanError

    ids = [s.id for s in subtasks]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise PlanError(f"duplicate subtask ids: {', '.join(dupes)}")
    return topological_order({s.id: s.deps for s in subtasks})


def subtask_args(ctx: RunContext, sub: Subtask, context: str) -> dict[str, Any] | None:
    """Arguments for the subtask's tool: agent tools get the dependency results as context."""
    if sub.tool not in ctx.tools:
        return None
    tool = ctx.tools.get(sub.tool)
    if tool.kind == "agent":
        return {"task": sub.task, "context": context[:8000]}
    return tool.args_from_input(sub.task)


async def execute_plan(
    ctx: RunContext,
    subtasks: list[Subtask],
    *,
    context: str = "",
    node_timeout_s: float | None = None,
) -> dict[str, NodeResult]:
    """Run a validated plan; each node's value is its :class:`ToolResult`.

    A node whose tool result is not OK counts as failed, so its dependents are
    skipped with that reason rather than run on bad input.
    """
    validate_plan(subtasks)

    def make(sub: Subtask) -> Node:
        async def run(inputs: Mapping[str, Any]) -> ToolResult:
            dep_text = "\n".join(f"[{d}] {r.output.strip()[:1500]}" for d, r in inputs.items())
            full = "\n".join(x for x in (context, dep_text) if x)
            with ctx.tracer.span("node", sub.id, task=sub.task, tool=sub.tool, model=sub.model, deps=sub.deps):
                result = await ctx.call_tool(sub.tool, subtask_args(ctx, sub, full), model=sub.model, label=sub.tool)
            if result.status is not ToolStatus.OK:
                raise RuntimeError(result.feedback(300))
            return result

        return Node(sub.id, run, tuple(sub.deps), node_timeout_s)

    limit = ctx.strategy_options.max_parallel
    return await run_dag([make(s) for s in subtasks], max_parallel=limit or None)


def results_text(subtasks: list[Subtask], results: Mapping[str, NodeResult], limit: int = 600) -> list[str]:
    """One line per subtask, for synthesis prompts: id, task, status and output or error."""
    lines = []
    for sub in subtasks:
        res = results.get(sub.id)
        if res is None:
            continue
        ok = res.status == NodeStatus.OK and isinstance(res.value, ToolResult)
        body = res.value.output if ok else (res.error or "")
        lines.append(f"[{sub.id}] {sub.task[:120]} ({res.status}): {body.strip()[:limit]}")
    return lines
