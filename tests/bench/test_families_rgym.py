"""bench/families_rgym.py: the reasoning-gym held-out list against its own rule and the tuning list."""

from __future__ import annotations

from tests.bench import load_bench

rgym = load_bench("families_rgym")
families = load_bench("families")


def test_the_lists_agree_with_each_other_and_leave_the_tuning_families_out() -> None:
    assert len(rgym.HELD_OUT) == 2 * rgym.PER_GROUP == len(set(rgym.HELD_OUT))
    assert sorted(rgym.RUN_ORDER) == sorted(rgym.HELD_OUT)
    assert rgym.PROGRAM_DECIDES <= set(rgym.HELD_OUT)
    tuned = {n.split("/")[-1] for n in [*families.TUNING, *families.TUNING_EXTRA]}
    assert not tuned & set(rgym.HELD_OUT) and not set(rgym.MOVED_TO_TUNING) & set(rgym.HELD_OUT)


def test_the_rule_admits_a_family_that_fits_and_refuses_a_tuning_one_without_generating_it() -> None:
    assert rgym.candidates(["gcd", "word_sorting"]) == {"gcd": "math"}


def test_the_draw_is_a_seeded_shuffle_per_group() -> None:
    found = {"a": "math", "b": "math", "c": "math", "x": "other", "y": "other"}
    first, second = rgym.drawn(found), rgym.drawn(dict(reversed(list(found.items()))))
    assert first == second and sorted(first["math"]) == ["a", "b", "c"] and sorted(first["other"]) == ["x", "y"]
