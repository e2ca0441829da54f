"""Reward components on worked examples (numbers computed by hand in the comments),
the YAML config, and every component computed from stored episodes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from orchestrion import Pool, ScriptedModel, Task, TraceStore, solve
from orchestrion._errors import ConfigError, TraceError
from orchestrion.models.cost import Price
from orchestrion.train.rewards import (
    RewardConfig,
    combine,
    cost_units_penalty,
    diversity_reward,
    dollar_cost_reward,
    episode_reward,
    episode_rewards,
    invalid_penalty,
    log_budget_penalty,
    outcome_reward,
    plan_usage,
    planning_completeness,
    protocol_reward,
    soft_budget_penalty,
    uncertainty_aware_outcome,
)
from tests.train.test_records import action, build_run, tools

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rewards.yaml"


def test_outcome() -> None:
    assert outcome_reward(0.7) == 0.7
    assert outcome_reward(1.3) == 1.0 and outcome_reward(-2) == 0.0  # clipped to [0, 1]
    assert outcome_reward(None, True) == 1.0 and outcome_reward(None, False) == 0.0
    assert outcome_reward(None) is None  # unscored: no term


def test_protocol_and_invalid_penalty() -> None:
    assert protocol_reward(2, 3) == pytest.approx(2 / 3)  # 2 valid of 3 attempts
    assert protocol_reward(0, 0) is None  # no decision made: no term
    assert invalid_penalty(3) == pytest.approx(-0.3)  # 3 x -0.1
    assert invalid_penalty(20) == -1.0  # 20 x -0.1 = -2, capped at -1
    assert invalid_penalty(4, per_invalid=0.25, cap=0.5) == -0.5  # -1.0 capped at -0.5
    assert invalid_penalty(0) == 0.0


def test_diversity() -> None:
    # 5 calls in 4 rounds: 1.25 per round = theta_par -> 1; 2 tools of theta_tool 3 -> 2/3
    # 0.5 * 1 + 0.5 * 2/3 = 0.8333
    assert diversity_reward(5, 4, 2) == pytest.approx(0.5 + 1 / 3)
    # 2 calls in 4 rounds: 0.5 / 1.25 = 0.4; 3 tools -> 1;  0.5*0.4 + 0.5*1 = 0.7
    assert diversity_reward(2, 4, 3) == pytest.approx(0.7)
    # saturates: 16 calls in 4 rounds and 8 tools still give 1
    assert diversity_reward(16, 4, 8) == 1.0
    assert diversity_reward(0, 0, 0) == 0.0
    # custom thresholds: 3 calls / 1 round vs theta_par 2 -> 1; 1 tool vs theta_tool 2 -> 0.5 -> 0.75
    assert diversity_reward(3, 1, 1, theta_par=2, theta_tool=2) == pytest.approx(0.75)


def test_soft_budgets() -> None:
    assert soft_budget_penalty(12288, 12288) == 0.0  # at the target: free
    assert soft_budget_penalty(100, 12288) == 0.0
    assert soft_budget_penalty(18432, 12288) == pytest.approx(-0.5)  # halfway to 2x target
    assert soft_budget_penalty(24576, 12288) == -1.0  # at L_max = 2 L_tar
    assert soft_budget_penalty(30000, 12288) == -1.0  # flat beyond
    assert soft_budget_penalty(10, 8, max_penalty=0.5) == pytest.approx(-0.125)  # (10-8)/8 * 0.5
    with pytest.raises(ValueError):
        soft_budget_penalty(1, 0)


def test_log_budget_prices_each_doubling() -> None:
    assert log_budget_penalty(2, 2, 5) == 0.0  # at the target: free
    assert log_budget_penalty(8, 2, 5) == pytest.approx(-0.4)  # two doublings of five
    assert log_budget_penalty(64, 2, 5) == -1.0 and log_budget_penalty(500, 2, 5) == -1.0  # full, then flat
    assert log_budget_penalty(4, 2, 1, max_penalty=0.5) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="positive"):
        log_budget_penalty(3, 2, 0)
    # where the linear budget is already flat (3x and 10x the target), the log budget still ranks them
    linear, log = RewardConfig(cost_units_target=2), RewardConfig(cost_units_target=2, cost_budget="log")
    assert cost_units_penalty(6, linear) == cost_units_penalty(20, linear) == -1.0
    assert cost_units_penalty(20, log) < cost_units_penalty(6, log) < 0


def test_dollar_cost_unknown_is_no_term_not_zero() -> None:
    assert dollar_cost_reward(None, 0.01) is None
    assert dollar_cost_reward(0.0, 0.01) == 0.0
    assert dollar_cost_reward(0.015, 0.01) == pytest.approx(-0.5)


def test_planning_completeness() -> None:
    assert planning_completeness(4, 3) == 0.75
    assert planning_completeness(0, 0) is None
    with pytest.raises(ValueError):
        planning_completeness(2, 3)


def test_uncertainty_aware_outcome() -> None:
    # [1, 0, 1, 1]: mean 0.75; deviations .25,.75,.25,.25 -> variance (3*.0625 + .5625)/4 = .1875, std .4330
    # 0.75 - 0.5 * 0.4330 = 0.5335
    assert uncertainty_aware_outcome([1, 0, 1, 1], 0.5) == pytest.approx(0.75 - 0.5 * math.sqrt(0.1875))
    assert uncertainty_aware_outcome([0.6, 0.6], 2.0) == pytest.approx(0.6)  # no spread, no penalty
    assert uncertainty_aware_outcome([1, 0], 1.0) == 0.0  # mean .5 minus std .5
    with pytest.raises(ValueError):
        uncertainty_aware_outcome([])


def test_combine_weights_present_components() -> None:
    comps = {"outcome": 1.0, "protocol": 2 / 3, "invalid": -0.1, "diversity": 0.5, "efficiency_tokens": -0.5}
    # 1*1 + 0.2*2/3 + 1*-0.1 + 0.1*0.5 + 0.1*-0.5 = 1 + 0.1333 - 0.1 + 0.05 - 0.05 = 1.0333
    assert combine(comps) == pytest.approx(1 + 0.2 * 2 / 3 - 0.1)
    cfg = RewardConfig(weights={"outcome": 2.0, "protocol": 0.0})
    assert combine({"outcome": 0.5, "protocol": 1.0, "invalid": -0.2}, cfg) == pytest.approx(1.0 - 0.2)
    # uncertain_outcome takes the place of outcome: 1 * 0.4 + 0.2 * 1
    assert combine({"outcome": 1.0, "uncertain_outcome": 0.4, "protocol": 1.0}) == pytest.approx(0.6)
    assert combine({}) == 0.0
    with pytest.raises(ValueError, match="unknown reward component"):
        combine({"speed": 1.0})


def test_example_yaml_documents_the_defaults(tmp_path: Path) -> None:
    cfg = RewardConfig.from_yaml(EXAMPLE)
    assert cfg == RewardConfig()
    text = EXAMPLE.read_text()
    for name in RewardConfig.model_fields:
        assert f"{name}:" in text, f"examples/rewards.yaml does not document {name}"
    for name in cfg.weights:
        assert f"  {name}:" in text
    part = tmp_path / "r.yaml"
    part.write_text("weights:\n  outcome: 3\ntokens_target: 100\n")
    cfg = RewardConfig.from_yaml(part)
    assert cfg.weights["outcome"] == 3 and cfg.weights["protocol"] == 0.2 and cfg.tokens_target == 100


@pytest.mark.parametrize("text,needle", [
    ("weights:\n  speed: 1\n", "field 'weights': Value error, unknown reward component(s) speed"),
    ("theta_par: -1\n", "field 'theta_par'"),
    ("colour: red\n", "field 'colour'"),
    ("weights: [1, 2\n", "not valid YAML"),
    ("- 1\n", "expected a mapping"),
])
def test_bad_config_is_one_line_naming_file_and_field(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        RewardConfig.from_yaml(path)
    assert str(path) in str(info.value) and needle in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="not found"):
        RewardConfig.from_yaml(tmp_path / "missing.yaml")


async def test_episode_rewards_from_stored_para_episodes(store: TraceStore) -> None:
    ids = await build_run(store)
    a = episode_rewards(store, ids["A"])
    # A: 3 attempts, 2 valid; 2 rounds, 1 calculator call (1 cost unit), correct, no price (no dollar term)
    assert set(a) == {"outcome", "protocol", "invalid", "diversity", "efficiency_tokens", "efficiency_cost",
                      "completeness"}
    assert a["outcome"] == 1.0
    assert a["protocol"] == pytest.approx(2 / 3)
    assert a["invalid"] == pytest.approx(-0.1)
    assert a["diversity"] == pytest.approx(0.5 * (0.5 / 1.25) + 0.5 * (1 / 3))  # 0.2 + 0.1667
    assert a["efficiency_tokens"] == 0.0 and a["efficiency_cost"] == 0.0
    assert a["completeness"] == 1.0  # one call, ok, read by the synthesis
    c = episode_rewards(store, ids["C"], RewardConfig(cost_units_target=1.5))
    # C: one round of 2 calls + the final round: 2/2 = 1 -> 0.8; 2 tools -> 2/3; 0.4 + 0.3333
    assert c["diversity"] == pytest.approx(0.4 + 1 / 3)
    assert c["completeness"] == 0.5  # the crash failed, the lookup was used
    assert c["protocol"] == 1.0 and c["invalid"] == 0.0
    # C's units: 2 from its tools, plus its model's tokens at 1 unit per 1k (a tier-1 model)
    ep_c = store.episode(ids["C"])
    assert ep_c is not None
    units = 2 + (ep_c.input_tokens + ep_c.output_tokens) / 1000
    assert ep_c.cost_units == pytest.approx(units) and units > 2
    assert c["efficiency_cost"] == pytest.approx(-(units - 1.5) / 1.5)
    b = episode_rewards(store, ids["B"])
    assert b["outcome"] == 0.0
    ep = store.episode(ids["A"])
    assert ep is not None
    tokens = ep.input_tokens + ep.output_tokens
    half = episode_rewards(store, ids["A"], RewardConfig(tokens_target=tokens / 1.5))
    assert half["efficiency_tokens"] == pytest.approx(-0.5)  # 1.5x the target
    out_only = episode_rewards(store, ids["A"], RewardConfig(tokens_target=ep.output_tokens / 1.5,
                                                              token_measure="output"))
    assert out_only["efficiency_tokens"] == pytest.approx(-0.5)
    assert episode_reward(store, ids["A"]) == pytest.approx(combine(a))
    unc = episode_rewards(store, ids["A"], outcomes=[1, 0])
    assert unc["uncertain_outcome"] == 0.25  # 0.5 - 0.5 * 0.5
    with pytest.raises(TraceError):
        episode_rewards(store, "no-such-episode")


async def test_dollar_term_only_with_known_prices(store: TraceStore) -> None:
    orch = ScriptedModel([action([], True), "5"], name="orch", price=Price(input_per_mtok=1e6, output_per_mtok=1e6))
    res = await solve(Task(prompt="q"), strategy="para", pool=Pool.from_models([orch]), tools=tools(), store=store)
    cost = res.cost_usd
    assert cost is not None and cost > 0  # $1 per token here
    r = episode_rewards(store, res.trace_id, RewardConfig(usd_target=cost / 1.5))
    assert r["dollar_cost"] == pytest.approx(-0.5)
    unpriced = ScriptedModel([action([], True), "5"], name="orch")
    res2 = await solve(Task(prompt="q"), strategy="para", pool=Pool.from_models([unpriced]), tools=tools(), store=store)
    assert "dollar_cost" not in episode_rewards(store, res2.trace_id)
    with pytest.raises(ConfigError, match="dollar cost unknown"):
        episode_rewards(store, res2.trace_id, RewardConfig(require_cost=True))


def test_plan_usage_worked_examples() -> None:
    milestone = {"milestones": [{"planned": ["s1", "s2"], "executed_ok": ["s1"]},
                                {"planned": ["s1"], "executed_ok": ["s1"]}]}
    assert plan_usage(milestone, [], "ok") == (3, 2)
    assert plan_usage(milestone, [], "budget_exceeded") == (3, 0)  # no synthesis read them
    # spec: sink c ok needs b; a ok feeds nothing ok; d failed -> b and c used of 4
    spec = {"roles": {"a": "ok", "b": "ok", "c": "ok", "d": "error"}, "sinks": ["c"],
            "compiled": [{"id": "a", "deps": []}, {"id": "b", "deps": []}, {"id": "c", "deps": ["b"]},
                         {"id": "d", "deps": ["a"]}]}
    assert plan_usage(spec, [], "ok") == (4, 2)
    # every sink failed: the synthesis reads all of the plan, so every ok role counts
    spec["roles"] = {"a": "ok", "b": "ok", "c": "error", "d": "error"}
    assert plan_usage(spec, [], "ok") == (4, 2)
    uno = {"mode": "decompose", "pairs": [{"status": "ok"}, {"status": "skipped"}, {"status": "ok"}]}
    assert plan_usage(uno, [], "ok") == (3, 2)
    assert plan_usage({"mode": "direct", "pairs": [{"status": "ok"}]}, [], "ok") is None
    assert plan_usage({"topology": "parallel", "subtasks": 4, "subtasks_ok": 3}, [], "ok") == (4, 3)
    assert plan_usage({"model": "x"}, [], "ok") is None  # a baseline has no plan


async def test_efficiency_prefers_the_cheaper_tier_for_the_same_work(store: TraceStore) -> None:
    """Two episodes with the same script and the same answer, one on a tier-1 model and one on a
    tier-3 model: the tier-3 one spends 3x the compute units, so past the target its efficiency
    reward is lower. That difference is what lets RL move work to the cheaper tier."""
    rewards = {}
    for tier in (1, 3):
        model = ScriptedModel(["The answer is 5. " * 30], name=f"m{tier}")
        pool = Pool.from_models([model])
        pool.config.models[0].tier = tier
        res = await solve(Task(id=f"t{tier}", prompt="What is 2+3? " * 20), strategy="direct", pool=pool, store=store)
        await store.aflush()
        ep = store.episode(res.trace_id)
        assert ep is not None and ep.cost_units == pytest.approx(
            (ep.input_tokens + ep.output_tokens) * tier / 1000)
        rewards[tier] = episode_rewards(store, res.trace_id, RewardConfig(cost_units_target=0.1))
    assert rewards[3]["efficiency_cost"] < rewards[1]["efficiency_cost"] <= 0
    assert rewards[3]["efficiency_tokens"] == rewards[1]["efficiency_tokens"]


def test_the_delegation_rewards_price_compute_and_not_parallelism() -> None:
    """examples/rewards_delegation.yaml (bench/learning.py --mixed) loads, drops the diversity term
    and makes an episode over its compute-unit target cost more than the default mix does."""
    cfg = RewardConfig.from_yaml(EXAMPLE.with_name("rewards_delegation.yaml"))
    assert cfg.weights["diversity"] == 0.0 and cfg.weights["outcome"] == 1.0
    spent = 6.0  # compute units: under the default target (8), over this one
    ours = combine({"outcome": 1.0, "efficiency_cost": cost_units_penalty(spent, cfg)}, cfg)
    default = combine({"outcome": 1.0, "efficiency_cost": cost_units_penalty(spent, RewardConfig())}, RewardConfig())
    assert default == 1.0 and ours < 0.9
    # the student's episodes span 9-50 units: the delegation budget still tells those apart, and a
    # right answer at 64 units stays worth more than a wrong one at none
    worth = [combine({"outcome": 1.0, "efficiency_cost": cost_units_penalty(u, cfg)}, cfg) for u in (9, 25, 50, 64)]
    assert worth == sorted(worth, reverse=True) and len(set(worth)) == 4 and worth[-1] > 0
