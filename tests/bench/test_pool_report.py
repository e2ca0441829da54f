"""bench/pool_report.py: the verdict against direct that every row of the table gets."""

from __future__ import annotations

from tests.bench import load_bench

pool_report = load_bench("pool_report")


def test_verdicts_have_a_two_se_tier_above_the_one_se_one() -> None:
    verdict = pool_report.verdict
    assert verdict(0.183, 0.066, 20) == "above direct by more than 2 se (+0.183 ± 0.066)"
    assert verdict(0.10, 0.066, 20) == "above direct by more than 1 se (+0.10 ± 0.07)"
    assert verdict(0.05, 0.05, 20) == "not below direct minus 1 se (+0.05 ± 0.05)"
    assert verdict(-0.05, 0.05, 20) == "not below direct minus 1 se (-0.05 ± 0.05)"  # exactly -1 se
    assert verdict(-0.2, 0.05, 20).startswith("BELOW direct minus 1 se")
    assert verdict(0.5, 0.0, 1) == "too few examples to judge"
