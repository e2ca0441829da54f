"""POrchestra: proactive orchestration, where sub-agents ask for harness changes while they work.

Protocol. The orchestrator makes one decision at a time
(:class:`~orchestrion.strategies._proactive_protocol.ProactiveAction`):

- ``delegate_task`` starts a sub-agent with a harness: instruction, context, tools, model
  and step budget (at most ``subagent_steps``; at most ``max_subagents`` sub-agents).
- ``revise_task`` edits the harness of a paused or ended sub-agent: a task-scope operation
  (keep / reduce / expand / remove / decompose; ``remove`` ends it), resources (context,
  tools, extra steps, a constraint, state handed over) and optionally the executor
  (``replace`` moves it to another pool model). The *same* sub-agent resumes with its
  history; the revision is recorded in that history as an observation.
- ``complete`` ends the episode with the final answer.

Sub-agents run ReAct steps until they pause with ``finish`` / ``revise`` / ``stop`` (status,
request, evidence), run out of steps, or get stuck (see ``PausingSubAgent``). Every report
triggers a decision. The paper keeps one sub-agent active (``max_active=1``); with
``max_active=N`` up to N run as separate asyncio tasks, each with its own harness and
history, and the orchestrator answers each report as it arrives while the others keep
running (it may also ``wait``, offered only then). A paused sub-agent holds its slot;
starting work when every slot is taken supersedes the oldest paused one.

Termination: at most ``max_decisions`` decisions; sub-agent steps never exceed
``max_steps`` in all (a running sub-agent reserves its budget, unused steps come back when
it ends); ``max_invalid`` invalid decisions in a row delegate the whole task once, then
stop the loop; ``max_fruitless`` sub-agent runs in a row that end without a result stop it
too. Sub-agents still running then are cancelled. When the orchestrator did not complete
with an answer, the answer is synthesised from the sub-agents' reports.

A code task (a function stub in the prompt; ``code_examples``, on by default) goes to one
sub-agent that implements the function and tests it on the docstring's examples; a failing
example makes it pause and ask for a revision, which the orchestrator answers with more steps,
another model as executor, or complete (:mod:`._code`).

Options (``--set NAME=VALUE``): max_steps=300, max_subagents=10, subagent_steps=30 (the
paper's defaults), max_active=1, max_decisions=30, max_invalid=2, max_fruitless=3,
stall_steps=3, worker_model (default: the pool's executor), decision_tokens=320.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from .._errors import BudgetExceededError, OrchestrionError
from .._prompts import render
from ..models.types import msg
from ..runtime.code_work import code_plan
from ..runtime.context import ORCHESTRATOR_CONFIG, RunContext
from ..runtime.protocol import Revision
from ..runtime.subagent import Harness, SubAgent, SubAgentReport
from ..runtime.synthesis import settle_answer, synthesize
from ._code import proactive_revisions
from ._proactive_protocol import (
    PausingSubAgent,
    ProactiveAction,
    ProactiveOptions,
    decision_schema,
)
from .base import Answer, EpisodeStatus, Strategy, Task, model_lines, register, tool_lines

_BUSY = ("running", "waiting")
DIRECT_TOOL = "solve_directly"
_REVISABLE = ("waiting", "done", "stopped", "exhausted")
_STATE_OF = {"finish": "done", "revise": "waiting", "stop": "stopped", "exhausted": "exhausted"}


@dataclass
class _Worker:
    agent: SubAgent
    state: str = "running"  # running | waiting | done | stopped | exhausted | removed | cancelled
    report: SubAgentReport | None = None
    task: asyncio.Task[SubAgentReport] | None = None

    def committed(self) -> int:
        """Steps this worker holds: its whole budget while busy, what it used once ended."""
        return self.agent.harness.step_budget if self.state in _BUSY else self.agent.steps_used


class _Episode:
    """The orchestration loop of one task (state shared by nothing but this loop)."""

    def __init__(self, task: Task, ctx: RunContext) -> None:
        self.task, self.ctx = task, ctx
        opts = ctx.options_as(ProactiveOptions)
        self.max_steps = opts.max_steps
        self.max_subagents = opts.max_subagents
        self.sub_steps = opts.subagent_steps
        self.max_active = opts.max_active
        self.max_decisions = opts.max_decisions
        self.max_invalid = opts.max_invalid
        self.stall = opts.stall_steps
        self.max_fruitless = opts.max_fruitless
        self.fruitless = 0
        self.worker_model = opts.worker_model or ctx.pool.executor
        self.config = replace(ORCHESTRATOR_CONFIG, max_tokens=opts.decision_tokens)
        self.workers: dict[str, _Worker] = {}
        self.fresh: list[str] = []  # agents whose latest report no decision has handled yet
        self.log: list[str] = []
        self.limits: list[str] = []
        self.decisions = self.invalid = self.streak = 0
        self.fallback_used = self.idle_ok = False
        self.stop_reason = ""
        self.answer = ""
        self.direct: list[str] = []  # what solve_directly returned
        self.dropped: list[asyncio.Task[SubAgentReport]] = []
        wait_line = ('- "wait": let the running sub-agents work until one of them reports.\n'
                     if self.max_active > 1 else "")
        self.system = msg("system", render(
            "proactive_system", wait=wait_line, max_subagents=self.max_subagents, subagent_steps=self.sub_steps,
            max_steps=self.max_steps, max_active=self.max_active,
            tools=tool_lines(ctx) or "(none)",
            models=model_lines(ctx),
        ))

    # -- the loop ----------------------------------------------------------------------
    async def run(self) -> Answer:
        try:
            while not self.stop_reason:
                self._harvest()
                if not self._needs_decision():
                    await asyncio.wait(self._running(), return_when=asyncio.FIRST_COMPLETED)
                elif self.decisions >= self.max_decisions:
                    self._limit("max_decisions", f"{self.max_decisions} decisions made without completing")
                elif self.max_fruitless and self.fruitless >= self.max_fruitless:
                    self._limit("max_fruitless", f"{self.fruitless} sub-agent runs in a row ended without a result")
                else:
                    await self._decide()
        finally:  # whatever still runs is cancelled; its finished steps stay in the trace
            for w in self.workers.values():
                if w.state in _BUSY:
                    self._end(w, "cancelled", "the episode ended")
            await asyncio.gather(*self.dropped, return_exceptions=True)
        text = (await settle_answer(self.task.prompt, self.answer, self._results(), self.ctx) if self.answer
                else await synthesize(self.task.prompt, self._results(), self.ctx))
        meta = {
            "stop_reason": self.stop_reason, "decisions": self.decisions, "invalid_decisions": self.invalid,
            "subagents": len(self.workers), "steps": sum(w.agent.steps_used for w in self.workers.values()),
            "revisions": sum(len(w.agent.revisions) for w in self.workers.values()), "limits": self.limits,
            "synthesized": not self.answer, "max_active": self.max_active, "solved_directly": len(self.direct),
            "agents": {n: w.state for n, w in self.workers.items()},
        }
        return Answer(text, status=EpisodeStatus.OK if text else EpisodeStatus.NO_ANSWER, meta=meta)

    def _running(self) -> set[asyncio.Task[SubAgentReport]]:
        return {w.task for w in self.workers.values() if w.task is not None}

    def _harvest(self) -> None:
        """Take in every report that has arrived (a budget stop inside a worker re-raises here)."""
        for name, w in self.workers.items():
            if w.task is None or not w.task.done():
                continue
            report, w.task = w.task.result(), None
            w.report, w.state = report, _STATE_OF[report.kind]
            if report.kind == "finish" and report.answer.strip():
                self.fruitless = 0
            elif report.kind in ("stop", "exhausted"):
                self.fruitless += 1
            self.fresh.append(name)
            self.idle_ok = False
            self.log.append(report.summary()[:400])

    def _needs_decision(self) -> bool:
        if self.fresh or not self._running():
            return True
        if self.idle_ok:
            return False
        return any(w.state == "waiting" for w in self.workers.values()) or (
            self._busy() < self.max_active and self._can_delegate())

    def _busy(self, exclude: _Worker | None = None) -> int:
        return sum(1 for w in self.workers.values() if w is not exclude and w.state in _BUSY)

    def _room(self, exclude: _Worker | None = None, freed: _Worker | None = None) -> int:
        held = sum(
            w.agent.steps_used if w is freed else w.committed() for w in self.workers.values() if w is not exclude
        )
        return self.max_steps - held

    def _can_delegate(self) -> bool:
        return len(self.workers) < self.max_subagents and self._room() > 0

    def _focus(self) -> _Worker | None:
        if self.fresh:
            return self.workers[self.fresh[0]]
        return next((w for w in self.workers.values() if w.state == "waiting"), None)

    # -- one decision ------------------------------------------------------------------
    async def _decide(self) -> None:
        self.decisions += 1
        focus = self._focus()
        actions = ["delegate_task"] if self._can_delegate() else []
        targets = [n for n, w in self.workers.items() if w.state in _REVISABLE]
        actions += ["revise_task"] if targets else []
        actions += ["solve_directly"] if DIRECT_TOOL in self.ctx.tools and not self.direct else []
        actions += ["complete"]
        if self.max_active > 1 and self._running():
            actions.append("wait")
        tool_names = self.ctx.tools.names
        schema = decision_schema(actions, targets, self.ctx.pool.names, tool_names)
        prompt = render("proactive_state", task=self.task.prompt, team=self._team(), now=self._now(focus),
                        log="\n".join(self.log[-8:]) or "(none yet)", decision=self.decisions,
                        max_decisions=self.max_decisions, actions=", ".join(actions))
        decision = await self.ctx.decide(ProactiveAction, [self.system, msg("user", prompt)], json_schema=schema,
                                         config=self.config, name=f"decision {self.decisions}")
        if decision.action is None:
            self._invalid(f"decision {self.decisions} was not a valid action ({(decision.error or '')[:160]})")
            return
        if focus is not None and focus.agent.name in self.fresh:
            self.fresh.remove(focus.agent.name)
        if decision.action.action == "solve_directly":  # the one action that runs here, awaited
            await self._solve_directly(decision.action.model)
            return
        self._apply(decision.action, focus)

    async def _solve_directly(self, model: str | None) -> None:
        """The unchanged task on ``model`` (default: the orchestrator): its answer is a result."""
        result = await self.ctx.call_tool(DIRECT_TOOL, {}, model=model)
        self.direct.append(f"solve_directly on {model or self.ctx.pool.orchestrator}: {result.feedback(500)}")
        self.log.append(self.direct[-1])
        self.streak = 0

    def _apply(self, act: ProactiveAction, focus: _Worker | None) -> None:
        if act.action == "complete":
            self.answer = (act.answer or "").strip()
            self.stop_reason = "complete"
            self.ctx.tracer.event("complete", {"answer": self.answer, "decision": self.decisions})
        elif act.action == "wait":
            if not self._running():
                self._invalid("wait: no sub-agent is running")
                return
            self.idle_ok = True
        elif act.action == "delegate_task":
            self._delegate(act.instruction or self.task.prompt, act.context or "", act.tools or [],
                           act.model, act.step_budget)
        else:
            name = act.target or (focus.agent.name if focus is not None else "")
            w = self.workers.get(name)
            if w is None or w.state not in _REVISABLE:
                self._invalid(f"revise_task: '{name}' is not a paused or ended sub-agent")
                return
            self._revise(w, act)
        self.streak = 0

    def _invalid(self, note: str) -> None:
        self.invalid += 1
        self.streak += 1
        self.log.append(note)
        if self.streak < self.max_invalid:
            return
        self.streak = 0
        if not self.fallback_used and self._can_delegate():
            self.fallback_used = True
            self._delegate(self.task.prompt, "", self.ctx.tools.names, None, None, fallback=True)
        else:
            self._limit("invalid_decisions", f"{self.max_invalid} invalid decisions in a row")

    def _limit(self, name: str, detail: str) -> None:
        """Record a limit; it ends the loop when nothing is left to wait for, answer or delegate."""
        self.limits.append(name)
        self.log.append(f"limit reached: {detail}")
        self.ctx.tracer.event("limit", {"limit": name, "detail": detail, "decision": self.decisions})
        if (name in ("max_decisions", "invalid_decisions", "max_fruitless")
                or not (self._busy() or self._can_delegate())):
            self.stop_reason = name

    # -- delegation and revision ---------------------------------------------------------
    def _delegate(self, instruction: str, context: str, tools: list[str], model: str | None,
                  steps: int | None, *, fallback: bool = False) -> None:
        if len(self.workers) >= self.max_subagents:
            self._limit("max_subagents", f"no more than {self.max_subagents} sub-agents")
            return
        name = f"a{len(self.workers) + 1}"
        known = [t for t in dict.fromkeys(tools) if t in self.ctx.tools]
        budget = self.sub_steps if not steps or steps <= 0 else min(steps, self.sub_steps)
        model = model if model in self.ctx.pool.names else self.worker_model
        harness = Harness(instruction=instruction, model=model, context=context, tools=known, step_budget=budget)
        w = _Worker(PausingSubAgent(self.ctx, harness, name=name, stall=self.stall))
        if not self._admit(w, f"delegating {name}"):
            return
        self.ctx.budget.new_subagent()
        self.workers[name] = w
        self.ctx.tracer.event("delegation", {"agent": name, "instruction": instruction, "context": context,
                                             "model": model, "tools": known, "step_budget": harness.step_budget,
                                             "fallback": fallback, "decision": self.decisions})
        self.log.append(f"{'(fallback) ' if fallback else ''}you delegated {name} on {model}, tools "
                        f"{known or 'none'}, {harness.step_budget} steps: {instruction[:150]}")
        self._launch(w)

    def _revise(self, w: _Worker, act: ProactiveAction) -> None:
        name, h = w.agent.name, w.agent.harness
        if act.scope == "remove":
            self._end(w, "removed", "the orchestrator removed its task")
            return
        room = self._room(exclude=w) - h.step_budget
        add = max(0, min(act.step_budget or 0, self.sub_steps - h.step_budget, room))
        new_model = act.model if (act.model in self.ctx.pool.names and act.model != h.model
                                  and act.executor != "keep") else None
        revision = Revision(
            scope=act.scope or "keep", instruction=act.instruction, add_context=act.context,
            add_tools=[t for t in act.tools or [] if t in self.ctx.tools], remove_tools=list(act.remove_tools or []),
            add_steps=add, constraint=act.constraint, state=act.state,
            executor="replace" if new_model else "keep", model=new_model,
        )
        w.agent.revise(revision)
        self.log.append(f"you revised {name}: " + ", ".join(
            f"{k}={v}" for k, v in revision.model_dump(exclude_defaults=True).items())[:300])
        if self._admit(w, f"resuming {name}"):
            self._launch(w)
        elif w.state == "waiting":
            w.state = "exhausted"

    def _admit(self, w: _Worker, what: str) -> bool:
        """Make room for ``w`` to (re)start: a free slot (superseding a paused one) and steps."""
        victim = None
        if self._busy(exclude=w) >= self.max_active:
            victim = next((o for o in self.workers.values() if o is not w and o.state == "waiting"), None)
            if victim is None:
                self.log.append(f"{what} refused: {self.max_active} sub-agents already running")
                self.limits.append("max_active")
                return False
        h = w.agent.harness
        h.step_budget = min(h.step_budget, self.sub_steps, w.agent.steps_used + self._room(exclude=w, freed=victim))
        if w.agent.steps_left <= 0:
            which = "max_steps" if self._room(exclude=w, freed=victim) <= 0 else "subagent_steps"
            self._limit(which, f"{what}: no steps left under {which}")
            return False
        if victim is not None:
            self._end(victim, "removed", f"superseded: its slot went to {w.agent.name}")
        return True

    def _launch(self, w: _Worker) -> None:
        w.state = "running"
        w.task = asyncio.create_task(self._drive(w), name=f"proactive:{w.agent.name}")

    async def _drive(self, w: _Worker) -> SubAgentReport:
        try:
            return await w.agent.run()
        except BudgetExceededError:
            raise
        except OrchestrionError as exc:  # a failing worker model is a report, not a crash
            report = SubAgentReport("stop", w.agent.name, status=f"failed: {exc}"[:300], steps=w.agent.steps_used)
            self.ctx.tracer.event("subagent_message", {**report.__dict__, "failed": True})
            return report

    def _end(self, w: _Worker, state: str, reason: str) -> None:
        if w.task is not None:
            w.task.cancel()
            self.dropped.append(w.task)
            w.task = None
        w.state = state
        if w.agent.name in self.fresh:
            self.fresh.remove(w.agent.name)
        self.log.append(f"{w.agent.name} ended ({state}): {reason}")
        self.ctx.tracer.event("subagent_end", {"agent": w.agent.name, "state": state, "reason": reason})

    # -- prompt pieces -------------------------------------------------------------------
    def _team(self) -> str:
        rows = [f"- {n} [{w.state}] on {w.agent.harness.model}, tools {w.agent.harness.tools or 'none'}, "
                f"steps {w.agent.steps_used}/{w.agent.harness.step_budget}: {w.agent.harness.instruction[:120]}"
                for n, w in self.workers.items()]
        left = max(0, self._room())
        head = f"{len(self.workers)} of at most {self.max_subagents} used; {left} of {self.max_steps} steps free."
        return "\n".join([head, *rows])

    def _now(self, focus: _Worker | None) -> str:
        if focus is None or focus.report is None:
            if self._running():
                return f"{len(self._running())} sub-agent(s) running; you may start another one or wait."
            return "No sub-agent is running. Delegate a subtask, or complete if you can answer."
        r, name = focus.report, focus.agent.name
        fields = "\n".join(f"  {k}: {v[:300]}" for k, v in (("status", r.status), ("request", r.request),
                                                          ("answer", r.answer), ("evidence", r.evidence)) if v)
        if focus.state == "waiting":
            return (f"Sub-agent {name} paused and asks for a revision:\n{fields}\n"
                    f"Answer it with revise_task (target {name}), or delegate_task / complete.")
        return f"Sub-agent {name} reported {r.kind} ({focus.state}):\n{fields}"

    def _results(self) -> list[str]:
        return self.direct + [f"{n} ({w.agent.harness.instruction[:100]}): {w.report.summary()[:500]}"
                for n, w in self.workers.items() if w.report is not None]


@register
class Proactive(Strategy):
    name = "proactive"
    summary = "POrchestra: sub-agents pause to ask for revisions; the orchestrator edits their live harness"
    paper = "POrchestra: Proactive Agentic Orchestration (Renmin University of China, BAAI, CUHK-Shenzhen)"
    Options = ProactiveOptions

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(ProactiveOptions)
        if opts.code_examples and (code := code_plan(task.prompt)) is not None:
            return await proactive_revisions(ctx, task, code, model=opts.worker_model or ctx.pool.executor,
                                             max_revisions=opts.code_revisions, decision_tokens=opts.decision_tokens)
        return await _Episode(task, ctx).run()
