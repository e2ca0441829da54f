"""bench/auto_loo.py: leave-one-out over @train outcomes, scored against the first arm, per task."""

from __future__ import annotations

from orchestrion.strategies.auto import Outcome
from tests.bench import load_bench

loo = load_bench("auto_loo")
ARMS = ["direct:big", "direct:small"]


def test_every_left_out_choice_uses_the_guard_it_is_given() -> None:
    # on 16 sorting prompts the small model wins 4 the big one loses and loses 2 it wins: inside the noise
    big = [1.0] * 4 + [0.0] * 12
    small = [1.0, 1.0, 0.0, 0.0] + [1.0] * 4 + [0.0] * 8
    prompts = [f"Sort the following words alphabetically: List: w{i} v{i}" for i in range(16)]
    history = [Outcome(p, "direct:big", b, 1.0) for p, b in zip(prompts, big, strict=True)]
    history += [Outcome(p, "direct:small", s, 0.1) for p, s in zip(prompts, small, strict=True)]
    tasks = dict.fromkeys(prompts, "word_sorting")
    for z, expected in ((None, small), (2.0, big)):
        got, base = loo.leave_one_out(history, tasks, ARMS, 16, 0.0, 0.0, z)["word_sorting"]
        assert base == dict(zip(prompts, big, strict=True))
        assert list(got.values()) == expected, z  # unguarded, the cheaper small model every time; guarded, the big one


def test_picks_on_new_prompts_follow_the_setting() -> None:
    # the same history: on new sorting prompts the guard sends every one to the big model, no guard to the small
    prompts = [f"Sort the following words alphabetically: List: w{i} v{i}" for i in range(16)]
    big = [1.0] * 4 + [0.0] * 12
    small = [1.0, 1.0, 0.0, 0.0] + [1.0] * 4 + [0.0] * 8
    history = [Outcome(p, "direct:big", b, 1.0) for p, b in zip(prompts, big, strict=True)]
    history += [Outcome(p, "direct:small", s, 0.1) for p, s in zip(prompts, small, strict=True)]
    new = [f"Sort the following words alphabetically: List: u{i} x{i}" for i in range(3)]
    assert loo.picks(new, history, ARMS, (12, 0.0, 0.0, None)) == ["direct:small"] * 3
    assert loo.picks(new, history, ARMS, (12, 0.0, 0.0, 2.0)) == ["direct:big"] * 3
