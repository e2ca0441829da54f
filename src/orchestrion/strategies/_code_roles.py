"""How ``uno``, ``para`` and ``spec`` work on a code task (a function stub in the prompt), each in its
paper's own terms, with the docstring's examples as the test (:mod:`..runtime.code_work`):

* :func:`para_candidates` (ParaManager): the coder agent on each of the pool's strongest models
  and the sandbox's check of what it wrote run as parallel branches of one round; the version that
  passes the most examples wins (a tie keeps the executor's). While none passes every example and
  rounds remain, the next round repairs every failing version in parallel, each on its own model.
* :func:`spec_review` (LEMON): an orchestration of three roles with fixed duties and dependencies:
  the coder writes the function, the tester runs the examples on it in the sandbox, and when one
  fails the reviewer reads the function and its failures and says what is wrong; the coder then
  repairs with the failures and the review, and the tester runs again.
* :func:`uno_escalation` (Uno-Orchestra): selective delegation over admissible (model, primitive)
  pairs, the primitive being "write the function as asked": the pair of best accuracy-cost
  utility writes first, and only when its version fails an example does the next pair by utility
  write its own, serially, so the cheaper path is the usual one.

A code task whose docstring shows no example gets one version of the function (the executor's;
``uno``'s best pair's).
"""

from __future__ import annotations

from dataclasses import replace

from .._errors import BudgetExceededError
from .._prompts import render
from ..models.types import msg
from ..runtime.code_work import Candidate, CodePlan, best, candidate_models, write
from ..runtime.context import RunContext
from ..runtime.synthesis import direct_config
from ..status import EpisodeStatus
from ._code import code_result
from .base import Answer, Task

REVIEW_TOKENS = 200  # a few sentences


async def uno_escalation(ctx: RunContext, task: Task, plan: CodePlan, *, ranked: list[str], most: int) -> Answer:
    """Versions by the pairs' models in ``ranked`` order (best utility first), one after another,
    until one passes every example or ``most`` have written."""
    made: list[Candidate] = []
    status, stopped = EpisodeStatus.OK, ""
    try:
        for model in ranked[:most if plan.examples else 1]:
            if made and best(made).check.all_passed:
                break
            ctx.budget.new_round()
            with ctx.tracer.span("subtask", f"({model}, direct)", model=model, primitive="direct"):
                made.append(await write(ctx, task.prompt, plan, model=model, label=f"({model}, direct)"))
    except BudgetExceededError as exc:
        if not made:
            raise
        status, stopped = EpisodeStatus.BUDGET_EXCEEDED, str(exc)
    return code_result(made, status, stopped, mode="direct", pairs=[c.label for c in made],
                       escalations=len(made) - 1)


async def para_candidates(ctx: RunContext, task: Task, plan: CodePlan, *, width: int, rounds: int) -> Answer:
    """Parallel rounds of coder branches (write, then check), reconciled by the examples they pass."""
    models = candidate_models(ctx, ctx.pool.executor, width if plan.examples else 1)
    made: list[Candidate] = []
    status, stopped, done_rounds = EpisodeStatus.OK, "", 0
    try:
        for index in range(1, rounds + 1):
            if made and (best(made).check.all_passed or not plan.examples):
                break
            ctx.budget.new_round()
            if not made:
                work = [write(ctx, task.prompt, plan, model=m, label=f"round 1: coder ({m})") for m in models]
            else:  # the latest version of each branch, repaired on its own model
                latest = {c.model: c for c in made}
                work = [write(ctx, task.prompt, plan, model=c.model, label=f"round {index}: repair ({c.model})",
                              repair_of=c) for c in latest.values() if not c.check.all_passed]
            with ctx.tracer.span("round", f"round {index}", branches=len(work)):
                made += await ctx.parallel(work)
            done_rounds = index
    except BudgetExceededError as exc:
        if not made:
            raise
        status, stopped = EpisodeStatus.BUDGET_EXCEEDED, str(exc)
    return code_result(made, status, stopped, rounds=done_rounds, calls_per_round=len(models))


async def spec_review(ctx: RunContext, task: Task, plan: CodePlan, *, coder: str, reviewer: str,
                      rounds: int) -> Answer:
    """Coder, tester and reviewer: write, test, and while an example fails, review and repair."""
    roles = [{"role": "coder", "model": coder, "depends_on": []},
             {"role": "tester", "tool": "python", "depends_on": ["coder"]},
             {"role": "reviewer", "model": reviewer, "depends_on": ["tester"]}]
    ctx.tracer.event("spec", {"roles": roles, "routed": "code examples"})
    ctx.budget.new_round()
    with ctx.tracer.span("role", "coder"):
        made = [await write(ctx, task.prompt, plan, model=coder, label=f"coder ({coder})")]
    reviews: list[str] = []
    status, stopped = EpisodeStatus.OK, ""
    try:
        for index in range(2, rounds + 1):
            lead = best(made)
            if lead.check.all_passed or not plan.examples:
                break
            ctx.budget.new_round()
            with ctx.tracer.span("role", f"reviewer {index - 1}"):
                prompt = render("code_review", failures=lead.check.feedback() or "no example passed",
                                task=task.prompt, program=lead.program)
                config = replace(direct_config(ctx), max_tokens=REVIEW_TOKENS)
                out = await ctx.generate([msg("user", prompt)], model=reviewer, name=f"review {index - 1}",
                                         config=config)
            reviews.append(out.text)
            with ctx.tracer.span("role", f"coder {index}"):
                made.append(await write(ctx, task.prompt, plan, model=coder, label=f"coder {index} ({coder})",
                                        repair_of=lead, review=out.text))
    except BudgetExceededError as exc:
        status, stopped = EpisodeStatus.BUDGET_EXCEEDED, str(exc)
    return code_result(made, status, stopped, roles=[r["role"] for r in roles], reviews=len(reviews))
