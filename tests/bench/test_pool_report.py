"""bench/pool_report.py: the verdict against direct that every row of the table gets."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from orchestrion import TraceStore
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


def test_the_held_out_checks_are_computed_from_the_paired_differences(capsys: pytest.CaptureFixture[str]) -> None:
    by_task = {
        "direct on qwen2.5-coder-1.5b": {"reasoning-gym:gcd": (0.0, 0.0)},
        "auto (local pool)": {"reasoning-gym:gcd": (0.25, 0.05), "reasoning-gym:maze": (0.15, 0.05),
                              "reasoning-gym:aiw": (-0.10, 0.05)},
    }
    pool_report.heldout_checks(by_task, {"gcd", "maze"})
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| auto")]
    assert lines == ["| auto (local pool) | 3 | reasoning-gym:aiw | +0.100 ± 0.029 (met) | 1 of 2 |"]
    pool_report.heldout_checks({"para": {"tsumego": (-0.05 - 1e-12, 0.05)}}, set())  # float noise at exactly -1 se
    assert "| para | 1 | none |" in capsys.readouterr().out
    pool_report.heldout_checks({"para": {"matrixshapes": (0.02, 0.05)}}, {"matrixshapes"})
    assert "| para | 1 | none | +0.020 ± 0.050 (not met) | 0 of 1 |" in capsys.readouterr().out
    # direct already at 0.95 leaves no room for +0.20: named apart with its accuracy (0.80 still has room)
    direct = {"direct on qwen2.5-coder-1.5b": {"reasoning-gym:gcd": (0.95, 0.0), "reasoning-gym:maze": (0.80, 0.0)}}
    pool_report.heldout_checks({**direct, "para": {"reasoning-gym:gcd": (0.0, 0.0), "reasoning-gym:maze": (0.1, 0.05)}},
                               {"gcd", "maze"})
    out = capsys.readouterr().out
    assert "| para | 2 | none | +0.050 ± 0.025 (not met) | 0 of 2; no room at gcd (direct 0.95) |" in out


def test_decisions_per_episode_and_stops_are_read_from_the_store(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    store = TraceStore(tmp_path / "t.db")
    rows: list[tuple[str, str, int, str, str]] = [  # episode, run, finished, status, stop
        ("e1", "para-a", 1, "ok", "repeated_calls"), ("e2", "para-a", 1, "ok", "final"),
        ("e3", "para-b", 1, "ok", "repeated_calls"), ("e4", "para-b", 0, "ok", "final"),  # unfinished: left out
        ("e5", "para-b", 1, "interrupted", "final"), ("d1", "direct-a", 1, "ok", ""),
    ]
    with sqlite3.connect(tmp_path / "t.db") as db:
        for ep, run, finished, status, stop in rows:
            meta = json.dumps({"result": {"stop": stop}} if stop else {})
            db.execute("INSERT INTO episodes (id, run_id, finished, status, meta) VALUES (?, ?, ?, ?, ?)",
                       (ep, run, finished, status, meta))
        for i, ep in enumerate(["e1", "e1", "e2", "e3", "e3", "e3", "e4", "e5"]):
            db.execute("INSERT INTO decisions (id, episode_id, seq) VALUES (?, ?, ?)", (f"x{i}", ep, i))
    runs = {"a": {"para": ("para-a", "para"), "direct": ("direct-a", "direct")}, "b": {"para": ("para-b", "para")}}
    pool_report.print_decisions(store, runs)
    out = capsys.readouterr().out
    assert "| para | 3 | 2.00 | repeated_calls×2, final×1 |" in out  # 6 decisions over e1, e2, e3
    assert "| direct |" not in out  # a row with no decision has no line
    store.close()


def test_answers_out_of_format_and_episodes_with_no_answer_are_counted_apart(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = TraceStore(tmp_path / "t.db")
    task = json.dumps({"id": "q", "prompt": "What is 2+2?", "target": "4", "metadata": {"scoring": "numeric"}})
    with sqlite3.connect(tmp_path / "t.db") as db:
        for ep, answer, status in [("a", "Answer: 4", "ok"), ("b", "many", "ok"), ("c", "", "budget_exceeded")]:
            db.execute("INSERT INTO episodes (id, run_id, finished, status, answer, task) VALUES (?, 'r', 1, ?, ?, ?)",
                       (ep, status, answer, task))
    pool_report._print_out_of_format(store, {"t": {"para": ("r", "para")}})
    assert "| para | 3 | 1 | 1 |" in capsys.readouterr().out  # "many" holds no number; the empty one gave none
    store.close()
