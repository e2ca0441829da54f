"""Uno-Orchestra: selective decomposition over admissible (model, primitive) pairs.

One orchestrator decision picks a mode. ``direct``: one (model, primitive) pair
answers the whole task and its output is the answer. ``decompose``: 2-6 subtasks,
each on its own admissible pair, run as a plan (independent subtasks at once,
``deps`` respected), then one synthesis call.

Primitives map onto agent tools: direct -> one plain model call (added here as
the ``direct`` agent tool), cot -> ``reasoner``, code -> ``coder`` (needs
``python``), retrieval -> ``searcher`` (needs a ``retrieve`` tool that has a
corpus), ensemble -> ``ensemble``. A pair is admissible when its model is in the
pool, its tools are registered and, under the ``max_cost_usd`` option, its
estimated cost is known and fits the cap. The decision schema pins model and
primitive names to admissible ones; a validator rejects inadmissible pairs, bad
dependencies and plans over the cap, so the runtime re-prompts with the error. The pairs, their
priors, costs and utility are in :mod:`._uno_pairs`.

Accuracy-cost objective: the prompt shows tiers, prices and the weight λ
(option ``cost_weight``, per dollar). If the decision is still invalid after the
repairs, :func:`choose_pair` answers directly with the pair of best
:func:`utility` (tier as accuracy prior, price x expected tokens as cost; pairs
of unknown cost come after every known-cost pair and are never costed as 0).
With no admissible pair at all the episode ends with status ``no_admissible_pair``.

A code task (a function stub in the prompt; ``code_examples``, on by default) is not decided:
the (model, direct) pairs write the function one after another in utility order, the next only
when the docstring's examples fail (:mod:`._code_roles`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .._errors import PlanError
from .._prompts import render
from ..models.pool import Pool
from ..models.types import Message, msg
from ..runtime.code_work import code_plan
from ..runtime.context import ORCHESTRATOR_CONFIG, Decision, RunContext
from ..runtime.options import StrategyOptions
from ..runtime.plan import ID_MAX, PLAN_TOKENS, TASK_MAX, Subtask, execute_plan, results_text
from ..runtime.protocol import narrow
from ..runtime.scheduler import topological_order
from ..runtime.synthesis import synthesize
from ..tools.agents import PromptAgent
from ..tools.registry import ToolRegistry
from ._code_roles import uno_escalation
from ._uno_pairs import PRIMITIVE_HELP, Pair, admissible_pairs, by_utility, choose_pair, utility
from ._uno_pairs import PRIMITIVE_TOOLS as PRIMITIVE_TOOLS  # read by train.records
from .base import Answer, EpisodeStatus, Strategy, Task, register

DEFAULT_COST_WEIGHT = 10.0  # λ: accuracy points given up per dollar
MAX_SUBTASKS = 6
T = TypeVar("T", bound=BaseModel)


class DirectPrimitive(PromptAgent):
    """The ``direct`` primitive: one plain answer from the chosen model."""

    name = "direct"
    description = "answers the subtask in one plain call on the chosen model"
    template = "uno_direct"


class UnoStep(BaseModel):
    """One subtask of a decomposition and the pair it runs on."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1, max_length=ID_MAX)
    # what the plan's own subtask holds: a step that copies one question of several, with its
    # options or its table, is not cut off by the grammar
    task: str = Field(min_length=1, max_length=TASK_MAX)
    model: str = Field(max_length=80)
    primitive: str = Field(max_length=12)
    deps: list[Annotated[str, Field(min_length=1, max_length=ID_MAX)]] = Field(default_factory=list, max_length=4)


class UnoAction(BaseModel):
    """The orchestrator's one decision: answer directly with one pair, or decompose."""

    model_config = ConfigDict(extra="ignore")

    admissible: ClassVar[Mapping[tuple[str, str], float | None]] = {}
    cost_cap: ClassVar[float | None] = None
    max_subtasks: ClassVar[int] = MAX_SUBTASKS

    thought: str = Field(default="", max_length=160)
    mode: Literal["direct", "decompose"]
    model: str = Field(max_length=80, description="the model that answers, in direct mode")
    primitive: str = Field(max_length=12, description="how it answers, in direct mode")
    subtasks: list[UnoStep] = Field(default_factory=list, max_length=MAX_SUBTASKS)

    @model_validator(mode="before")
    @classmethod
    def _one_subtask_is_direct(cls, data: Any) -> Any:
        """A "decomposition" into one subtask is the direct mode on that subtask's pair."""
        if isinstance(data, dict) and data.get("mode") == "decompose":
            steps = data.get("subtasks")
            if isinstance(steps, list) and len(steps) == 1 and isinstance(steps[0], dict):
                only = steps[0]
                return {**data, "mode": "direct", "model": only.get("model", data.get("model")),
                        "primitive": only.get("primitive", data.get("primitive")), "subtasks": []}
        return data

    @model_validator(mode="after")
    def _check(self) -> UnoAction:
        problem = action_problem(self)
        if problem:
            raise ValueError(problem)
        return self


def action_problem(action: UnoAction) -> str | None:
    """The first thing wrong with an action against its class's admissible pairs and cap."""
    allowed = type(action).admissible
    if not allowed:  # unbound schema: shape only
        return None

    def bad(model: str, prim: str) -> bool:
        return (model, prim) not in allowed

    choices = ", ".join(f"{m}/{p}" for m, p in list(allowed)[:10])
    if action.mode == "direct":
        if bad(action.model, action.primitive):
            return f"pair '{action.model}/{action.primitive}' is not admissible; choose one of: {choices}"
        return None
    steps, most = action.subtasks, type(action).max_subtasks
    if not 2 <= len(steps) <= most:
        return f"decompose needs 2 to {most} subtasks, got {len(steps)}"
    for s in steps:
        if bad(s.model, s.primitive):
            return f"subtask '{s.id}': pair '{s.model}/{s.primitive}' is not admissible; choose one of: {choices}"
    ids = [s.id for s in steps]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        return f"duplicate subtask id '{dupes[0]}'"
    try:
        topological_order({s.id: s.deps for s in steps})
    except PlanError as exc:
        return str(exc).replace("node", "subtask")
    cap = type(action).cost_cap
    if cap is not None:
        total = sum(allowed[(s.model, s.primitive)] or 0.0 for s in steps)  # under a cap every cost is known
        if total > cap:
            return (
                f"the subtasks' estimated ${total:.6f} is over the cost cap ${cap:g};"
                " use cheaper pairs or fewer subtasks"
            )
    return None


def bound_action(pairs: list[Pair], cap: float | None, max_subtasks: int) -> type[UnoAction]:
    """An action schema that accepts only these pairs (one class per episode; no shared state)."""

    class BoundUnoAction(UnoAction):
        admissible = {(p.model, p.primitive): p.est_cost for p in pairs}
        cost_cap = cap

    BoundUnoAction.max_subtasks = max_subtasks
    BoundUnoAction.__name__ = BoundUnoAction.__qualname__ = "UnoAction"
    return BoundUnoAction


def decision_schema(pairs: list[Pair], max_subtasks: int) -> dict[str, Any]:
    """The JSON schema for constrained decoding: model and primitive names pinned to admissible ones."""
    models = list(dict.fromkeys(p.model for p in pairs))
    prims = list(dict.fromkeys(p.primitive for p in pairs))
    schema = narrow(UnoAction.model_json_schema(), {"model": models, "primitive": prims}, optional=())
    schema["properties"]["subtasks"]["maxItems"] = max_subtasks
    return schema


class DecisionOptions(StrategyOptions):
    """Options of strategies built on one big orchestrator decision (uno, spec)."""

    max_repairs: int = Field(default=2, ge=0,
                             description="re-prompts with the validation error after an invalid decision")
    # the decision writes a whole plan (steps or roles, each possibly a copied question): it gets a
    # planning call's limit, not a single decision's
    decision_tokens: int = Field(default=PLAN_TOKENS, ge=1, description="output-token limit of the decision")


async def decide_with_options(ctx: RunContext, opts: DecisionOptions, schema: type[T], messages: list[Message],
                              json_schema: dict[str, Any], name: str) -> Decision[T]:
    """``ctx.decide`` under the options ``max_repairs`` (2) and ``decision_tokens`` (the
    temperature is the decision role's, option ``decision_temperature``)."""
    config = replace(ORCHESTRATOR_CONFIG, max_tokens=opts.decision_tokens)
    return await ctx.decide(schema, messages, json_schema=json_schema, config=config,
                            max_repairs=opts.max_repairs, name=name)


def _ranked(pairs: list[Pair], lam: float, top: int = 6) -> str:
    """The best pairs by utility, one line each (pairs of unknown cost last, unranked)."""
    known = sorted((p for p in pairs if p.est_cost is not None),
                   key=lambda p: -(utility(p.accuracy, p.est_cost, lam) or 0.0))
    rows = [*known, *(p for p in pairs if p.est_cost is None)][:top]
    return "\n".join(
        f"- {p.label}: expected accuracy {p.accuracy:.2f}, "
        + ("cost unknown" if p.est_cost is None else f"cost ${p.est_cost:.6f}")
        for p in rows
    )


def _price(pool: Pool, name: str) -> str:
    price = pool.spec(name).price
    return "price unknown" if price is None else f"${price.input_per_mtok:g}/${price.output_per_mtok:g} per Mtok in/out"


@register
class Uno(Strategy):
    name = "uno"
    summary = "Uno-Orchestra: answer directly or decompose, each part on an admissible (model, primitive) pair"
    paper = "Uno-Orchestra: a unified orchestration policy for selective delegation"

    class Options(DecisionOptions):
        cost_weight: float = Field(default=DEFAULT_COST_WEIGHT, ge=0,
                                   description="λ: accuracy points given up per dollar")
        max_cost_usd: float | None = Field(
            default=None, ge=0,
            description="cost cap: only pairs whose estimated cost is known and fits it (default: none)")
        max_subtasks: int = Field(default=MAX_SUBTASKS, ge=2, le=MAX_SUBTASKS,
                                  description=f"most subtasks of a decomposition (2 to {MAX_SUBTASKS})")
        code_examples: bool = Field(default=True, description=(
            "a code task (a function stub in the prompt): the best-utility (model, direct) pair writes the "
            "function, and the next pair writes only when the docstring's examples fail"))
        code_pairs: int = Field(default=2, ge=1, le=8, description="code tasks with examples: most pairs that write")

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        lam, cap = opts.cost_weight, opts.max_cost_usd
        most = opts.max_subtasks
        xctx = ctx.with_tools(ToolRegistry([*ctx.tools.tools(), DirectPrimitive()]))
        pairs, excluded = admissible_pairs(ctx.pool, xctx.tools, task.prompt, cap)
        if opts.code_examples and (code := code_plan(task.prompt)) is not None and (
                ranked := by_utility([p for p in pairs if p.primitive == "direct"], lam)):
            return await uno_escalation(ctx, task, code, ranked=ranked, most=opts.code_pairs)
        if not pairs:
            return Answer("", status=EpisodeStatus.NO_ADMISSIBLE_PAIR, meta={"excluded": excluded})
        system = msg(
            "system",
            render(
                "uno_system",
                models="\n".join(
                    f"- {n} (tier {ctx.pool.spec(n).tier}, {_price(ctx.pool, n)}): {ctx.pool.spec(n).description}"
                    for n in dict.fromkeys(p.model for p in pairs)
                ),
                primitives="\n".join(f"- {p}: {PRIMITIVE_HELP[p]}" for p in dict.fromkeys(p.primitive for p in pairs)),
                excluded="".join(f"\nNot allowed: {k} ({v})" for k, v in list(excluded.items())[:6]),
                lam=lam,
                most=most,
                ranked=_ranked(pairs, lam),
            ),
        )
        decision = await decide_with_options(ctx, opts, bound_action(pairs, cap, most),
                                             [system, msg("user", render("uno_task", task=task.prompt))],
                                             decision_schema(pairs, most), "uno mode")
        meta: dict[str, Any] = {"invalid_decisions": decision.invalid_attempts, "fallback": False, "cost_weight": lam}
        action = decision.action
        if action is None:
            best = choose_pair(pairs, lam)
            assert best is not None  # pairs is not empty
            meta.update(fallback=True, error=decision.error)
            ctx.tracer.event("uno_fallback", {"pair": best.label, "error": decision.error,
                                              "utility": utility(best.accuracy, best.est_cost, lam)})
            return await self._direct(task, xctx, best.model, best.primitive, meta)
        if action.mode == "direct":
            return await self._direct(task, xctx, action.model, action.primitive, meta)
        return await self._decompose(task, xctx, action.subtasks, meta)

    @staticmethod
    async def _direct(task: Task, ctx: RunContext, model: str, primitive: str, meta: dict[str, Any]) -> Answer:
        result = await ctx.call_tool(PRIMITIVE_TOOLS[primitive], {"task": task.prompt}, model=model,
                                     label=f"{primitive} on {model}")
        meta.update(mode="direct", pairs=[{"model": model, "primitive": primitive, "status": result.status.value}])
        ctx.tracer.event("uno_choice", {"mode": "direct", "pairs": meta["pairs"]})
        if result.ok and result.output.strip() and not result.data.get("empty"):
            return Answer(result.output.strip(), meta=meta)
        text = await synthesize(task.prompt, [f"{primitive} on {model}: {result.feedback(600)}"], ctx)
        return Answer(text, meta=meta)

    @staticmethod
    async def _decompose(task: Task, ctx: RunContext, steps: list[UnoStep], meta: dict[str, Any]) -> Answer:
        plan = [Subtask(id=s.id, task=s.task, tool=PRIMITIVE_TOOLS[s.primitive], model=s.model,
                        deps=s.deps) for s in steps]
        chosen = [{"id": s.id, "model": s.model, "primitive": s.primitive, "deps": s.deps} for s in steps]
        ctx.tracer.event("uno_choice", {"mode": "decompose", "pairs": chosen})
        results = await execute_plan(ctx, plan, context=f"Overall task: {task.prompt}")
        for row in chosen:
            row["status"] = results[str(row["id"])].status
        meta.update(mode="decompose", pairs=chosen)
        text = await synthesize(task.prompt, results_text(plan, results), ctx)
        return Answer(text, meta=meta)
