"""Group rollouts (GRPO): advantages on worked examples, seeds, samples with exact token ids."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from orchestrion import (
    Budget,
    ConfigError,
    EpisodeResult,
    GenerateConfig,
    Message,
    Pool,
    ScriptedModel,
    Task,
    ToolRegistry,
    TraceStore,
)
from orchestrion.models.types import Completion
from orchestrion.runtime.context import decision_seed
from orchestrion.train.rollouts import (
    ROLLOUT_TEMPERATURE,
    collect_group,
    collect_groups,
    decision_rows,
    group_advantages,
    group_samples,
    scored_reward,
)
from orchestrion.train.settings import RolloutSettings
from tests.helpers import LookupTool, echo_results

TASK = Task(prompt="What is 6*7?", id="t1")


class TokenModel(ScriptedModel):
    """A scripted model that also reports token ids and log-probs, one token per character
    (id = code point), so sample building can be checked without a real tokenizer."""

    async def complete(self, messages: Sequence[Message], config: GenerateConfig) -> Completion:
        out = await super().complete(messages, config)
        prompt = "".join(m["content"] for m in messages)
        return replace(out, prompt_token_ids=[ord(c) for c in prompt], token_ids=[ord(c) for c in out.text],
                       logprobs=[-0.5] * len(out.text) if config.logprobs else None)


def char_decode(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def lookup(value: str) -> str:
    return json.dumps({"thought": "look it up", "calls": [{"tool": "lookup", "input": value}], "final": False})


def para_model(pick: Callable[[GenerateConfig], str], name: str = "orch") -> TokenModel:
    """Decisions (schema-constrained calls) look up ``pick(config)``; the synthesis echoes the results in its prompt,
    which holds the call results. ``model.seeds`` keeps the seed of every decision call."""
    seeds: list[int | None] = []

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is not None:
            seeds.append(config.seed)
            return lookup(pick(config))
        return echo_results(messages[-1]["content"])

    model = TokenModel(reply, name=name)
    model.seeds = seeds  # type: ignore[attr-defined]
    return model


async def has_42(result: EpisodeResult, task: Task) -> float:
    return 1.0 if "found:42" in result.answer else 0.0


OPTS = {"max_rounds": 1}


def test_group_advantages_worked_examples() -> None:
    adv = group_advantages([1, 0, 0, 1])
    assert adv is not None and adv == pytest.approx([1, -1, -1, 1], abs=1e-5)  # mean 0.5, population std 0.5
    three = group_advantages([1, 0, 0])  # mean 1/3, std sqrt(2/9) = 0.4714
    assert three is not None and three == pytest.approx([1.41421, -0.70711, -0.70711], abs=1e-4)
    assert group_advantages([1, 1, 1, 1]) is None  # no variance: dropped
    assert group_advantages([0.3]) is None
    assert group_advantages([]) is None


async def test_group_of_four_seeds_rewards_advantages_and_samples(store: TraceStore) -> None:
    good = {decision_seed(0, 0), decision_seed(3, 0)}  # episodes with seeds 0 and 3 find 42
    orch = para_model(lambda c: "42" if c.seed in good else "7")
    pool = Pool.from_models([orch])
    group = await collect_group(TASK, RolloutSettings(strategy="para", group=4, options=OPTS), pool=pool, store=store,
                                reward_fn=has_42, tools=ToolRegistry([LookupTool()]), run_id="r1")
    assert group.rewards == [1.0, 0.0, 0.0, 1.0]
    assert group.advantages == pytest.approx([1, -1, -1, 1], abs=1e-5)
    seeds = [json.loads(store.episode(e.trace_id).meta)["options"]["seed"] for e in group.episodes]  # type: ignore[union-attr]
    assert seeds == [0, 1, 2, 3]
    assert orch.seeds == [decision_seed(s, 0) for s in range(4)]  # type: ignore[attr-defined]  # distinct seeds
    samples = group_samples(group, store)
    assert len(samples) == 4  # one decision per episode (max_rounds=1)
    for sample, episode, adv in zip(samples, group.episodes, group.advantages):
        (row,) = decision_rows(store, episode.trace_id)
        assert sample.episode_id == episode.trace_id and sample.decision_id == row.id
        assert sample.advantage == adv and sample.reward in (0.0, 1.0)
        assert char_decode(sample.completion_ids) == row.output  # the stored ids, not re-tokenized
        assert char_decode(sample.prompt_ids) == "".join(m["content"] for m in row.messages)
        assert sample.old_logprobs == [-0.5] * len(sample.completion_ids)
        assert sample.meta["valid"] is True and sample.meta["task_id"] == "t1"
    assert [("42" in char_decode(s.completion_ids)) for s in samples] == [True, False, False, True]


async def test_all_equal_group_is_dropped_and_gives_no_samples(store: TraceStore) -> None:
    pool = Pool.from_models([para_model(lambda c: "42")])
    group = await collect_group(TASK, RolloutSettings(strategy="para", group=3, options=OPTS), pool=pool, store=store,
                                reward_fn=has_42, tools=ToolRegistry([LookupTool()]))
    assert group.rewards == [1.0, 1.0, 1.0] and group.advantages is None and not group.kept
    assert group_samples(group, store) == []


async def test_samples_skip_decisions_without_token_ids_and_filter_models(store: TraceStore) -> None:
    plain = ScriptedModel(lambda m, c: lookup("42" if c.seed == decision_seed(0, 0) else "1") if c.json_schema
                          else echo_results(m[-1]["content"]), name="plain")
    group = await collect_group(TASK, RolloutSettings(strategy="para", group=2, options=OPTS),
                                pool=Pool.from_models([plain]), store=store, reward_fn=lambda r,
                                t: _const(float(r.answer.count("42"))), tools=ToolRegistry([LookupTool()]))
    assert group.kept and group_samples(group, store) == []  # scripted models give no token ids
    tok = para_model(lambda c: "42" if c.seed == decision_seed(0, 0) else "1", name="tok")
    group = await collect_group(TASK, RolloutSettings(strategy="para", group=2, options=OPTS),
                                pool=Pool.from_models([tok]), store=store, reward_fn=has_42,
                                tools=ToolRegistry([LookupTool()]))
    assert len(group_samples(group, store)) == 2
    assert group_samples(group, store, models={"other"}) == []


async def _const(value: float) -> float:
    return value


async def test_collect_groups_distinct_seeds_concurrency_and_progress(store: TraceStore) -> None:
    orch = para_model(lambda c: "42" if (c.seed or 0) % 2 else "0")
    orch.delay_s = 0.02
    ticks: list[tuple[int, int]] = []
    tasks = [Task(prompt="a", id="a"), Task(prompt="b", id="b"), Task(prompt="c", id="c")]
    groups = await collect_groups(tasks, RolloutSettings(strategy="para", group=2, options=OPTS, seed=10,
                                  concurrency=2), pool=Pool.from_models([orch]), store=store, reward_fn=has_42,
                                  tools=ToolRegistry([LookupTool()]), progress=lambda d, t: ticks.append((d, t)))
    assert [g.task.id for g in groups] == ["a", "b", "c"] and all(len(g.episodes) == 2 for g in groups)
    assert ticks == [(i, 6) for i in range(1, 7)]
    seeds = sorted(json.loads(store.episode(e.trace_id).meta)["options"]["seed"]  # type: ignore[union-attr]
                   for g in groups for e in g.episodes)
    assert seeds == list(range(10, 16))
    assert 1 <= orch.max_active <= 2


async def test_zero_temperature_and_empty_group_are_refused(store: TraceStore) -> None:
    pool = Pool.from_models([para_model(lambda c: "1")])
    with pytest.raises(ConfigError, match="temperature above 0"):
        await collect_group(TASK, RolloutSettings(strategy="para", group=2, options={"decision_temperature": 0}),
                            pool=pool, store=store, reward_fn=has_42)
    with pytest.raises(ConfigError, match="RolloutSettings.group: Input should be greater than or equal to 1"):
        RolloutSettings.build(strategy="para", group=0)
    with pytest.raises(ConfigError, match="RolloutSettings.grop: Extra inputs"):
        RolloutSettings.build(grop=2)


class FakeScore:
    def __init__(self, value: float) -> None:
        self.value = value


async def test_scored_reward_uses_the_scorer_on_the_answer(store: TraceStore) -> None:
    seen: list[tuple[str, str]] = []

    async def scorer(task: Task, output: str) -> FakeScore:
        seen.append((task.prompt, output))
        return FakeScore(0.75 if "42" in output else 0.0)

    reward = scored_reward(scorer)
    pool = Pool.from_models([para_model(lambda c: "42")])
    group = await collect_group(TASK, RolloutSettings(strategy="para", group=2, options=OPTS), pool=pool, store=store,
                                reward_fn=reward, tools=ToolRegistry([LookupTool()]))
    assert group.rewards == [0.75, 0.75] and [s[0] for s in seen] == [TASK.prompt] * 2
    assert [s[1] for s in seen] == [e.answer for e in group.episodes]
    with pytest.raises(ConfigError, match="trace store"):
        scored_reward(scorer, cfg=object())


async def test_scored_reward_with_a_reward_config_puts_the_score_in_outcome(store: TraceStore) -> None:
    from orchestrion.train.rewards import COMPONENTS, RewardConfig

    async def scorer(task: Task, output: str) -> FakeScore:
        return FakeScore(0.75)

    only = {k: 0.0 for k in COMPONENTS}
    outcome_only = scored_reward(scorer, store, RewardConfig(weights={**only, "outcome": 2.0}))
    with_protocol = scored_reward(scorer, store, RewardConfig(weights={**only, "outcome": 1.0, "protocol": 1.0}))
    pool = Pool.from_models([para_model(lambda c: "42")])
    res = (await collect_group(TASK, RolloutSettings(strategy="para", group=1, options=OPTS), pool=pool, store=store,
                               reward_fn=outcome_only, tools=ToolRegistry([LookupTool()]))).episodes[0]
    assert await outcome_only(res, TASK) == pytest.approx(1.5)  # 2 x 0.75
    assert await with_protocol(res, TASK) == pytest.approx(1.75)  # 0.75 + every decision valid (1.0)


@pytest.mark.integration
async def test_group_of_two_para_episodes_on_the_real_model(store: TraceStore) -> None:
    from orchestrion.train.hf import load_tokenizer

    rewards = iter([1.0, 0.0])  # the pipeline is under test here, not the tiny model's accuracy

    async def ordered(result: EpisodeResult, task: Task) -> float:
        return next(rewards)

    group = await collect_group(Task(prompt="What is 2+3?"), RolloutSettings(strategy="para", group=2,
                                options={"max_rounds": 2, "max_calls": 1}), pool=Pool.default(), store=store,
                                reward_fn=ordered, budget=Budget(tokens=3000, wall_s=150))
    assert group.advantages == pytest.approx([1, -1], abs=1e-5)
    samples = group_samples(group, store)
    assert samples, [e.status for e in group.episodes]
    tok = load_tokenizer()
    for sample in samples:
        row = next(r for r in decision_rows(store, sample.episode_id or "") if r.id == sample.decision_id)
        assert sample.prompt_ids and sample.completion_ids
        assert sample.old_logprobs is not None and len(sample.old_logprobs) == len(sample.completion_ids)
        assert all(lp <= 0 for lp in sample.old_logprobs)
        text = tok.decode(sample.completion_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        assert text == row.output
    assert all(abs(abs(s.advantage) - 1) < 1e-4 for s in samples)


async def test_rollout_decisions_are_sampled_although_the_pool_decides_greedily(store: TraceStore) -> None:
    """The pool's decisions are greedy by default; a rollout samples them (or every group would be
    identical and carry no signal), unless its options set another temperature above 0."""
    seen: list[float] = []

    def pick(config: GenerateConfig) -> str:
        seen.append(config.temperature)
        return "1"

    pool = Pool.from_models([para_model(pick)])
    assert pool.config.temperature.decision == 0.0
    await collect_group(TASK, RolloutSettings(strategy="para", group=2, options=OPTS), pool=pool, store=store,
                        reward_fn=has_42)
    assert seen and all(t == ROLLOUT_TEMPERATURE > 0 for t in seen)
    seen.clear()
    await collect_group(TASK, RolloutSettings(strategy="para", group=2, options={**OPTS, "decision_temperature": 0.7}),
                        pool=pool, store=store, reward_fn=has_42)
    assert seen and all(t == 0.7 for t in seen)
