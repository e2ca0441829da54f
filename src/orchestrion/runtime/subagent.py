"""The sub-agent: a ReAct loop over a live harness, with proactive communication.

A sub-agent runs steps until it sends a message: ``finish`` (done, with an
answer and evidence), ``revise`` (it needs a change: a tool, context, more
steps, a new scope) or ``stop`` (the work cannot or should not go on). Running
out of steps or budget ends the run with kind ``exhausted``. After a ``revise``
the orchestrator edits the harness with :meth:`SubAgent.revise`, and the same
sub-agent resumes with its history intact. Each sub-agent owns its history and
harness; parallel sub-agents share nothing mutable but the episode's budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .._prompts import render
from ..models.types import GenerateConfig, Message, msg
from .context import RunContext
from .protocol import Revision, SubAgentAction, narrow

ReportKind = Literal["finish", "revise", "stop", "exhausted"]
StepKind = Literal["action", "invalid", "tool_result", "revision"]


@dataclass
class Harness:
    """What a sub-agent is given: instruction, context, tools, model and step budget."""

    instruction: str
    model: str
    context: str = ""
    tools: list[str] = field(default_factory=list)
    step_budget: int = 30
    constraints: list[str] = field(default_factory=list)


@dataclass
class SubAgentReport:
    """The message a sub-agent sends when it pauses or ends."""

    kind: ReportKind
    agent: str
    status: str = ""
    request: str = ""
    evidence: str = ""
    answer: str = ""
    steps: int = 0

    def summary(self) -> str:
        parts = [f"[{self.agent}] {self.kind}"]
        for label, value in (("status", self.status), ("request", self.request), ("answer", self.answer),
                             ("evidence", self.evidence)):
            if value:
                parts.append(f"{label}: {value}")
        return "; ".join(parts)


@dataclass(frozen=True)
class StepRecord:
    """What happened in a sub-agent, as data (the history holds the same as prompt text).

    ``action``: a valid action (``key`` = action, tool and input); ``invalid``: output that stayed
    invalid after the repairs (``text`` = the raw output); ``tool_result``: a tool's feedback;
    ``revision``: the orchestrator revised the harness. Strategies read this log, never the prompts.
    """

    kind: StepKind
    text: str = ""
    key: str = ""


class SubAgent:
    """One worker agent with its own harness and history."""

    def __init__(self, ctx: RunContext, harness: Harness, *, name: str = "agent") -> None:
        self.ctx = ctx
        self.harness = harness
        self.name = name
        self.history: list[Message] = []
        self.log: list[StepRecord] = []
        self.steps_used = 0
        self.revisions: list[Revision] = []

    def _system(self) -> Message:
        h = self.harness
        tools = "\n".join(self.ctx.tools.get(t).signature() for t in h.tools if t in self.ctx.tools) or "(none)"
        context = f"Context:\n{h.context}\n\n" if h.context else ""
        if h.constraints:
            context += "Constraints:\n" + "\n".join(f"- {c}" for c in h.constraints) + "\n\n"
        return msg(
            "system",
            render("subagent_system", instruction=h.instruction, context=context, tools=tools, steps=self.steps_left),
        )

    def _window(self) -> list[Message]:
        """The history as the model sees it: whole when it fits the model's context, else the
        first message plus as many of the latest as fit (about 3 characters per token, room
        left for the system prompt and the reply). ``self.history`` itself is never cut."""
        budget_chars = int(self.ctx.pool.spec(self.harness.model).context_size * 3 * 0.5)
        if sum(len(m["content"]) for m in self.history) <= budget_chars:
            return list(self.history)
        head, tail = self.history[0], []
        used = len(head["content"])
        for m in reversed(self.history[1:]):
            used += len(m["content"])
            if used > budget_chars:
                break
            tail.append(m)
        note = msg("user", f"({len(self.history) - 1 - len(tail)} earlier messages omitted to fit the context)")
        return [head, note, *reversed(tail)]

    @property
    def steps_left(self) -> int:
        return max(0, self.harness.step_budget - self.steps_used)

    async def run(self) -> SubAgentReport:
        """Step until the sub-agent sends a message or runs out of steps."""
        if not self.history:
            self.history.append(msg("user", "Begin."))
        with self.ctx.tracer.span("subagent", self.name, model=self.harness.model,
                                  instruction=self.harness.instruction):
            while self.steps_left > 0:
                report = await self._step()
                if report is not None:
                    self.ctx.tracer.event("subagent_message", report.__dict__)
                    if report.kind == "finish":  # a finished sub-agent's answer is an agent result
                        self.ctx.record_result(report.answer)
                    return report
            report = SubAgentReport("exhausted", self.name, status="step budget used up", steps=self.steps_used)
            self.ctx.tracer.event("subagent_message", report.__dict__)
            return report

    async def _step(self) -> SubAgentReport | None:
        self.steps_used += 1
        # only "action" is required: a small model must not spend its tokens filling every field
        schema = narrow(SubAgentAction.model_json_schema(), {"tool": self.harness.tools or ["none"]},
                        optional=("tool", "input", "answer", "status", "request", "evidence"))
        with self.ctx.tracer.span("step", f"{self.name}#{self.steps_used}"):
            decision = await self.ctx.decide(
                SubAgentAction,
                [self._system(), *self._window()],
                model=self.harness.model,
                config=GenerateConfig(max_tokens=256),
                json_schema=schema,
                role="agent",
                name="subagent_step",
            )
            act = decision.action
            raw = decision.attempts[-1]["output"]
            self.history.append(msg("assistant", raw))
            if act is None:
                self.log.append(StepRecord("invalid", text=raw))
                self.history.append(msg("user",
                                        f"Invalid action ({decision.error}). Reply with one valid JSON action."))
                return None
            self.log.append(StepRecord("action", text=raw, key=f"{act.action}|{act.tool}|{act.input}"))
            if act.action == "tool":
                await self._tool(act)
                return None
            return SubAgentReport(
                act.action,
                self.name,
                status=act.status or "",
                request=act.request or "",
                evidence=act.evidence or "",
                answer=act.answer or "",
                steps=self.steps_used,
            )

    async def _tool(self, act: SubAgentAction) -> None:
        name = act.tool or ""
        if name not in self.harness.tools:
            self.history.append(
                msg("user", f"Tool '{name}' is not available to you. Use one of {self.harness.tools} "
                    "or send a revise action asking for it.")
            )
            return
        tool = self.ctx.tools.get(name)
        result = await self.ctx.call_tool(name, tool.args_from_input(act.input or ""), model=self.harness.model)
        text = f"Result of {name}: {result.feedback()}"
        self.log.append(StepRecord("tool_result", text=text))
        self.history.append(msg("user", text))

    def revise(self, revision: Revision) -> None:
        """Apply an orchestrator's revision to the live harness; history is kept."""
        h = self.harness
        notes: list[str] = []
        if revision.scope != "keep" and revision.instruction:
            h.instruction = revision.instruction
            notes.append(f"your assignment is now ({revision.scope}): {revision.instruction}")
        if revision.add_context:
            h.context = f"{h.context}\n{revision.add_context}".strip()
            notes.append(f"new context: {revision.add_context}")
        if revision.state:
            notes.append(f"state handed over: {revision.state}")
        for t in revision.add_tools:
            if t in self.ctx.tools and t not in h.tools:
                h.tools.append(t)
                notes.append(f"tool '{t}' is now available")
        for t in revision.remove_tools:
            if t in h.tools:
                h.tools.remove(t)
                notes.append(f"tool '{t}' was removed")
        if revision.add_steps:
            h.step_budget += revision.add_steps
            notes.append(f"{revision.add_steps} more steps granted")
        if revision.constraint:
            h.constraints.append(revision.constraint)
            notes.append(f"new constraint: {revision.constraint}")
        if revision.executor == "replace" and revision.model:
            self.ctx.pool.spec(revision.model)
            h.model = revision.model
            notes.append(f"you now run on model {revision.model}")
        self.revisions.append(revision)
        self.log.append(StepRecord("revision", text="; ".join(notes)))
        self.ctx.tracer.event("revision", {"agent": self.name, **revision.model_dump(mode="json")})
        self.history.append(msg("user",
                                "Revision from the orchestrator: " + ("; ".join(notes) or "no change") + ". Continue."))
