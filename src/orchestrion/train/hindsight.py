"""Hindsight for OPOD: what other scored episodes of the same task say an episode should have done.

An OPOD judge that sees only one episode rarely knows what would have worked instead (on the
local pool it flagged none of 12 decisions). Other episodes of the same task prompt in the trace
store do know: ``direct`` on each model, ``program``, the teacher. For each episode of a run:

- it **lost points** when its score is below the best score another episode of its prompt got.
  The hint names what got that score, cheapest first: a tool that decided it (``calculator``,
  ``python``) or the unchanged task sent to one model (``solve_directly``);
- it **overspent** when it scored above 0 and another episode of its prompt scored at least as
  well for at most ``1 - saving`` of its compute units (by default 25% fewer). The hint names the
  cheaper way. (A failed episode is not hinted towards a cheaper run that failed too.)

Episodes with no such evidence get no hint; OPOD then judges only the decisions of episodes that
have one, with the hint shown to the judge as evidence (:func:`orchestrion.train._opod_judge.judge_records`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..strategies.auto import arm_of
from ..trace.store import TraceStore

DECIDING_TOOLS = ("calculator", "python")


@dataclass(frozen=True)
class Hindsight:
    """Why an episode is worth judging, and the hint the evidence gives."""

    episode_id: str
    reason: str  # "lost points" | "overspent"
    hint: str


@dataclass(frozen=True)
class _Episode:
    id: str
    prompt: str
    score: float
    units: float
    arm: str
    tools: tuple[str, ...]  # deciding tools that returned ok


def _how(ep: _Episode) -> str:
    """What the other episode did, as an instruction to the orchestrator."""
    if ep.tools:
        return f"call {' and '.join(ep.tools)} with the task's own numbers and facts"
    strategy, _, model = ep.arm.partition(":")
    if strategy == "direct" and model:
        return f"send the task unchanged to {model} (solve_directly)"
    return f"do what {ep.arm} did"


def _load(store: TraceStore, prompts: set[str]) -> list[_Episode]:
    """Every finished, scored episode whose task prompt is one of ``prompts``."""
    rows = store.scored_episodes_of(prompts)
    ok_tools = store.ok_tool_names([r.id for r in rows], DECIDING_TOOLS)
    out = []
    for r in rows:
        meta: dict[str, Any] = r.meta_value()
        result = meta.get("result") if isinstance(meta.get("result"), dict) else {}
        out.append(_Episode(r.id, r.task_value()["prompt"], float(meta["score"]), float(r.cost_units or 0.0),
                            arm_of(r.strategy, result or {}) or r.strategy, tuple(ok_tools.get(r.id, []))))
    return out


def hindsight(store: TraceStore, run_id: str, *, saving: float = 0.25) -> dict[str, Hindsight]:
    """The hint for each episode of run ``run_id`` that lost points or overspent, by episode id."""
    mine = set(store.episode_ids(run_id=run_id, finished=True))
    episodes = _load(store, store.task_prompts(run_id))
    by_prompt: dict[str, list[_Episode]] = {}
    for ep in episodes:
        by_prompt.setdefault(ep.prompt, []).append(ep)
    found: dict[str, Hindsight] = {}
    for ep in (e for e in episodes if e.id in mine):
        others = [o for o in by_prompt[ep.prompt] if o.id != ep.id]
        best = max((o.score for o in others), default=ep.score)
        if best > ep.score:
            top = min((o for o in others if o.score == best), key=lambda o: (not o.tools, o.units))
            found[ep.id] = Hindsight(ep.id, "lost points", f"This episode scored {ep.score:g}; another run of the same "
                                                           f"task scored {best:g}. What worked: {_how(top)}.")
            continue
        # an episode that scored nothing overspent only in a sense that teaches nothing: a cheaper
        # run that also failed would be hinted as the way to go
        cheaper = [o for o in others if o.score >= ep.score and o.units <= (1 - saving) * ep.units]
        if cheaper and ep.units > 0 and ep.score > 0:
            top = min(cheaper, key=lambda o: o.units)
            found[ep.id] = Hindsight(ep.id, "overspent", f"Another run of the same task scored as well for "
                                                         f"{top.units / ep.units:.0%} of this episode's compute "
                                                         f"units: {_how(top)}.")
    return found
