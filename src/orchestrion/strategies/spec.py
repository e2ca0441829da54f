"""LEMON: one orchestration specification, validated, compiled to a plan and executed.

The orchestrator writes a single :class:`OrchestrationSpec`: roles with duties, a
capacity level per role ("low" / "medium" / "high", mapped onto pool models by
tier with :func:`map_capacity`), a primitive (agent tool) per role, and the roles
each one depends on. :func:`spec_error` checks it (empty, duplicate role, unknown
capacity or primitive, unknown or self dependency, cycle) and says what is wrong
in one line naming the role; the decision schema runs that check, so the runtime
re-prompts with the error up to ``max_repairs`` times (default 2).

If no valid spec comes back, the default (``on_invalid="fail"``) ends the episode
cleanly with ``Answer.status = "invalid_spec"`` and the last error in the meta:
a failed design stays a clear negative signal for training instead of being
hidden by a stand-in. ``on_invalid="single_role"`` runs a one-role spec instead.

A valid spec is compiled by :func:`compile_spec` (each role -> a plan subtask on
its capacity's model) and run by :func:`~orchestrion.runtime.plan.execute_plan`;
the final answer is synthesised from the sink roles (those nobody depends on).
The spec stays a plain serialisable pydantic model (in ``Answer.meta["spec"]``
and a ``spec`` trace event), so counterfactual credit can edit one field of it
and compile it again.

A code task (a function stub in the prompt; ``code_examples``, on by default) gets a fixed spec
instead: coder, tester (the docstring's examples in the sandbox) and reviewer, the coder repairing
with the failures and the review (:mod:`._code_roles`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .._errors import PlanError
from .._prompts import render
from ..models.pool import Pool
from ..models.types import msg
from ..runtime.code_work import code_plan
from ..runtime.context import RunContext
from ..runtime.options import POOL_MODEL
from ..runtime.plan import ID_MAX, TASK_MAX, Subtask, execute_plan, results_text
from ..runtime.protocol import narrow
from ..runtime.scheduler import topological_order
from ..runtime.synthesis import synthesize
from ..status import NodeStatus
from ..tools.registry import ToolRegistry
from ._code_roles import spec_review
from ._uno_pairs import tool_available
from .base import Answer, EpisodeStatus, Strategy, Task, register
from .uno import DecisionOptions, decide_with_options

LEVELS: tuple[str, ...] = ("low", "medium", "high")
PRIMITIVES: tuple[str, ...] = ("reasoner", "reviewer", "coder", "ensemble", "searcher")
MAX_ROLES = 6
NAME_MAX = ID_MAX  # a role's name becomes its subtask's id
ROLE_TASK = "You are the {name}. {duty}"  # what a role compiles to, as a subtask's text
# room for a copied question with its options, never a duty whose subtask the plan would reject
DUTY_MAX = TASK_MAX - NAME_MAX - len(ROLE_TASK.format(name="", duty=""))


class Role(BaseModel):
    """One agent of the spec: what it must do, how capable it is, and whose output it needs."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=NAME_MAX)
    duty: str = Field(min_length=1, max_length=DUTY_MAX)
    capacity: str = Field(max_length=12, description="low, medium or high")
    primitive: str = Field(default="reasoner", max_length=12, description="the agent tool that plays the role")
    depends_on: list[Annotated[str, Field(min_length=1, max_length=NAME_MAX)]] = Field(default_factory=list,
                                                                                         max_length=4)


class OrchestrationSpec(BaseModel):
    """The whole design: plain data, so one field can be edited and the spec compiled again."""

    model_config = ConfigDict(extra="ignore")

    roles: list[Role] = Field(default_factory=list, max_length=MAX_ROLES)


def spec_error(
    spec: OrchestrationSpec, levels: Sequence[str] = LEVELS, primitives: Sequence[str] = PRIMITIVES
) -> str | None:
    """The first problem of ``spec`` as one line naming the role and field, or ``None`` if it is valid."""
    if not spec.roles:
        return "the spec has no roles; give at least one"
    seen: set[str] = set()
    for role in spec.roles:
        if role.name in seen:
            return f"duplicate role '{role.name}'; role names must be unique"
        seen.add(role.name)
    for role in spec.roles:
        if role.capacity not in levels:
            return f"role '{role.name}': unknown capacity '{role.capacity}'; use one of {', '.join(levels)}"
        if role.primitive not in primitives:
            return f"role '{role.name}': unknown primitive '{role.primitive}'; use one of {', '.join(primitives)}"
        for dep in role.depends_on:
            if dep == role.name:
                return f"role '{role.name}' depends on itself (a cycle)"
            if dep not in seen:
                return f"role '{role.name}' depends on unknown role '{dep}'"
    try:
        topological_order({r.name: r.depends_on for r in spec.roles})
    except PlanError as exc:
        stuck = str(exc).rpartition(": ")[2]
        return f"dependency cycle among roles: {stuck}"
    return None


class CheckedSpec(OrchestrationSpec):
    """The decision schema: a spec that must pass :func:`spec_error` against these primitives."""

    allowed_primitives: ClassVar[tuple[str, ...]] = PRIMITIVES

    @model_validator(mode="after")
    def _graph(self) -> CheckedSpec:
        problem = spec_error(self, LEVELS, type(self).allowed_primitives)
        if problem:
            raise ValueError(problem)
        return self


def checked_spec(primitives: Sequence[str]) -> type[CheckedSpec]:
    """A decision schema bound to the primitives this run has (one class per episode)."""

    class BoundSpec(CheckedSpec):
        allowed_primitives = tuple(primitives)

    BoundSpec.__name__ = BoundSpec.__qualname__ = "OrchestrationSpec"
    return BoundSpec


def map_capacity(level: str, tiers: Mapping[str, int], levels: Sequence[str] = LEVELS) -> str:
    """The model for a capacity level: the lowest tier for the first level, the highest for the
    last, and in between the tier nearest the level's even share of the tier range. Ties go to
    the lower tier (cheaper), then to the first model in pool order."""
    if level not in levels:
        raise ValueError(f"unknown capacity '{level}'; use one of {', '.join(levels)}")
    if not tiers:
        raise ValueError("the pool has no models")
    low, high = min(tiers.values()), max(tiers.values())
    share = levels.index(level) / (len(levels) - 1) if len(levels) > 1 else 1.0
    target = low + share * (high - low)
    return min(tiers, key=lambda name: (abs(tiers[name] - target), tiers[name]))


def compile_spec(spec: OrchestrationSpec, pool: Pool, levels: Sequence[str] = LEVELS) -> list[Subtask]:
    """Each role becomes one plan subtask on its capacity's model; raises PlanError if the spec is invalid."""
    problem = spec_error(spec, levels)
    if problem:
        raise PlanError(f"invalid orchestration spec: {problem}")
    tiers = {name: pool.spec(name).tier for name in pool.names}
    return [
        Subtask(id=r.name, task=ROLE_TASK.format(name=r.name, duty=r.duty), tool=r.primitive,
                model=map_capacity(r.capacity, tiers, levels), deps=list(r.depends_on))
        for r in spec.roles
    ]


def sinks(spec: OrchestrationSpec) -> list[str]:
    """Roles no other role depends on: their outputs make the answer."""
    needed = {d for r in spec.roles for d in r.depends_on}
    return [r.name for r in spec.roles if r.name not in needed]


def single_role_spec(primitive: str = "reasoner") -> OrchestrationSpec:
    """The ``on_invalid="single_role"`` stand-in: one medium-capacity role that solves the whole task."""
    return OrchestrationSpec(roles=[Role(name="solver", duty="Solve the whole task and give the final answer.",
                                         capacity=LEVELS[len(LEVELS) // 2], primitive=primitive)])


def decision_schema(primitives: Sequence[str], max_roles: int) -> dict[str, Any]:
    """The JSON schema for constrained decoding: capacity and primitive pinned to known values."""
    schema = narrow(OrchestrationSpec.model_json_schema(), {"capacity": list(LEVELS), "primitive": list(primitives)},
                    optional=())
    schema["properties"]["roles"].update(minItems=1, maxItems=max_roles)
    return schema


def available_primitives(tools: ToolRegistry) -> list[str]:
    """The primitives a spec may use with these tools (searcher needs retrieval, coder needs Python)."""
    return [p for p in PRIMITIVES if tool_available(tools, p)
            and (p != "searcher" or tool_available(tools, "retrieve"))
            and (p != "coder" or tool_available(tools, "python"))]


def _capacity_lines(pool: Pool) -> str:
    tiers = {name: pool.spec(name).tier for name in pool.names}
    lines = []
    for level in LEVELS:
        spec = pool.spec(map_capacity(level, tiers))
        price = (
            "price unknown"
            if spec.price is None
            else f"${spec.price.input_per_mtok:g}/${spec.price.output_per_mtok:g} per Mtok"
        )
        described = f": {spec.description}" if spec.description else ""
        lines.append(f"- {level}: {spec.name} (tier {spec.tier}, {price}){described}")
    return "\n".join(lines)


@register
class Spec(Strategy):
    name = "spec"
    summary = "LEMON: write one orchestration spec (roles, capacities, dependencies), validate, compile, execute"
    paper = "LEMON: Learning Executable Multi-Agent Orchestration via Counterfactual RL"

    class Options(DecisionOptions):
        max_roles: int = Field(default=3, ge=1, le=MAX_ROLES,
                               description=f"most roles in the spec (1 to {MAX_ROLES})")
        on_invalid: Literal["fail", "single_role"] = Field(
            default="fail", description="after an invalid spec: end as invalid_spec, or run one role on the whole task")
        code_examples: bool = Field(default=True, description=(
            "a code task (a function stub in the prompt) gets the fixed roles coder, tester (the docstring's "
            "examples in the sandbox) and reviewer, instead of a spec decision"))
        code_rounds: int = Field(default=2, ge=1, le=6, description=(
            "code tasks with examples: most versions the coder writes (each after the first follows a review)"))
        code_reviewer: str | None = Field(default=None, json_schema_extra=POOL_MODEL, description=(
            "code tasks: the reviewer's model (default: the pool's executor, who also codes)"))

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        if opts.code_examples and (code := code_plan(task.prompt)) is not None:
            executor = ctx.pool.executor
            return await spec_review(ctx, task, code, coder=executor, reviewer=opts.code_reviewer or executor,
                                     rounds=opts.code_rounds)
        max_roles = opts.max_roles
        prims = available_primitives(ctx.tools)
        if not prims:
            return Answer("", status=EpisodeStatus.INVALID_SPEC,
                          meta={"error": "no agent tool is registered to play a role"})
        system = msg("system", render("spec_system", capacities=_capacity_lines(ctx.pool), max_roles=max_roles,
                                      primitives=", ".join(prims), levels=", ".join(LEVELS)))
        decision = await decide_with_options(ctx, opts, checked_spec(prims),
                                             [system, msg("user", render("spec_task", task=task.prompt))],
                                             decision_schema(prims, max_roles), "orchestration spec")
        meta: dict[str, Any] = {"invalid_decisions": decision.invalid_attempts, "fallback": False}
        if decision.action is None:
            ctx.tracer.event("spec_invalid", {"error": decision.error, "attempts": len(decision.attempts)})
            if opts.on_invalid != "single_role":
                meta["error"] = decision.error
                return Answer("", status=EpisodeStatus.INVALID_SPEC, meta=meta)
            spec, meta["fallback"], meta["error"] = single_role_spec(prims[0]), True, decision.error
        else:
            spec = OrchestrationSpec.model_validate(decision.action.model_dump())  # plain, editable copy
        plan = compile_spec(spec, ctx.pool)
        meta.update(spec=spec.model_dump(mode="json"), compiled=[s.model_dump(mode="json") for s in plan],
                    sinks=sinks(spec))
        ctx.tracer.event("spec", {"spec": meta["spec"], "compiled": meta["compiled"]})
        results = await execute_plan(ctx, plan, context=f"Overall task: {task.prompt}")
        meta["roles"] = {s.id: results[s.id].status for s in plan}
        final = [s for s in plan if s.id in meta["sinks"]]
        if not any(results[s.id].status == NodeStatus.OK for s in final):
            final = plan  # every sink failed: let the synthesis see what did work
        text = await synthesize(task.prompt, results_text(final, results), ctx)
        return Answer(text, meta=meta)
