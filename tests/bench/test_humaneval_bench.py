"""bench/humaneval.py's verdict against the Qwen2.5-Coder report, and its run keys (resumable, extendable)."""

from __future__ import annotations

import argparse

from tests.bench import load_bench

he = load_bench("humaneval")
lp = load_bench("local_pool")


def test_the_verdict_allows_six_points_either_way() -> None:
    assert he.REPORTED == {"qwen2.5-coder-0.5b": 61.6, "qwen2.5-coder-1.5b": 70.7}
    assert he.verdict(55.6, 61.6) == he.verdict(76.7, 70.7) == "within 6 points"
    assert he.verdict(55.5, 61.6) == he.verdict(76.8, 70.7) == "gap over 6 points: investigate"


def test_a_larger_limit_extends_the_smaller_run_of_the_same_sample_only() -> None:
    args = argparse.Namespace(split="all", seed=7, max_tokens=None)
    small, full = he._key(args, "qwen2.5-coder-1.5b", 2), he._key(args, "qwen2.5-coder-1.5b", 164)
    assert full == "all/humaneval/direct[as-written]@qwen2.5-coder-1.5b/164"
    wrapped = argparse.Namespace(split="all", seed=7, max_tokens=None, wrapped=True)
    assert he._key(wrapped, "qwen2.5-coder-1.5b", 164) == "all/humaneval/direct@qwen2.5-coder-1.5b/164"
    other = {he._key(argparse.Namespace(split="all", seed=7, max_tokens=768), "qwen2.5-coder-1.5b", 2): "mt",
             he._key(argparse.Namespace(split="test", seed=7, max_tokens=None), "qwen2.5-coder-1.5b", 2): "test",
             he._key(args, "qwen2.5-coder-0.5b", 2): "0.5b"}
    assert lp._smaller_run(full, {small: "run", **other}) == "run"
    assert lp._smaller_run(full, other) is None
