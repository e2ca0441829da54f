"""``inspect eval --model orchestrion/para`` from the command line (issue 23 item 9), as a user runs it:
inspect finds the ``orchestrion`` model API through the package's entry point, runs one para
episode on the tiny pool (the real SmolLM2-135M, greedy, seed 0), and its log on disk holds the
episode's tool calls as tool events and its tokens in ``model_usage``.

Which tools SmolLM2 picks, and whether its answer is right, are the model's business; what is
asserted is that every tool or agent call the episode made is a tool event, that it made at least
one on this arithmetic task (it does, with the seed fixed: calculator and python on ``12*13``), and
that the usage inspect reports is the episode's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrion import TraceStore

pytestmark = pytest.mark.integration

TASK = '''
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes


@task
def arithmetic() -> Task:
    return Task(dataset=[Sample(input="What is 12*13?", target="156", id="mul")], scorer=includes())
'''


def test_inspect_eval_cli_runs_orchestrion_para_and_logs_tools_and_usage(tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    from inspect_ai.event import ToolEvent
    from inspect_ai.log import list_eval_logs, read_eval_log

    (tmp_path / "task.py").write_text(TASK)
    db, logs = tmp_path / "traces.db", tmp_path / "logs"
    inspect = Path(sys.executable).with_name("inspect")
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg-data"), "XDG_CACHE_HOME": str(tmp_path / "xdg-cache")}
    done = subprocess.run(
        [str(inspect), "eval", "task.py", "--model", "orchestrion/para", "-M", "pool=tiny", "-M", f"store={db}",
         "-M", "max_rounds=2", "--limit", "1", "--seed", "0", "--log-dir", str(logs), "--display", "plain"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "orchestrion/orchestrion_scores" in done.stdout  # the score hook, found by the entry point too

    [info] = list_eval_logs(str(logs))
    log = read_eval_log(info)
    assert log.status == "success", log.error
    assert log.eval.model == "orchestrion/para" and log.eval.model_args["pool"] == "tiny"
    assert log.samples is not None
    [sample] = log.samples
    record = sample.output.metadata["orchestrion"]  # type: ignore[index]
    assert record["strategy"] == "para" and record["status"] == "ok"

    store = TraceStore(db)
    try:
        row = store.episode(record["trace_id"])
        assert row is not None and row.answer == sample.output.completion
        assert row.meta_value()["options"] == {"seed": 0, "max_rounds": 2}  # inspect's --seed is the episode's
        spans = store.spans(record["trace_id"], kinds=["tool", "agent"])
        assert row.meta_value()["scorer"] == "inspect/includes"  # the score written back
    finally:
        store.close()

    # one tool event per tool or agent call of the episode, in order, with its result
    tools = [e for e in sample.events if isinstance(e, ToolEvent)]
    assert len(tools) == len(spans) >= 1
    assert [e.function for e in tools] == [s.name for s in spans]
    assert all(e.result not in (None, "") or e.error is not None for e in tools)

    # token usage: the episode's, under the model inspect ran, in the sample and the log
    usage = log.stats.model_usage["orchestrion/para"]
    assert usage.input_tokens == row.input_tokens > 0 and usage.output_tokens == row.output_tokens > 0
    assert sample.model_usage["orchestrion/para"].total_tokens == usage.total_tokens
