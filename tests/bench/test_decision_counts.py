"""bench/decision_counts.py pairs the two sides by example and says when the change cost answers."""

from __future__ import annotations

from typing import Any

from tests.bench import load_bench

dc = load_bench("decision_counts")


def _ep(correct: int, decisions: int, stop: str = "final") -> dict[str, Any]:
    return {"correct": correct, "decisions": decisions, "calls": decisions + 1, "tools": 1, "wall": 2.0, "stop": stop}


def test_only_examples_run_on_both_sides_are_paired_and_a_loss_is_called_one() -> None:
    before = {"d": {"a": _ep(1, 3), "b": _ep(1, 3), "c": _ep(0, 3), "only-before": _ep(1, 9)}}
    after = {"d": {"a": _ep(1, 2), "b": _ep(0, 2, "repeated_calls"), "c": _ep(0, 2)}}
    text = "\n".join(dc.report(before, after, "para"))
    assert "**d, 3 examples run on both sides**" in text
    assert "| before | 3 | 0.67 ± 0.33 | 3.00 |" in text and "| after | 3 | 0.33 ± 0.33 | 2.00 |" in text
    assert "| d | 3 | -0.333 ± 0.333 | 3.00 → 2.00 | not below before minus 1 se |" in text
    after["d"]["a"] = _ep(0, 2)
    assert "below before by more than 1 se" in "\n".join(dc.report(before, after, "para"))
