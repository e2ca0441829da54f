"""summarize() on hand-written trace rows: every number checked against a hand computation."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from rich.console import Console

from orchestrion import ConfigError, TraceStore
from orchestrion.cli._render import rich_table
from orchestrion.eval.summary import StrategySummary, run_info, summarize, summary_table

RUN = "run-1"


def _run(store: TraceStore, strategies: list[str], kind: str = "jsonl", run_id: str = RUN) -> None:
    config = {"dataset": "x.jsonl", "strategies": strategies, "epochs": 2, "dataset_kind": kind}
    store.submit("INSERT INTO runs (id, created, kind, config, status) VALUES (?,?,?,?,?)",
                 (run_id, 1.0, "eval", json.dumps(config), "finished"))


def _ep(store: TraceStore, eid: str, task: str, strategy: str, epoch: int, score: float | None, *,
        correct: bool | None = None, status: str = "ok", finished: int = 1, cost: float | None = 0.0,
        tokens: tuple[int, int] = (10, 5), units: float = 0.0, wall: float = 2.0, started: float = 100.0,
        run_id: str = RUN) -> None:
    meta: dict[str, Any] = {"result": {}}
    if score is not None:
        meta.update(score=score, correct=bool(score) if correct is None else correct)
    store.submit(
        "INSERT INTO episodes (id, run_id, task_id, epoch, strategy, task, status, started, ended, input_tokens, "
        "output_tokens, cost_usd, cost_units, finished, meta) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (eid, run_id, task, epoch, strategy, "{}", status, started, started + wall, tokens[0], tokens[1], cost, units,
         finished, json.dumps(meta)))


def _span(store: TraceStore, sid: str, eid: str, kind: str, name: str, **attrs: Any) -> None:
    store.submit("INSERT INTO spans (id, episode_id, kind, name, started, status, attrs) VALUES (?,?,?,?,?,?,?)",
                 (sid, eid, kind, name, 1.0, "ok", json.dumps(attrs)))


def _decision(store: TraceStore, did: str, eid: str, valid: bool) -> None:
    store.submit("INSERT INTO decisions (id, episode_id, seq, attempt, valid) VALUES (?,?,?,?,?)",
                 (did, eid, 1, 0, int(valid)))


def _by_name(summaries: list[StrategySummary]) -> dict[str, StrategySummary]:
    return {s.strategy: s for s in summaries}


def test_accuracy_stderr_tokens_cost_wall(store: TraceStore) -> None:
    _run(store, ["para", "direct"])
    # direct: task a scores 1, 1; task b 1, 0; task c 0, 0  -> per-task means 1, .5, 0
    for i, (task, epoch, score) in enumerate([("a", 0, 1.0), ("a", 1, 1.0), ("b", 0, 1.0), ("b", 1, 0.0),
                                              ("c", 0, 0.0), ("c", 1, 0.0)]):
        _ep(store, f"d{i}", task, "direct", epoch, score, cost=0.001 * (i + 1), tokens=(10 + i, i), wall=1.0 + i,
            units=0.5)
    # para: one task, 2 epochs; one episode has an unknown cost
    _ep(store, "p0", "a", "para", 0, 0.5, cost=None)
    _ep(store, "p1", "a", "para", 1, 1.0, cost=0.002, status="budget_exceeded")
    store.flush()
    summaries = summarize(store, RUN)
    assert [s.strategy for s in summaries] == ["para", "direct"]  # the run's order
    d = _by_name(summaries)["direct"]
    assert (d.episodes, d.tasks, d.epochs) == (6, 3, 2)
    assert d.accuracy == pytest.approx(0.5)
    # sample std of (1, .5, 0) is .5; stderr = .5 / sqrt(3)
    assert d.stderr == pytest.approx(0.5 / math.sqrt(3))
    assert (d.input_tokens, d.output_tokens) == (10 * 6 + 15, 15)
    assert d.cost_usd == pytest.approx(0.001 * 21)
    assert d.cost_units == pytest.approx(3.0)
    assert d.wall_s == pytest.approx(sum(1.0 + i for i in range(6)))
    assert d.mean_wall_s == pytest.approx(21 / 6)
    assert d.pass_at_k == {}  # not a code dataset
    assert d.statuses == {"ok": 6}
    p = _by_name(summaries)["para"]
    assert p.accuracy == pytest.approx(0.75) and p.stderr == 0.0
    assert p.cost_usd is None  # one unknown cost makes the total unknown, never 0
    assert p.statuses == {"ok": 1, "budget_exceeded": 1}


def test_unfinished_interrupted_and_duplicate_rows_are_not_counted(store: TraceStore) -> None:
    _run(store, ["direct"])
    _ep(store, "first", "a", "direct", 0, 1.0, started=100.0)
    _ep(store, "dup", "a", "direct", 0, 0.0, started=200.0)  # a later duplicate of the same triple
    _ep(store, "running", "b", "direct", 0, None, finished=0, status="running")
    _ep(store, "stopped", "c", "direct", 0, None, status="interrupted")
    _ep(store, "cancel", "d", "direct", 0, None, status="cancelled")
    _ep(store, "other-run", "a", "direct", 1, 0.0, run_id="run-2")
    store.flush()
    (s,) = summarize(store, RUN)
    assert (s.episodes, s.tasks, s.epochs) == (1, 1, 1)
    assert s.accuracy == 1.0


def test_invalid_actions_models_and_tools(store: TraceStore) -> None:
    _run(store, ["para"])
    _ep(store, "e1", "a", "para", 0, 1.0)
    _ep(store, "e2", "b", "para", 0, 0.0)
    _ep(store, "e3", "c", "para", 0, 0.0, finished=0, status="interrupted")  # not counted: nor its rows
    for did, eid, valid in [("x1", "e1", True), ("x2", "e1", False), ("x3", "e2", True), ("x4", "e2", False),
                            ("x5", "e2", True), ("x6", "e3", False)]:
        _decision(store, did, eid, valid)
    _span(store, "s1", "e1", "call", "big")
    _span(store, "s2", "e1", "call", "small")
    _span(store, "s3", "e2", "call", "big")
    _span(store, "s4", "e2", "call", "ignored-name", model="small")  # attrs.model wins over the name
    _span(store, "s5", "e3", "call", "big")
    _span(store, "s6", "e1", "tool", "python", tool="python")
    _span(store, "s7", "e2", "agent", "reviewer: check", tool="reviewer", model="big")
    _span(store, "s8", "e2", "tool", "calculator", tool="calculator")
    _span(store, "s9", "e1", "decision", "step")
    store.flush()
    (s,) = summarize(store, RUN)
    assert s.invalid_action_rate == pytest.approx(2 / 5)
    assert s.models == {"big": 2, "small": 2}
    assert s.tools == {"python": 1, "reviewer": 1, "calculator": 1}


def test_pass_at_k_for_code_datasets(store: TraceStore) -> None:
    _run(store, ["direct"], kind="humaneval")
    # task a: 3 samples, 1 passes; task b: 3 samples, 3 pass
    for i, ok in enumerate([True, False, False]):
        _ep(store, f"a{i}", "a", "direct", i, 1.0 if ok else 0.0)
    for i in range(3):
        _ep(store, f"b{i}", "b", "direct", i, 1.0)
    store.flush()
    (s,) = summarize(store, RUN)
    # pass@1: a = 1/3, b = 1 ; pass@3: a = 1 - C(2,3)/C(3,3) = 1, b = 1
    assert s.pass_at_k == {1: pytest.approx((1 / 3 + 1) / 2), 3: pytest.approx(1.0)}
    assert s.accuracy == pytest.approx((1 / 3 + 1) / 2)


def test_run_info_and_unknown_runs(store: TraceStore) -> None:
    _run(store, ["direct"], run_id="abcdef123")
    store.flush()
    info = run_info(store, "abcdef")  # a prefix is enough
    assert info["id"] == "abcdef123" and info["config"]["strategies"] == ["direct"]
    with pytest.raises(ConfigError, match="no run 'zzz'"):
        run_info(store, "zzz")
    with pytest.raises(ConfigError, match="no run"):
        summarize(store, "zzz")


def test_table_shows_every_strategy_and_unknown_cost(store: TraceStore) -> None:
    _run(store, ["cot", "direct"], kind="humaneval")
    _ep(store, "c1", "a", "cot", 0, 1.0, cost=None)
    _ep(store, "d1", "a", "direct", 0, 0.0, cost=0.25)
    _span(store, "s1", "c1", "call", "smollm2")
    store.flush()
    console = Console(width=250, record=True)
    console.print(rich_table(summary_table(summarize(store, RUN), title="my title")))
    text = console.export_text()
    assert "my title" in text
    cot_line = next(line for line in text.splitlines() if " cot " in line)
    assert "unknown" in cot_line and "1.000 ± 0.000" in cot_line and "smollm2×1" in cot_line
    direct_line = next(line for line in text.splitlines() if " direct " in line)
    assert "$0.250000" in direct_line and "0.000 ± 0.000" in direct_line
    assert "pass@1" in text
