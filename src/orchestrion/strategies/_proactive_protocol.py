"""POrchestra's pieces on top of the sub-agent runtime: the strategy's options, the orchestrator's
action schema (``delegate_task`` / ``revise_task`` / ``complete``, plus ``wait`` for concurrent
sub-agents) and a sub-agent that hands control back when it is stuck.

The action is one flat model with a discriminating ``action`` field. Every other field is
optional, so a small model under constrained decoding only has to write what its action
needs; :func:`decision_schema` pins the action, target, model and tool names to the ones
that exist at that moment.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..runtime.context import RunContext
from ..runtime.options import POOL_MODEL, StrategyOptions
from ..runtime.protocol import narrow
from ..runtime.subagent import Harness, SubAgent, SubAgentReport

ActionName = Literal["delegate_task", "revise_task", "complete", "wait", "solve_directly"]
Scope = Literal["keep", "reduce", "expand", "remove", "decompose"]
REVISE_ONLY = ("target", "scope", "remove_tools", "constraint", "state", "executor")


class ProactiveOptions(StrategyOptions):
    """The options of :class:`~orchestrion.strategies.proactive.Proactive` (the paper's defaults where it has them)."""

    max_steps: int = Field(default=300, ge=1,
                           description="sub-agent steps in all, over the whole episode (paper: 300)")
    max_subagents: int = Field(default=10, ge=1, description="most sub-agents started (paper: 10)")
    subagent_steps: int = Field(default=30, ge=1,
                                description="most steps one sub-agent's harness may hold (paper: 30)")
    max_active: int = Field(default=1, ge=1, description="sub-agents running at once (paper: 1; at least 1)")
    max_decisions: int = Field(default=30, ge=1, description="most orchestrator decisions")
    max_invalid: int = Field(default=2, ge=1,
                             description="invalid decisions in a row before the fallback (at least 1)")
    stall_steps: int = Field(default=3, ge=0,
                             description="same action this many times in a row pauses a sub-agent as stuck (0 = off)")
    max_fruitless: int = Field(default=3, ge=0, description="sub-agent runs in a row without a result that stop "
                                                            "the loop (0 = off)")
    worker_model: str | None = Field(default=None, json_schema_extra=POOL_MODEL,
                                     description="default sub-agent model (default: the pool's executor)")
    decision_tokens: int = Field(default=320, ge=1, description="output-token limit of each orchestrator decision")
    code_examples: bool = Field(default=True, description=(
        "a code task (a function stub in the prompt) goes to one sub-agent that tests its function on the "
        "docstring's examples and asks for a revision when one fails"))
    code_revisions: int = Field(default=2, ge=1, le=6, description=(
        "code tasks with examples: most revisions the orchestrator grants (more steps, or another model)"))


class ProactiveAction(BaseModel):
    """One orchestrator decision; ``action`` says which of the optional fields apply.

    delegate_task: instruction, context, tools, model, step_budget.
    revise_task: target, scope, instruction (new assignment), context (added), tools (added),
    remove_tools, step_budget (extra steps), constraint, state (handed over), executor + model.
    complete: answer.  wait: nothing (only offered while sub-agents run concurrently).
    solve_directly: model (the unchanged task goes to that model; its answer is a result).
    """

    model_config = ConfigDict(extra="ignore")

    action: ActionName
    answer: str | None = Field(default=None, max_length=400)
    target: str | None = Field(default=None, max_length=20)
    scope: Scope | None = None
    instruction: str | None = Field(default=None, max_length=400)
    context: str | None = Field(default=None, max_length=600)
    tools: list[str] | None = Field(default=None, max_length=6)
    remove_tools: list[str] | None = Field(default=None, max_length=6)
    step_budget: int | None = None
    constraint: str | None = Field(default=None, max_length=200)
    state: str | None = Field(default=None, max_length=600)
    executor: Literal["keep", "replace"] | None = None
    model: str | None = Field(default=None, max_length=80)


def decision_schema(actions: list[str], targets: list[str], models: list[str], tools: list[str]) -> dict[str, Any]:
    """The schema for constrained decoding: only ``action`` is required; names are pinned.

    Revision-only fields are left out when ``revise_task`` is not offered, tool fields when
    there are no tools, so the grammar (and the schema shown in prompts) stays small.
    """
    drop: tuple[str, ...] = () if "revise_task" in actions else REVISE_ONLY
    drop += () if tools else ("tools", "remove_tools")
    optional = tuple(k for k in ProactiveAction.model_fields if k != "action")
    schema = narrow(ProactiveAction.model_json_schema(), {"action": actions, "target": targets, "model": models},
                    drop=drop, optional=optional)
    for key in ("tools", "remove_tools"):
        if key in schema["properties"]:
            schema["properties"][key] = {"type": "array", "items": {"enum": tools}, "maxItems": 4}
    return schema


class PausingSubAgent(SubAgent):
    """A sub-agent that pauses itself (a ``stop`` report) when it is stuck.

    Stuck means: a step whose output stayed invalid after the repairs, or the same action
    (tool and input) ``stall`` times in a row since its last revision. The orchestrator
    then sees why and can revise it (a tool, context, another model) or end it.
    ``stall=0`` turns the check off.
    """

    def __init__(self, ctx: RunContext, harness: Harness, *, name: str, stall: int = 3) -> None:
        super().__init__(ctx, harness, name=name)
        self.stall = stall

    async def _step(self) -> SubAgentReport | None:
        report = await super()._step()
        if report is not None or self.stall <= 0:
            return report
        last = self.log[-1] if self.log else None
        if last is not None and last.kind == "invalid":
            return self._pause("no valid action after repairs", last.text)
        keys: list[str] = []
        for step in reversed(self.log):
            if step.kind == "revision":
                break
            if step.kind == "action":
                keys.append(step.key)
            if len(keys) == self.stall:
                break
        if len(keys) == self.stall and len(set(keys)) == 1:
            return self._pause(f"no progress: the same action {self.stall} times in a row", keys[0])
        return None

    def _pause(self, status: str, evidence: str) -> SubAgentReport:
        return SubAgentReport("stop", self.name, status=status, evidence=evidence[:300], steps=self.steps_used)
