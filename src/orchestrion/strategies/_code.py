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
  model, serially, until the examples pass, the milestones run out, or a repair writes a program
  already tried (under greedy decoding the next repair would repeat it again);
* :func:`proactive_revisions` (POrchestra): a sub-agent implements and tests; when an example
  fails it pauses and asks for a revision, with the failing examples as evidence, and the
  orchestrator answers with one decision: more steps for the same sub-agent (a repair), another
  model as its executor (that model's own version of the task as written), or complete.

A code task whose docstring shows no example gets the executor's one version of the function
(asked as ``direct`` asks it): planning subtasks for it would lose the code, and there is nothing
to test candidates on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .._errors import BudgetExceededError
from .._prompts import render
from ..models.types import msg
from ..runtime.code_work import Candidate, CodePlan, best, candidate_models, code_answer, repeats, write
from ..runtime.context import ORCHESTRATOR_CONFIG, RunContext
from ..status import EpisodeStatus
from .base import Answer, Task, model_lines


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
            lead = best(made)
            if lead.check.all_passed:
                break
            ctx.budget.new_round()
            work = [write(ctx, task.prompt, plan, model=lead.model, label=f"repair {index} ({lead.model})",
                          repair_of=lead)]
            if index == 2:  # the other models' own first tries, beside the repair
                work += [write(ctx, task.prompt, plan, model=m, label=f"candidate {index} ({m})") for m in models[1:]]
            with ctx.tracer.span("round", f"candidates {index}", topology="parallel", branches=len(work)):
                made += await ctx.parallel(work)
    except BudgetExceededError as exc:  # the best candidate so far still answers
        status, stopped = EpisodeStatus.BUDGET_EXCEEDED, str(exc)
    chosen = best(made)
    meta = code_meta(made, chosen, stopped)
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
        if repeats(made[-1], made):
            ctx.tracer.event("repeated_program", {"label": made[-1].label})
            break
    chosen = best(made)
    meta = code_meta(made, chosen, stopped)
    ok = sum(len(r["executed_ok"]) for r in records)
    stop = ("examples pass" if chosen.check.all_passed else "budget" if stopped
            else "repeated program" if len(made) > 1 and repeats(made[-1], made) else "max_milestones")
    meta.update(milestones=records, done=chosen.check.all_passed, stop=stop,
                subtasks=len(records), subtasks_ok=ok, completeness=ok / len(records))
    return Answer(code_answer(chosen), status=status, meta=meta)


ACTION_HELP = {
    "more_steps": '"more_steps": the same sub-agent gets one more step to fix its version, with the failing '
                  'examples shown.',
    "replace_executor": '"replace_executor": another model, named in "model", takes the work over and writes its '
                        'own version of the function from the task.',
    "complete": '"complete": stop here and answer with the version that passes the most examples.',
}


class CodeRevision(BaseModel):
    """The orchestrator's answer to a code sub-agent's request for a revision."""

    model_config = ConfigDict(extra="ignore")

    action: Literal["more_steps", "replace_executor", "complete"]
    model: str | None = None


async def proactive_revisions(ctx: RunContext, task: Task, plan: CodePlan, *, model: str,
                              max_revisions: int, decision_tokens: int) -> Answer:
    """A sub-agent implements and tests; each failed test is a request the orchestrator answers."""
    ctx.budget.new_round()
    with ctx.tracer.span("subagent", f"a1 ({model})"):
        made = [await write(ctx, task.prompt, plan, model=model, label=f"a1 implements ({model})")]
    status, stopped, stop, revisions = EpisodeStatus.OK, "", "examples pass", 0
    config = replace(ORCHESTRATOR_CONFIG, max_tokens=decision_tokens)
    try:
        while not best(made).check.all_passed:
            if not plan.examples:
                stop = "no examples"
                break
            if revisions >= max_revisions:
                stop = "code_revisions"
                break
            revisions += 1
            ctx.budget.new_round()
            latest = made[-1]
            others = candidate_models(ctx, latest.model, len(ctx.pool.names))[1:]
            asked, request = _request(latest, made, others)
            ctx.tracer.event("subagent_request", {"agent": "a1", "asks": asked, "request": request,
                                                  "model": latest.model})
            schema = _revision_schema(asked, others)
            prompt = render("code_revise", function=plan.stub.entry, request=request, versions=_versions(made),
                            actions=f"- {ACTION_HELP[asked]}\n- {ACTION_HELP['complete']}",
                            models=model_lines(ctx))
            decision = await ctx.decide(CodeRevision, [msg("user", prompt)], json_schema=schema, config=config,
                                        name=f"revision {revisions}")
            act = decision.action
            if act is None or act.action == "complete":
                stop = "orchestrator completed" if act is not None else "invalid decision"
                break
            lead = best(made)
            if act.action == "replace_executor" and act.model in others:
                ctx.tracer.event("revision", {"action": "replace_executor", "model": act.model})
                with ctx.tracer.span("subagent", f"a1 ({act.model})"):
                    made.append(await write(ctx, task.prompt, plan, model=act.model,
                                            label=f"a1 revised: executor {act.model}"))
            else:
                ctx.tracer.event("revision", {"action": "more_steps", "model": lead.model})
                with ctx.tracer.span("subagent", f"a1 ({lead.model})"):
                    made.append(await write(ctx, task.prompt, plan, model=lead.model, repair_of=lead,
                                            label=f"a1 revised: more steps ({lead.model})"))
    except BudgetExceededError as exc:  # the best version so far still answers
        status, stopped, stop = EpisodeStatus.BUDGET_EXCEEDED, str(exc), "budget"
    return code_result(made, status, stopped, revisions=revisions, stop=stop, done=best(made).check.all_passed)


def _request(latest: Candidate, made: list[Candidate], others: list[str]) -> tuple[str, str]:
    """The sub-agent's request (what it asks for, and its evidence): another step to repair its
    version at first; another model once a repair of its own failed or repeated a version."""
    head = f"{latest.check.passed} of {latest.check.total} examples pass on the version by {latest.model}."
    evidence = latest.check.feedback() or "no example passed"
    if len(made) == 1 or not others:
        return "more_steps", f"{head} It asks for one more step to fix its version.\n{evidence}"
    why = "its repair repeats a version written before" if repeats(latest, made) else "its repair did not pass"
    return "replace_executor", f"{head} It asks for another model: {why}.\n{evidence}"


def _versions(made: list[Candidate]) -> str:
    return "\n".join(f"- {c.label}: {c.check.passed} of {c.check.total} examples pass"
                     + (" (a repeat of an earlier version)" if repeats(c, made[:i + 1]) else "")
                     for i, c in enumerate(made))


def _revision_schema(asked: str, others: list[str]) -> dict[str, Any]:
    """The decision's schema: grant what the sub-agent asks for, or complete."""
    models = others or ["none"]
    return {"type": "object", "properties": {"action": {"type": "string", "enum": [asked, "complete"]},
                                             "model": {"type": "string", "enum": models}},
            "required": ["action", "model"], "additionalProperties": False}


def code_result(made: list[Candidate], status: EpisodeStatus, stopped: str, **extra: Any) -> Answer:
    """The answer from the best version made, with the shared meta and ``extra``."""
    chosen = best(made)
    meta = code_meta(made, chosen, stopped)
    meta.update(extra)
    return Answer(code_answer(chosen), status=status, meta=meta)


def code_meta(made: list[Candidate], chosen: Candidate, stopped: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"code_examples": chosen.check.total, "examples_passed": chosen.check.passed,
                            "chosen": chosen.label, "candidates": [c.record() for c in made], "invalid_decisions": 0}
    if stopped:
        meta["stopped"] = stopped
    return meta
