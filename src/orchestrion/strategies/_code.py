"""How the planning paradigms work on a code task (a function stub in the prompt).

A code task (a function stub in the prompt, examples in its docstring; :mod:`..runtime.code_work`)
has a check that a program can run on itself: the examples. Decomposing it into subtasks and
synthesising a prose answer loses the code, so ``topology`` and ``milestone`` take these paths
instead, each in its paper's own terms:

* :func:`topology_candidates` (AdaptOrch): one candidate from the executor; when it fails an
  example, a parallel round of a repair of it (the failing examples shown) and fresh candidates
  from the pool's other models, reconciled by which pass the most examples (a tie keeps the
  earlier candidate, so the first answer stands unless another does better on the examples);
* :func:`milestone_repairs` (E3-Orch): milestones *implement*, then *test and repair* on one
  model, serially, until the examples pass or the milestones run out.

A code task whose docstring shows no example gets the executor's one version of the function
(asked as ``direct`` asks it): planning subtasks for it would lose the code, and there is nothing
to test candidates on.
"""

from __future__ import annotations

from typing import Any

from .._errors import BudgetExceededError
from ..runtime.code_work import Candidate, CodePlan, best, candidate_models, code_answer, write
from ..runtime.context import RunContext
from ..status import EpisodeStatus
from .base import Answer, Task


async def topology_candidates(ctx: RunContext, task: Task, plan: CodePlan, *, first: str, width: int,
                              rounds: int) -> Answer:
    """Candidates in rounds until one passes every example (``width`` per parallel round, at most
    ``rounds`` rounds), reconciled by the examples they pass."""
    models = candidate_models(ctx, first, width)
    rounds = rounds if plan.examples else 1  # nothing to reconcile candidates by: the first one answers
    ctx.budget.new_round()
    with ctx.tracer.span("round", "candidates 1"):
        made = [await write(ctx, task.prompt, plan, model=first, label=f"candidate 1 ({first})")]
    status, stopped = EpisodeStatus.OK, ""
    try:
        for index in range(2, rounds + 1):
            if best(made).check.all_passed:
                break
            ctx.budget.new_round()
            lead = best(made)
            work = [write(ctx, task.prompt, plan, model=lead.model, label=f"repair {index} ({lead.model})",
                          repair_of=lead)]
            if index == 2:  # the other models' own first tries, beside the repair
                work += [write(ctx, task.prompt, plan, model=m, label=f"candidate {index} ({m})") for m in models[1:]]
            with ctx.tracer.span("round", f"candidates {index}", topology="parallel", branches=len(work)):
                made += await ctx.parallel(work)
    except BudgetExceededError as exc:  # the best candidate so far still answers
        status, stopped = EpisodeStatus.BUDGET_EXCEEDED, str(exc)
    chosen = best(made)
    meta = _meta(made, chosen, stopped)
    meta.update(topology="parallel" if len(made) > 1 else "single", routed="code examples")
    ctx.tracer.event("topology", {"topology": meta["topology"], "routed": "code examples",
                                  "candidates": meta["candidates"]})
    return Answer(code_answer(chosen), status=status, meta=meta)


async def milestone_repairs(ctx: RunContext, task: Task, plan: CodePlan, *, model: str,
                            max_milestones: int) -> Answer:
    """Implement, then test and repair, one milestone each, until every example passes."""
    made: list[Candidate] = []
    records: list[dict[str, Any]] = []
    status, stopped = EpisodeStatus.OK, ""
    for index in range(1, max_milestones + 1):
        objective = "implement the function" if not made else "make the failing examples pass"
        try:
            ctx.budget.new_round()
            with ctx.tracer.span("milestone", f"milestone {index}", milestone=objective):
                made.append(await write(ctx, task.prompt, plan, model=model, label=f"milestone {index}",
                                        repair_of=best(made) if made else None))
        except BudgetExceededError as exc:
            if not made:  # nothing written yet: nothing to answer with
                raise
            status, stopped = EpisodeStatus.BUDGET_EXCEEDED, str(exc)  # the best version so far answers
            break
        record = {"index": index, "milestone": objective, "planned": [f"m{index}"],
                  "executed_ok": [f"m{index}"] if not made[-1].check.error else [],
                  "completeness": 1.0 if not made[-1].check.error else 0.0, "examples": made[-1].record()}
        records.append(record)
        ctx.tracer.event("milestone", record)
        if made[-1].check.all_passed or not plan.examples:  # no examples: nothing to test and repair against
            break
    chosen = best(made)
    meta = _meta(made, chosen, stopped)
    ok = sum(len(r["executed_ok"]) for r in records)
    meta.update(milestones=records, done=chosen.check.all_passed,
                stop="examples pass" if chosen.check.all_passed else "budget" if stopped else "max_milestones",
                subtasks=len(records), subtasks_ok=ok, completeness=ok / len(records))
    return Answer(code_answer(chosen), status=status, meta=meta)


def _meta(made: list[Candidate], chosen: Candidate, stopped: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"code_examples": chosen.check.total, "examples_passed": chosen.check.passed,
                            "chosen": chosen.label, "candidates": [c.record() for c in made], "invalid_decisions": 0}
    if stopped:
        meta["stopped"] = stopped
    return meta
