"""bench/humaneval_paradigms.py: its pairing with direct (by problem, on the problems both ran) and its run keys."""

from __future__ import annotations

import argparse
import math

import pytest

from tests.bench import load_bench

hp = load_bench("humaneval_paradigms")
lp = load_bench("local_pool")


def test_pairs_only_the_problems_both_ran_and_takes_the_paired_se() -> None:
    ours = {"a": 1.0, "b": 1.0, "c": 0.0, "d": 1.0, "e": 1.0}
    base = {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0}  # "e" has no direct answer: not paired
    n, acc, dacc, diff, se = hp._paired(ours, base, None)
    assert (n, acc, dacc, diff) == (4, 0.75, 0.25, 0.5)
    assert se == pytest.approx(math.sqrt(1 / 3 / 4))  # diffs 0, 1, 0, 1: sample variance 1/3
    assert hp._paired(ours, base, {"a", "c"})[:4] == (2, 0.5, 0.5, 0.0)
    assert hp._paired(ours, {}, None)[0] == 0


def test_a_larger_limit_extends_the_smaller_run_of_the_same_strategy_only() -> None:
    args = argparse.Namespace(split="all", seed=7, max_tokens=768)
    small, full = hp._key(args, "topology", 50), hp._key(args, "topology", 100)
    assert full == "all/humaneval/topology[max_tokens=768]@local/100"
    assert lp._smaller_run(full, {small: "run", hp._key(args, "milestone", 50): "other"}) == "run"
    assert lp._smaller_run(full, {hp._key(args, "milestone", 50): "other"}) is None
