"""The eval runner on the scripted model and a JSONL dataset; the scorer hook of solve(); CLI errors."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrion import (
    Answer,
    ConfigError,
    GenerateConfig,
    Message,
    Pool,
    ScriptedModel,
    Strategy,
    Task,
    ToolRegistry,
    TraceStore,
    solve,
)
from orchestrion.cli import app
from orchestrion.eval.runner import EvalConfig, Observer, Tally, run_eval, unique_ids, work_items
from orchestrion.eval.summary import summarize
from orchestrion.models.cost import Price

ROWS = [
    {"id": "a", "prompt": "What is 2+2?", "answer": "4"},
    {"id": "b", "prompt": "What is 3+3?", "answer": "6"},
    {"id": "c", "prompt": "What is 4+5?", "answer": "9"},
]


def write_jsonl(path: Path, rows: list[dict[str, Any]] = ROWS) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def arithmetic_pool(price: Price | None = None) -> Pool:
    """Task a always right; b right on its first call per prompt only; c always wrong. cot is always right."""
    calls: Counter[str] = Counter()

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = messages[-1]["content"]
        calls[text] += 1
        right = {"2+2": "4", "3+3": "6", "4+5": "9"}
        key = next(k for k in right if k in text)
        if _is_cot(text):
            return f"Let me think.\nAnswer: {right[key]}"
        if key == "4+5" or (key == "3+3" and calls[text] > 1):
            return "8"
        return right[key]

    return Pool.from_models([ScriptedModel(reply, name="m", price=price)])


def _is_cot(prompt: str) -> bool:
    return "Answer:" in prompt  # the cot template asks for an "Answer:" line; direct's does not


def _cot_is_detected() -> None:
    from orchestrion._prompts import render

    assert _is_cot(render("cot", task="x")) and not _is_cot(render("direct", task="x"))


class Recorder(Observer):
    def __init__(self) -> None:
        self.starts: list[tuple[str, int, int, bool]] = []
        self.done: list[tuple[str, str, int]] = []

    def started(self, run_id: str, tally: Tally, resumed: bool) -> None:
        self.starts.append((run_id, tally.total, tally.done, resumed))

    def episode(self, outcome: Any, tally: Tally) -> None:
        self.done.append(outcome.key)


async def test_run_counts_scores_and_summary(tmp_path: Path, store: TraceStore) -> None:
    _cot_is_detected()
    data = write_jsonl(tmp_path / "arith.jsonl")
    config = EvalConfig(dataset=str(data), strategies=["direct", "cot"], epochs=2, concurrency=3, seed=10)
    rec = Recorder()
    run = await run_eval(config, store, pool=lambda: arithmetic_pool(Price(input_per_mtok=1.0, output_per_mtok=2.0)),
                         observer=rec)
    assert (run.total, run.skipped, run.ran) == (12, 0, 12)
    assert rec.starts == [(run.run_id, 12, 0, False)] and len(rec.done) == 12
    rows = store.query("SELECT * FROM episodes WHERE run_id = ?", (run.run_id,))
    keys = Counter((r["task_id"], r["strategy"], r["epoch"]) for r in rows)
    assert keys == Counter({(t, s, e): 1 for t in "abc" for s in ("direct", "cot") for e in (0, 1)})
    assert all(r["finished"] == 1 and r["status"] == "ok" for r in rows)
    for r in rows:
        meta = json.loads(r["meta"])
        assert meta["score"] in (0.0, 1.0) and isinstance(meta["correct"], bool) and "extracted" in meta
        assert meta["options"]["seed"] == 10 + r["epoch"]  # seed + epoch reaches the strategy
        assert meta["correct"] == (r["task_id"] == "a" or r["strategy"] == "cot" or meta["extracted"] == "6")
    # b under direct: right once, wrong once (whichever epoch came first)
    b_direct = sorted(json.loads(r["meta"])["score"] for r in rows if r["task_id"] == "b" and r["strategy"] == "direct")
    assert b_direct == [0.0, 1.0]
    run_row = store.query("SELECT * FROM runs WHERE id = ?", (run.run_id,))[0]
    assert run_row["status"] == "finished" and run_row["kind"] == "eval"
    stored = json.loads(run_row["config"])
    assert sorted(stored["task_ids"]) == ["a", "b", "c"]  # shuffled by the seed
    assert stored["dataset_kind"] == "jsonl" and stored["strategies"] == ["direct", "cot"]

    direct, cot = summarize(store, run.run_id)
    assert (direct.strategy, cot.strategy) == ("direct", "cot")
    assert (direct.episodes, direct.tasks, direct.epochs) == (6, 3, 2)
    assert direct.accuracy == pytest.approx(0.5)  # per-task means 1, 0.5, 0
    assert direct.stderr == pytest.approx(0.5 / math.sqrt(3))
    assert cot.accuracy == 1.0 and cot.stderr == 0.0
    assert direct.models == {"m": 6} and cot.models == {"m": 6} and direct.tools == {}
    assert direct.invalid_action_rate == 0.0 and direct.statuses == {"ok": 6}
    spans = store.query(
        "SELECT s.input_tokens AS i, s.output_tokens AS o FROM spans s JOIN episodes e ON e.id = s.episode_id "
        "WHERE e.strategy = 'direct' AND s.kind = 'call'"
    )
    assert direct.input_tokens == sum(s["i"] for s in spans) > 0
    assert direct.output_tokens == sum(s["o"] for s in spans) > 0
    expected_cost = (direct.input_tokens * 1.0 + direct.output_tokens * 2.0) / 1e6
    assert direct.cost_usd == pytest.approx(expected_cost)


async def test_unknown_price_gives_unknown_cost(tmp_path: Path, store: TraceStore) -> None:
    data = write_jsonl(tmp_path / "arith.jsonl", ROWS[:1])
    run = await run_eval(EvalConfig(dataset=str(data), strategies=["direct"]), store, pool=arithmetic_pool)
    (s,) = summarize(store, run.run_id)
    assert s.cost_usd is None and s.accuracy == 1.0 and s.episodes == 1


def test_work_items_order_and_skip() -> None:
    tasks = unique_ids([Task(prompt="p", id="x"), Task(prompt="q", id="x"), Task(prompt="r")])
    assert [t.id for t in tasks] == ["x", "x#2", "task-2"]
    items = work_items(tasks, ["direct", "cot"], 2, {("x", "cot", 1)})
    assert len(items) == 11 and ("x", "cot", 1) not in [i.key for i in items]
    assert [i.key for i in items[:3]] == [("x", "direct", 0), ("x", "cot", 0), ("x#2", "direct", 0)]


# -- the scorer hook of solve() --------------------------------------------------------
async def test_solve_merges_scorer_fields_in_the_closing_update(store: TraceStore) -> None:
    seen: list[tuple[str, str]] = []

    async def scorer(task: Task, output: str) -> dict[str, Any]:
        seen.append((task.prompt, output))
        return {"score": 1.0, "correct": True, "extracted": output}

    pool = Pool.from_models([ScriptedModel(["42"])])
    res = await solve(Task(prompt="q", id="t1"), strategy="direct", pool=pool, tools=ToolRegistry([]), store=store,
                      scorer=scorer, run_id="r", epoch=3)
    assert seen == [("q", "42")]
    row = store.episode(res.trace_id)
    assert row is not None and row.finished == 1 and (row.run_id, row.task_id, row.epoch) == ("r", "t1", 3)
    meta = json.loads(row.meta)
    assert (meta["score"], meta["correct"], meta["extracted"]) == (1.0, True, "42")
    assert meta["result"] == {"model": "scripted"} and "pool" in meta  # what was there is kept


async def test_failing_scorer_scores_zero_and_says_why(store: TraceStore) -> None:
    async def scorer(task: Task, output: str) -> dict[str, Any]:
        raise ValueError("grader broke")

    res = await solve("q", strategy="direct", pool=Pool.from_models([ScriptedModel(["x"])]), tools=ToolRegistry([]),
                      store=store, scorer=scorer)
    meta = json.loads(store.episode(res.trace_id).meta)  # type: ignore[union-attr]
    assert meta["score"] == 0.0 and meta["correct"] is False and "grader broke" in meta["score_error"]
    assert res.status == "ok"


async def test_cancelled_episode_is_not_scored(store: TraceStore) -> None:
    called = []

    async def scorer(task: Task, output: str) -> dict[str, Any]:
        called.append(output)
        return {"score": 1.0}

    pool = Pool.from_models([ScriptedModel(["x"], delay_s=5)])
    job = asyncio.create_task(solve("q", strategy="direct", pool=pool, tools=ToolRegistry([]), store=store,
                                    scorer=scorer))
    await asyncio.sleep(0.2)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    (row,) = store.query("SELECT * FROM episodes")
    assert row["status"] == "cancelled" and row["finished"] == 1 and "score" not in json.loads(row["meta"])
    assert called == []


class Crashing(Strategy):
    name = "crashing-test"
    summary = "raises an unexpected exception"

    async def solve(self, task: Task, ctx: Any) -> Answer:
        raise RuntimeError("strategy bug")


async def test_unexpected_exception_is_recorded_as_error_and_the_run_goes_on(store: TraceStore) -> None:
    with pytest.raises(RuntimeError):
        await solve("q", strategy=Crashing(), pool=Pool.from_models([ScriptedModel(["x"])]), tools=ToolRegistry([]),
                    store=store)
    (row,) = store.query("SELECT * FROM episodes")
    assert row["status"] == "error" and "strategy bug" in row["error"] and row["finished"] == 1


# -- CLI errors --------------------------------------------------------------------------
def _cli(args: list[str]) -> Any:
    return CliRunner().invoke(app, args)


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "arith.jsonl")
    db = str(tmp_path / "t.db")
    cases = [
        (["eval", "--dataset", str(data), "--strategies", "direct,nope", "--db", db], "unknown strategy 'nope'"),
        (["eval", "--resume", "zzz", "--db", db], "no run 'zzz'"),
        (["eval", "--strategies", "direct", "--db", db], "--dataset is required"),
        (["eval", "--dataset", str(tmp_path / "missing.jsonl"), "--db", db], "missing.jsonl"),
        (["eval", "--dataset", str(data), "--executor", "spark", "--db", db], "choose local or ray"),
        (["eval", "--dataset", str(data), "--pool", str(tmp_path / "nopool.yaml"), "--db", db], "pool file not found"),
    ]
    for args, message in cases:
        result = _cli(args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output


# -- the real embedded model ---------------------------------------------------------------
@pytest.mark.integration
def test_eval_cli_on_the_embedded_model(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "arith.jsonl")
    exe = Path(sys.executable).parent / "orchestrion"
    db = tmp_path / "t.db"
    proc = subprocess.run([str(exe), "eval", "--dataset", f"jsonl:{data}", "--limit", "2", "--strategies", "direct",
                           "--epochs", "1", "--db", str(db), "--set", "max_tokens=24"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "accuracy" in proc.stdout and "direct" in proc.stdout and "smollm2-135m×2" in proc.stdout
    assert "finished: 2 episodes ran" in proc.stderr
    store = TraceStore(db)
    rows = store.query("SELECT * FROM episodes WHERE finished = 1")
    assert len(rows) == 2 and all("score" in json.loads(r["meta"]) for r in rows)
    assert {r["task_id"] for r in rows} == {"a", "b"}


async def test_a_stop_switch_ends_the_run_as_interrupted_even_without_cancellation(tmp_path: Path) -> None:
    """Ctrl-C sets the executor's stop switch; no episode starts after it, and the run is interrupted."""
    from orchestrion.eval.executors import LocalExecutor

    store = TraceStore(tmp_path / "t.db")
    executor = LocalExecutor(concurrency=1)

    class StopAfterOne(Observer):
        def episode(self, outcome: Any, tally: Tally) -> None:
            executor.stop.on = True

    config = EvalConfig(dataset=f"jsonl:{write_jsonl(tmp_path / 'd.jsonl')}", strategies=["direct"], epochs=2)
    with pytest.raises(KeyboardInterrupt):
        await run_eval(config, store, pool=arithmetic_pool, executor=executor, observer=StopAfterOne())
    (run,) = store.query("SELECT * FROM runs")
    assert run["status"] == "interrupted"
    assert len(store.query("SELECT * FROM episodes WHERE finished = 1")) == 1  # of 6 work items


async def test_grounding_rate_counts_episodes_whose_results_held_the_answer(tmp_path: Path, store: TraceStore) -> None:
    """With the real calculator. Task a: it finds 4 and the synthesizer cites it (grounded, right).
    Task b: it finds 6 and the synthesizer retypes it wrong (grounded, wrong). Task c: the
    orchestrator asks the wrong sum, so no result is right (not grounded)."""
    expression = {"2+2": "2+2", "3+3": "3+3", "4+5": "4+4"}
    synth = {"2+2": "Answer: [R1]", "3+3": "Answer: 66", "4+5": "Answer: [R1]"}

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = " ".join(m["content"] for m in messages)
        key = next(k for k in expression if k in text)
        if config.json_schema is not None:
            done = "status=OK" in text
            calls = [] if done else [{"tool": "calculator", "input": expression[key]}]
            return json.dumps({"thought": "t", "calls": calls, "final": done})
        return synth[key]

    pool = Pool.from_models([ScriptedModel(reply, name="m")])
    config = EvalConfig(dataset=f"jsonl:{write_jsonl(tmp_path / 'd.jsonl')}", strategies=["para"], concurrency=1)
    run = await run_eval(config, store, pool=lambda: pool)
    [s] = summarize(store, run.run_id)
    assert s.accuracy == pytest.approx(1 / 3)
    assert s.grounded_episodes == 2 and s.grounding_rate == pytest.approx(0.5)


async def test_run_options_go_to_the_strategies_that_have_them(tmp_path: Path, store: TraceStore) -> None:
    data = f"jsonl:{write_jsonl(tmp_path / 'd.jsonl', ROWS[:1])}"
    pool = arithmetic_pool()
    run = await run_eval(EvalConfig(dataset=data, strategies=["direct", "vote"], options={"k": 2}),
                         store, pool=lambda: pool)
    eps = store.query("SELECT strategy, status, meta FROM episodes WHERE run_id = ?", (run.run_id,))
    assert {e["strategy"]: e["status"] for e in eps} == {"direct": "ok", "vote": "ok"}
    options = {e["strategy"]: json.loads(e["meta"])["options"] for e in eps}
    assert options["vote"]["k"] == 2 and "k" not in options["direct"]
    with pytest.raises(ConfigError, match="did you mean 'max_rounds'"):
        await run_eval(EvalConfig(dataset=data, strategies=["direct", "para"], options={"max_round": 1}), store,
                       pool=lambda: pool)
    with pytest.raises(ConfigError, match="max_rounds"):
        await run_eval(EvalConfig(dataset=data, strategies=["para"], options={"max_rounds": "many"}), store,
                       pool=lambda: pool)
