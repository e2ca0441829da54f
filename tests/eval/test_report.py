"""Eval reports: the Pareto front on worked examples, and report.md + plots from real eval runs."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from orchestrion import GenerateConfig, Message, Pool, TraceStore
from orchestrion._errors import ConfigError, ModelError
from orchestrion.eval.report import cost_axis, failed_strategies, markdown_table, pareto_front, write_report
from orchestrion.eval.runner import EvalConfig, run_eval
from orchestrion.eval.summary import Column, StrategySummary, TextTable
from orchestrion.models.cost import Price
from orchestrion.models.scripted import ScriptedModel

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- the Pareto front: minimise cost, maximise accuracy ---------------------------------
def test_pareto_front_worked_example() -> None:
    points = [
        (1.0, 0.5),  # 0: on the front
        (2.0, 0.7),  # 1: on the front
        (3.0, 0.6),  # 2: dominated by 1 (costs more, scores less)
        (0.5, 0.2),  # 3: on the front (cheapest)
        (2.0, 0.7),  # 4: identical to 1, kept too
        (4.0, 0.9),  # 5: on the front (most accurate)
        (4.0, 0.8),  # 6: same cost as 5, scores less: dominated
    ]
    assert pareto_front(points) == [3, 0, 1, 4, 5]


def test_pareto_front_ties_and_edge_cases() -> None:
    assert pareto_front([]) == []
    assert pareto_front([(7.0, 0.1)]) == [0]
    assert pareto_front([(1.0, 0.5), (2.0, 0.5)]) == [0]  # same accuracy: the cheaper one only
    assert pareto_front([(1.0, 0.4), (1.0, 0.6)]) == [1]  # same cost: the more accurate one only
    assert pareto_front([(3.0, 0.9), (1.0, 0.1), (2.0, 0.5)]) == [1, 2, 0]  # a chain: all, ordered by cost
    assert pareto_front([(2.0, 0.2), (1.0, 0.9)]) == [1]  # one point beats the other on both
    assert pareto_front([(math.nan, 1.0), (1.0, 0.1), (2.0, math.nan)]) == [1]


def summary(name: str, *, accuracy: float = 0.5, cost: float | None = 0.0, tokens: tuple[int, int] = (10, 5),
            statuses: dict[str, int] | None = None, episodes: int = 2) -> StrategySummary:
    return StrategySummary(
        strategy=name, episodes=episodes, tasks=2, epochs=1, accuracy=accuracy, stderr=0.1, pass_at_k={},
        input_tokens=tokens[0], output_tokens=tokens[1], cost_usd=cost, cost_units=0.0, wall_s=1.0,
        mean_wall_s=0.5, invalid_action_rate=0.0, statuses=statuses if statuses is not None else {"ok": episodes},
    )


def test_cost_axis_uses_dollars_only_when_every_cost_is_known_and_some_is_not_zero() -> None:
    axis = cost_axis([summary("a", cost=0.002), summary("b", cost=0.0)])
    assert axis.unit == "usd" and axis.values == [0.002, 0.0] and "dollar" in axis.label

    axis = cost_axis([summary("a", cost=0.002, tokens=(100, 20)), summary("b", cost=None, tokens=(7, 3))])
    assert axis.unit == "tokens" and axis.values == [120.0, 10.0]
    assert "tokens" in axis.label and "unknown for b" in axis.label  # never drawn as $0

    axis = cost_axis([summary("a", cost=0.0, tokens=(1, 2)), summary("b", cost=0.0, tokens=(3, 4))])
    assert axis.unit == "tokens" and axis.values == [3.0, 7.0] and "$0" in axis.label


def test_failed_strategies_are_those_without_a_single_ok_episode() -> None:
    summaries = [summary("a"), summary("b", statuses={"error": 1, "budget_exceeded": 1}),
                 summary("c", statuses={"ok": 1, "error": 1})]
    assert failed_strategies(summaries, ["a", "b", "c", "never-ran"]) == ["b", "never-ran"]


def test_markdown_table_keeps_columns_and_text_as_is() -> None:
    table = TextTable([Column("strategy", bold=True), Column("accuracy", right=True)],
                      [["direct", "0.500 ± 0.1"], ["a|b", "1.0"], ["m[x]×2"]])
    assert markdown_table(table).splitlines() == [
        "| strategy | accuracy |", "| --- | --- |", "| direct | 0.500 ± 0.1 |", "| a\\|b | 1.0 |", "| m[x]×2 |  |",
    ]


# -- a real (scripted) eval run through the runner, then the report ----------------------
def arithmetic(messages: Sequence[Message], config: GenerateConfig) -> str | Exception:
    """direct: right on 2+3, wrong on 4+4; cot: right on both; self-refine's critic fails."""
    text = messages[-1]["content"]
    if "Check the proposed answer" in text:
        return ModelError("scripted critic is offline")
    right = "5" if "2+3" in text else "8"
    if "one step at a time" in text:
        return f"First I add the two numbers.\nThen I check the sum.\nAnswer: {right}"
    return "5" if "2+3" in text else "9"


def write_dataset(path: Path) -> Path:
    rows = [{"id": "add", "prompt": "What is 2+3?", "answer": "5"}, {"id": "double", "prompt": "What is 4+4?",
                                                                     "answer": "8"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_scripted_eval(store: TraceStore, tmp_path: Path) -> str:
    model = ScriptedModel(arithmetic, name="calc", price=Price(input_per_mtok=1.0, output_per_mtok=2.0))
    config = EvalConfig(dataset=f"jsonl:{write_dataset(tmp_path / 'sums.jsonl')}",
                        strategies=["direct", "cot", "self-refine"], epochs=2, concurrency=2)
    run = asyncio.run(run_eval(config, store, pool=lambda: Pool.from_models([model])))
    return run.run_id


def row_of(markdown: str, strategy: str) -> list[str]:
    rows = [line for line in markdown.splitlines() if line.startswith(f"| {strategy} |")]
    assert len(rows) == 1, f"expected one table row for {strategy}:\n{markdown}"
    return [c.strip() for c in rows[0].strip("|").split("|")]


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert len(data) > 10_000, f"{path} is suspiciously small ({len(data)} bytes)"


def test_report_from_a_scripted_eval_run(store: TraceStore, tmp_path: Path) -> None:
    run_id = run_scripted_eval(store, tmp_path)
    report = write_report(store, run_id[:10], tmp_path / "out")

    assert report.run_id == run_id
    assert [p.name for p in report.paths] == ["report.md", "accuracy_cost.png", "accuracy_wall.png", "usage.png"]
    text = report.markdown.read_text()
    # 2 tasks x 2 epochs per strategy; accuracy = mean over tasks of the per-task mean score
    assert row_of(text, "direct")[1:3] == ["4 (2×2)", "0.500 ± 0.500"]
    assert row_of(text, "cot")[1:3] == ["4 (2×2)", "1.000 ± 0.000"]
    assert row_of(text, "self-refine")[1:3] == ["4 (2×2)", "0.000 ± 0.000"]
    assert "error×4" in row_of(text, "self-refine")[-1]
    assert "calc×4" in row_of(text, "direct")  # one model call per episode
    assert f"`{run_id}`" in text and "sums.jsonl" in text  # the run's config is shown

    # Prices are known, so cost is in dollars; direct is cheaper, cot more accurate: both Pareto-optimal.
    # self-refine never succeeded: it is listed as failed and kept off the frontier.
    assert report.pareto == ["direct", "cot"] and report.failed == ["self-refine"]
    pareto_section = text.split("## Pareto-optimal strategies (accuracy against dollar cost)")[1].split("##")[0]
    assert "**direct**: accuracy 0.500" in pareto_section and "**cot**: accuracy 1.000" in pareto_section
    assert "self-refine" not in pareto_section
    failed_section = text.split("## Strategies that failed entirely")[1].split("##")[0]
    assert failed_section.strip() == "- self-refine"
    for plot in report.plots:
        assert_png(plot)
        assert f"]({plot.name})" in text


def cli(*args: str, db: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ORCHESTRION_DB": str(db)}
    return subprocess.run([sys.executable, "-m", "orchestrion", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=cwd)


def test_cli_report_writes_to_the_default_folder_and_prints_the_paths(store: TraceStore, tmp_path: Path) -> None:
    run_id = run_scripted_eval(store, tmp_path)
    res = cli("report", run_id, "--db", str(store.path), db=tmp_path / "other.db", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    folder = tmp_path / f"report-{run_id[:8]}"
    for name in ("report.md", "accuracy_cost.png", "accuracy_wall.png", "usage.png"):
        assert (folder / name).is_file()
        assert f"{folder.name}/{name}" in res.stdout
    assert "Pareto-optimal: direct, cot" in res.stdout and "failed entirely: self-refine" in res.stdout


def test_cli_report_unknown_run_is_one_line_naming_it(store: TraceStore, tmp_path: Path) -> None:
    run_id = run_scripted_eval(store, tmp_path)
    res = cli("report", "nosuchrun", "--db", str(store.path), db=tmp_path / "other.db", cwd=tmp_path)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "'nosuchrun'" in lines[0] and "orchestrion view" in lines[0]
    assert run_id in lines[0]  # the recent runs are named
    assert not list(tmp_path.glob("report-*"))


def test_unknown_run_in_an_empty_store(store: TraceStore) -> None:
    with pytest.raises(ConfigError, match="no run 'abc'.*orchestrion view"):
        write_report(store, "abc")


@pytest.mark.integration
def test_report_of_a_real_eval_on_the_embedded_model(store: TraceStore, tmp_path: Path) -> None:
    config = EvalConfig(dataset=f"jsonl:{write_dataset(tmp_path / 'sums.jsonl')}", strategies=["direct"],
                        epochs=1, concurrency=1, options={"max_tokens": 24})
    run = asyncio.run(run_eval(config, store))
    report = write_report(store, run.run_id, tmp_path / "real")
    episodes = store.query("SELECT meta, status, input_tokens FROM episodes WHERE run_id = ?", (run.run_id,))
    assert len(episodes) == 2 and all(e["input_tokens"] > 0 for e in episodes)
    scores = [json.loads(e["meta"]).get("score") for e in episodes]
    assert all(isinstance(s, (int, float)) and 0.0 <= s <= 1.0 for s in scores)
    cells = row_of(report.markdown.read_text(), "direct")
    assert cells[1] == "2 (2×1)" and cells[2].startswith(f"{sum(scores) / 2:.3f} ± ")
    for plot in report.plots:
        assert_png(plot)
