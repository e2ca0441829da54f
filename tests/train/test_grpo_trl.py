"""The trl engine's pieces: an episode packed into one sample, the reward as TRL's weighted functions."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the train extra is not installed")  # the trl engine imports it
from orchestrion.train._grpo_trl import pack, reward_functions  # noqa: E402
from orchestrion.train.rewards import COMPONENTS, RewardConfig, combine  # noqa: E402
from orchestrion.train.rollouts import DecisionAttempt  # noqa: E402

EOS = 2


class FakePolicy:
    """Only what pack() reads when every row has recorded ids."""

    eos_id = EOS


def row(prompt: list[int], output: list[int], *, replayed: bool = False, logprobs: list[float] | None = None,
        ) -> DecisionAttempt:
    return DecisionAttempt(id="d", episode_id="e", span_id="s", seq=1, attempt=0, model="orch", schema_name=None,
                           messages=None, prompt_token_ids=prompt, output="", token_ids=output, logprobs=logprobs,
                           action=None, error=None, valid=True, ts=0.0, replayed=replayed)


def test_a_growing_conversation_is_one_completion_with_env_mask() -> None:
    first = row([10, 11, 12], [20, 21, EOS], logprobs=[-0.1, -0.2, -0.3])
    repair = row([10, 11, 12, 20, 21, EOS, 30, 31], [40, EOS], logprobs=[-0.4, -0.5])  # extends the first
    rebuilt = row([10, 99, 98], [50, EOS])  # a fresh prompt (para's next round)
    packed = pack([first, repair, rebuilt], FakePolicy(), max_length=100)  # type: ignore[arg-type]
    assert packed.prompt_ids == [10, 11, 12]
    assert packed.completion_ids == [20, 21, EOS, 30, 31, 40, EOS]
    assert packed.env_mask == [1, 1, 1, 0, 0, 1, 1]  # the context between the decisions is not trained on
    assert packed.logprobs == [-0.1, -0.2, -0.3, 0.0, 0.0, -0.4, -0.5]
    assert (packed.decisions, packed.left_out, packed.retokenized) == (2, 1, False)


def test_replayed_decisions_are_skipped_and_long_ones_left_out() -> None:
    replayed = row([1, 2], [3], replayed=True)
    sampled = row([5, 6], [7, EOS])
    packed = pack([replayed, sampled], FakePolicy(), max_length=100)  # type: ignore[arg-type]
    assert packed.prompt_ids == [5, 6] and packed.completion_ids == [7, EOS] and packed.decisions == 1
    too_long = pack([sampled], FakePolicy(), max_length=3)  # type: ignore[arg-type]
    assert too_long.env_mask == [0] and too_long.decisions == 0 and too_long.left_out == 1  # nothing trained
    grows_too_long = pack([sampled, row([5, 6, 7, EOS, 8], [9, EOS])], FakePolicy(), max_length=6)  # type: ignore[arg-type]
    assert grows_too_long.completion_ids == [7, EOS] and grows_too_long.left_out == 1


def test_trl_reward_functions_sum_to_combine() -> None:
    cfg = RewardConfig(weights={"outcome": 1.0, "protocol": 0.5, "diversity": 0.25, "efficiency_cost": 2.0})
    funcs, weights = reward_functions(cfg)
    assert [f.__name__ for f in funcs] == list(COMPONENTS)
    parts = [{"outcome": 1.0, "protocol": 0.5, "diversity": 0.8, "efficiency_cost": -0.25},
             {"outcome": 0.0, "protocol": 1.0, "invalid": -0.2}]
    for i, p in enumerate(parts):
        values = [f([None, None], reward_parts=parts)[i] for f in funcs]
        trl_sum = sum(w * v for w, v in zip(weights, values) if v is not None)  # TRL skips a None (NaN) value
        assert trl_sum == pytest.approx(combine(p, cfg))
    score_only, w = reward_functions(None)
    assert [f.__name__ for f in score_only] == ["outcome"] and w == [1.0]
