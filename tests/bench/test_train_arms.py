"""bench/train_arms.py: the @train arm table while the base run has not started (local_pool --report-only)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.bench import load_bench

train_arms = load_bench("train_arms")


def test_a_base_not_run_yet_is_left_out_not_read_as_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def summarize(_store: Any, run_id: str) -> list[Any]:
        seen.append(run_id)
        assert run_id, "an empty run id prefix matches every run of the store"
        return [SimpleNamespace(cost_units=10.0, episodes=4, accuracy=0.25, stderr=0.25)]

    def scores(_store: Any, run_id: str, _strategy: str) -> dict[str, float]:
        assert run_id
        return {}

    monkeypatch.setattr(train_arms, "summarize", summarize)
    runs = {"t": {"direct on big": ("", "direct"), "program (local pool)": ("run-1", "program")}}
    lines = train_arms.train_arm_lines(None, runs, "direct on big", scores)
    assert lines[2:] == ["| t | program (local pool) | 4 | 0.25 ± 0.25 | - | - |"]
    assert seen == ["run-1"]


def test_the_oracle_row_takes_the_best_arm_per_example(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(train_arms, "summarize",
                        lambda _s, _r: [SimpleNamespace(cost_units=4.0, episodes=4, accuracy=0.5, stderr=0.25)])
    by_run = {"base": {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0},
              "prog": {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0, "e": 1.0}}  # e: not run by the base, left out
    runs = {"t": {"direct on big": ("base", "direct"), "program (local pool)": ("prog", "program")}}
    lines = train_arms.train_arm_lines(None, runs, "direct on big", lambda _s, r, _st: by_run[r])
    # a and b right, c and d wrong: 0.50; paired against the base's 0.25, +0.25
    assert lines[-1] == "| t | oracle: best of these 2 arms per example | 4 | 0.50 ± 0.29 | +0.25 ± 0.25 | - |"
    assert train_arms.oracle([by_run["base"]]) == by_run["base"]
    assert train_arms.oracle([]) == {}
