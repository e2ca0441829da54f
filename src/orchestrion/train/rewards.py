"""Reward components for training the orchestrator, and their weighted combination.

Each component is a pure function with worked examples in ``tests/train/test_rewards.py``;
:func:`episode_rewards` computes them all from a stored episode (its row, spans and
decisions), and :func:`combine` weighs them as a :class:`RewardConfig` (YAML) says.
What follows which paper:

* ``outcome`` - the scorer's score in [0, 1] (``meta.score``; else 1/0 from ``meta.correct``).
* ``protocol`` and ``invalid`` - ParaManager's protocol compliance: the share of decision
  attempts that were schema-valid, and a fixed penalty per invalid attempt (capped).
* ``diversity`` - ParaManager's diversity reward against theta_par = 1.25 (calls per round)
  and theta_tool = 3 (distinct tools). The paper's text gives the two thresholds but not the
  formula, so we use the plainest form that saturates at them:
  ``0.5 * min(1, (calls/rounds) / theta_par) + 0.5 * min(1, distinct_tools / theta_tool)``.
* ``efficiency_tokens`` / ``efficiency_cost`` - ParaManager's soft budgets: no penalty up to the
  target (L_tar tokens, C_tar tool cost units), then linear down to ``-max_penalty`` at twice
  the target (L_max = 2 L_tar, C_max = 2 C_tar), flat beyond. ``cost_budget: log`` prices compute
  units by doublings instead (``log_budget_penalty``): ParaManager's linear budget is flat past
  2 C_tar, so two episodes at 3x and 10x the target earn the same reward and RL cannot tell them apart.
* ``dollar_cost`` - the same soft budget on dollars. An unknown cost (a model without a
  price) gives *no* term at all: it is never read as a cost of 0. Compare such episodes
  only with episodes of the same pool, or set ``require_cost: true`` to fail instead.
* ``completeness`` - E3-Orch's planning completeness: the share of planned subtasks that
  were executed successfully and whose results reached the answer.
* ``uncertain_outcome`` - E3-Orch's uncertainty-aware performance: the mean score of k
  re-executions from the same history minus ``uncertainty_penalty`` times their standard
  deviation. When present, :func:`combine` uses it in place of ``outcome``.

A component that does not apply (no score, no plan, unknown cost) is left out of the
dict, and :func:`combine` adds only the components present.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .._errors import ConfigError, TraceError
from .._text import load_yaml
from ..runtime.types import EpisodeStatus
from ..status import ToolStatus
from ..trace.rows import SpanRow
from ..trace.store import TraceStore

DEFAULT_WEIGHTS: dict[str, float] = {
    "outcome": 1.0,
    "uncertain_outcome": 1.0,
    "protocol": 0.2,
    "invalid": 1.0,
    "diversity": 0.1,
    "efficiency_tokens": 0.1,
    "efficiency_cost": 0.1,
    "dollar_cost": 0.0,
    "completeness": 0.1,
}
COMPONENTS = tuple(DEFAULT_WEIGHTS)


# -- pure components ---------------------------------------------------------------
def outcome_reward(score: float | None, correct: bool | None = None) -> float | None:
    """The scorer's score clipped to [0, 1]; 1/0 from ``correct`` when there is no score; else None."""
    if score is not None:
        return min(1.0, max(0.0, float(score)))
    if correct is not None:
        return 1.0 if correct else 0.0
    return None


def protocol_reward(valid_attempts: int, total_attempts: int) -> float | None:
    """Share of decision attempts that were valid (None when the episode made no decision)."""
    if total_attempts <= 0:
        return None
    return valid_attempts / total_attempts


def invalid_penalty(invalid_attempts: int, per_invalid: float = 0.1, cap: float = 1.0) -> float:
    """``-per_invalid`` for each invalid attempt, never below ``-cap``."""
    return -min(cap, per_invalid * max(0, invalid_attempts))


def diversity_reward(calls: int, rounds: int, distinct_tools: int, theta_par: float = 1.25,
                     theta_tool: float = 3) -> float:
    """Half for parallelism (calls per round up to ``theta_par``), half for tool variety (up to ``theta_tool``)."""
    par = min(1.0, (calls / rounds) / theta_par) if rounds > 0 else 0.0
    tool = min(1.0, distinct_tools / theta_tool) if theta_tool > 0 else 1.0
    return 0.5 * par + 0.5 * tool


def soft_budget_penalty(used: float, target: float, max_penalty: float = 1.0) -> float:
    """0 up to ``target``, linear to ``-max_penalty`` at ``2 * target``, ``-max_penalty`` beyond."""
    if target <= 0:
        raise ValueError(f"soft budget target must be positive, got {target}")
    if used <= target:
        return 0.0
    return -max_penalty * min(1.0, (used - target) / target)


def log_budget_penalty(used: float, target: float, doublings: float, max_penalty: float = 1.0) -> float:
    """0 up to ``target``, then ``-max_penalty`` times the doublings past it over ``doublings``,
    reaching ``-max_penalty`` at ``target * 2**doublings`` and flat beyond."""
    if target <= 0 or doublings <= 0:
        raise ValueError(f"log budget needs a positive target and doublings, got {target} and {doublings}")
    if used <= target:
        return 0.0
    return -max_penalty * min(1.0, math.log2(used / target) / doublings)


def dollar_cost_reward(cost_usd: float | None, target: float, max_penalty: float = 1.0) -> float | None:
    """The soft budget on dollars; None (no term) when the cost is unknown, never 0."""
    return None if cost_usd is None else soft_budget_penalty(cost_usd, target, max_penalty)


def planning_completeness(planned: int, used: int) -> float | None:
    """Share of planned subtasks that ran successfully and fed the answer (None without a plan)."""
    if planned <= 0:
        return None
    if not 0 <= used <= planned:
        raise ValueError(f"used subtasks ({used}) must be between 0 and planned ({planned})")
    return used / planned


def uncertainty_aware_outcome(scores: Sequence[float], penalty: float = 0.5) -> float:
    """Mean of k re-execution scores minus ``penalty`` times their (population) standard deviation."""
    if not scores:
        raise ValueError("uncertainty-aware outcome needs at least one re-execution score")
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    return mean - penalty * std


# -- configuration -----------------------------------------------------------------
class RewardConfig(BaseModel):
    """Weights and thresholds of the reward; every field is documented in ``examples/rewards.yaml``."""

    model_config = ConfigDict(extra="forbid")

    weights: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    theta_par: float = Field(default=1.25, gt=0)
    theta_tool: float = Field(default=3.0, gt=0)
    tokens_target: float = Field(default=12288, gt=0)
    token_measure: Literal["all", "output"] = "all"
    cost_units_target: float = Field(default=8.0, gt=0)
    cost_budget: Literal["linear", "log"] = "linear"
    cost_doublings: float = Field(default=4.0, gt=0)
    usd_target: float = Field(default=0.01, gt=0)
    require_cost: bool = False
    max_penalty: float = Field(default=1.0, ge=0)
    invalid_penalty: float = Field(default=0.1, ge=0)
    invalid_cap: float = Field(default=1.0, ge=0)
    uncertainty_penalty: float = Field(default=0.5, ge=0)

    @field_validator("weights")
    @classmethod
    def _known(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(COMPONENTS))
        if unknown:
            raise ValueError(f"unknown reward component(s) {', '.join(unknown)}; known: {', '.join(COMPONENTS)}")
        return {**DEFAULT_WEIGHTS, **value}  # components not listed keep their default weight

    @classmethod
    def from_yaml(cls, path: str | Path) -> RewardConfig:
        p = Path(path)
        raw = load_yaml(p, missing="reward config not found; see examples/rewards.yaml")
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise ConfigError(f"{p}: expected a mapping of reward settings (see examples/rewards.yaml)")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
            raise ConfigError(f"{p}: field '{loc}': {first['msg']}") from None


def load_reward_config(path: str | Path | None) -> RewardConfig:
    """The config in ``path``, or the defaults when ``path`` is None."""
    return RewardConfig() if path is None else RewardConfig.from_yaml(path)


def combine(components: Mapping[str, float], cfg: RewardConfig | None = None) -> float:
    """Weighted sum of the components present; ``uncertain_outcome`` replaces ``outcome`` when given."""
    weights = (cfg or RewardConfig()).weights
    unknown = sorted(set(components) - set(COMPONENTS))
    if unknown:
        raise ValueError(f"unknown reward component(s): {', '.join(unknown)}")
    total = 0.0
    for name, value in components.items():
        if name == "outcome" and "uncertain_outcome" in components:
            continue
        total += weights.get(name, 0.0) * float(value)
    return total


# -- from a stored episode -----------------------------------------------------------
def episode_rewards(
    store: TraceStore, episode_id: str, cfg: RewardConfig | None = None, *, outcomes: Sequence[float] | None = None
) -> dict[str, float]:
    """Every applicable component for one stored episode; ``outcomes`` are the scores of k
    re-executions from the same history, when the caller has them (tree rollouts)."""
    cfg = cfg or RewardConfig()
    ep = store.episode(episode_id)
    if ep is None:
        raise TraceError(f"episode '{episode_id}' not found in {store.path}")
    meta = _loads(ep.meta) or {}
    result: dict[str, Any] = meta["result"] if isinstance(meta.get("result"), dict) else {}
    spans = store.spans(ep.id)
    decisions = store.decision_validity([ep.id])
    out: dict[str, float | None] = {}
    out["outcome"] = outcome_reward(_num(meta.get("score")),
                                    meta.get("correct") if isinstance(meta.get("correct"), bool) else None)
    if outcomes is not None:
        out["uncertain_outcome"] = uncertainty_aware_outcome(list(outcomes), cfg.uncertainty_penalty)
    valid = sum(decisions)
    out["protocol"] = protocol_reward(valid, len(decisions))
    out["invalid"] = invalid_penalty(len(decisions) - valid, cfg.invalid_penalty, cfg.invalid_cap)
    calls, rounds = top_level_calls(spans), orchestration_rounds(spans)
    out["diversity"] = diversity_reward(len(calls), rounds, len({_tool(s) for s in calls}), cfg.theta_par,
                                        cfg.theta_tool)
    tokens = (ep.output_tokens or 0) + (0 if cfg.token_measure == "output" else (ep.input_tokens or 0))
    out["efficiency_tokens"] = soft_budget_penalty(tokens, cfg.tokens_target, cfg.max_penalty)
    out["efficiency_cost"] = cost_units_penalty(ep.cost_units or 0.0, cfg)
    if ep.cost_usd is None and cfg.require_cost:
        raise ConfigError(f"episode {ep.id}: dollar cost unknown (a model has no price); give prices in pool.yaml "
                          "or set require_cost: false")
    out["dollar_cost"] = dollar_cost_reward(ep.cost_usd, cfg.usd_target, cfg.max_penalty)
    plan = plan_usage(result, calls, ep.status or "")
    out["completeness"] = planning_completeness(*plan) if plan is not None else None
    return {k: float(v) for k, v in out.items() if v is not None}


def cost_units_penalty(units: float, cfg: RewardConfig) -> float:
    """The efficiency_cost component for ``units`` compute units, by the config's budget shape."""
    if cfg.cost_budget == "log":
        return log_budget_penalty(units, cfg.cost_units_target, cfg.cost_doublings, cfg.max_penalty)
    return soft_budget_penalty(units, cfg.cost_units_target, cfg.max_penalty)


def episode_reward(store: TraceStore, episode_id: str, cfg: RewardConfig | None = None) -> float:
    """The combined reward of one stored episode."""
    return combine(episode_rewards(store, episode_id, cfg), cfg)


def _loads(value: Any) -> Any:
    try:
        return orjson.loads(value) if value else None
    except orjson.JSONDecodeError:
        return None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _tool(span: SpanRow) -> str:
    attrs = _loads(span.attrs) or {}
    return str(attrs.get("tool") or span.name) if isinstance(attrs, dict) else str(span.name)


def _ancestors(span: SpanRow, by_id: dict[str, SpanRow]) -> list[SpanRow]:
    out, parent = [], by_id.get(span.parent_id or "")
    while parent is not None:
        out.append(parent)
        parent = by_id.get(parent.parent_id or "")
    return out


def top_level_calls(spans: list[SpanRow]) -> list[SpanRow]:
    """Tool and agent-tool calls not made from inside another tool or agent tool."""
    by_id = {s.id: s for s in spans}
    return [s for s in spans if s.kind in ("tool", "agent")
            and not any(a.kind in ("tool", "agent") for a in _ancestors(s, by_id))]


def orchestration_rounds(spans: list[SpanRow]) -> int:
    """Para's ``round`` spans; for other strategies, orchestrator decisions (not sub-agents' or tools')."""
    rounds = sum(1 for s in spans if s.kind == "round")
    if rounds:
        return rounds
    by_id = {s.id: s for s in spans}
    return sum(1 for s in spans if s.kind == "decision"
               and not any(a.kind in ("tool", "agent", "subagent") for a in _ancestors(s, by_id)))


def plan_usage(result: Mapping[str, Any], calls: list[SpanRow], status: str) -> tuple[int, int] | None:
    """``(planned, used)`` subtasks from a strategy's answer meta (milestone, spec, uno, topology)
    or, for para, its calls. A result is *used* when its subtask ran ok and the episode ended ok
    (its synthesis read it); for spec only roles that feed a sink (or a sink itself) count,
    since the synthesis reads the sinks. None when the episode had no plan."""
    done = status == EpisodeStatus.OK
    if isinstance(result.get("milestones"), list):
        planned = sum(len(m.get("planned", [])) for m in result["milestones"])
        ok = sum(len(m.get("executed_ok", [])) for m in result["milestones"])
        return planned, ok if done else 0
    if isinstance(result.get("roles"), dict):
        roles: dict[str, str] = result["roles"]
        ok_ids = {k for k, v in roles.items() if v == "ok"}
        sinks = set(result.get("sinks") or [])
        feeds = {d for s in result.get("compiled") or [] if s.get("id") in ok_ids for d in s.get("deps", [])}
        used = ok_ids & (sinks | feeds) if ok_ids & sinks else ok_ids
        return len(roles), len(used) if done else 0
    if result.get("mode") == "decompose" and isinstance(result.get("pairs"), list):
        pairs = result["pairs"]
        return len(pairs), sum(1 for p in pairs if p.get("status") == "ok") if done else 0
    if "topology" in result and isinstance(result.get("subtasks"), int):
        return int(result["subtasks"]), int(result.get("subtasks_ok") or 0) if done else 0
    if "rounds" in result and "calls" in result:
        return len(calls), sum(1 for c in calls if c.status == ToolStatus.OK) if done else 0
    return None
