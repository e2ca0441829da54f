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
