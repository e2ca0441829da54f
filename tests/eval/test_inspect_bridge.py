"""The inspect_ai bridge: a real inspect_ai eval whose solver is an Orchestrion strategy on scripted models."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from orchestrion import GenerateConfig, Message, Pool, TraceStore
from orchestrion._errors import ConfigError, StrategyNotFoundError
from orchestrion.eval import inspect_bridge
from orchestrion.eval.inspect_bridge import orchestrion_solver
from orchestrion.models.scripted import ScriptedModel

ANSWERS = {"What is 2+3?": "5", "What is 4+4?": "9"}  # the second is wrong on purpose


def arithmetic(messages: Sequence[Message], config: GenerateConfig) -> str:
    question = messages[-1]["content"]
    return next(a for q, a in ANSWERS.items() if q in question)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[Any]]:
    """Refuse (and record) every connection or name lookup outside this machine; keep inspect_ai's files in tmp."""
    attempts: list[Any] = []
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def local(host: Any) -> bool:
        return not isinstance(host, str) or host in ("localhost", "127.0.0.1", "::1") or host.startswith("/")

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family != socket.AF_UNIX and not local(address[0]):
            attempts.append(address)
            raise OSError("network disabled in this test")
        return real_connect(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not local(host):
            attempts.append(host)
            raise socket.gaierror("network disabled in this test")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    yield attempts


def test_inspect_eval_scores_follow_the_scripted_answers(offline: list[Any], store: TraceStore, tmp_path: Path) -> None:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import match

    pool = Pool.from_models([ScriptedModel(arithmetic, name="calc")])
    task = Task(
        dataset=[Sample(input="What is 2+3?", target="5", id="add"), Sample(input="What is 4+4?", target="8",
                                                                            id="double")],
        solver=orchestrion_solver("direct", pool=pool, store=store, run_id="inspect-run"),
        scorer=match(),
        epochs=2,
    )
    [log] = eval(task, model="mockllm/model", log_dir=str(tmp_path / "logs"), display="none")

    assert log.status == "success", log.error
    assert log.samples is not None and len(log.samples) == 4
    by_sample = {(s.id, s.epoch): s for s in log.samples}
    for epoch in (1, 2):
        right, wrong = by_sample[("add", epoch)], by_sample[("double", epoch)]
        assert right.output.completion == "5" and right.scores is not None and right.scores["match"].value == "C"
        assert wrong.output.completion == "9" and wrong.scores is not None and wrong.scores["match"].value == "I"
    assert log.results is not None and log.results.scores[0].metrics["accuracy"].value == 0.5
    assert offline == []

    # Each sample's metadata names its traced episode, which holds the same answer and usage.
    for sample in log.samples:
        record = sample.metadata["orchestrion"]
        assert record == sample.store["orchestrion"]
        assert record["strategy"] == "direct" and record["status"] == "ok"
        assert sample.output.usage is not None
        assert sample.output.usage.input_tokens == record["input_tokens"] > 0
        row = store.episode(record["trace_id"])
        assert row is not None and row.finished == 1 and row.run_id == "inspect-run"
        assert row.answer == sample.output.completion and row.input_tokens == record["input_tokens"]
        assert row.task_id == sample.id and row.epoch == sample.epoch - 1
        task_json = orjson.loads(row.task)
        assert task_json["prompt"] == sample.input and task_json["answer"] == sample.target
        meta = row.meta_value()  # inspect's score, written back by Orchestrion's inspect hook
        assert meta["score"] == (1.0 if sample.id == "add" else 0.0) and meta["scorer"] == "inspect/match"
    assert len(store.query("SELECT id FROM episodes WHERE run_id = 'inspect-run'")) == 4
    check_model_events_and_params(log, store)


def check_model_events_and_params(log: Any, store: TraceStore) -> None:
    """The log on disk (what `inspect view` reads) has each episode's model calls as model events with
    usage and times, the eval's and samples' model_usage add them up, and the plan shows the
    solver's parameters by value."""
    from inspect_ai.event import InfoEvent, ModelEvent
    from inspect_ai.log import read_eval_log

    written = read_eval_log(log.location)
    assert written.samples is not None
    total_in = total_out = 0
    for sample in written.samples:
        trace_id = sample.metadata["orchestrion"]["trace_id"]
        calls = store.spans(trace_id, kinds=["call"])
        events = [e for e in sample.events if isinstance(e, ModelEvent)]
        assert len(events) == len(calls) >= 1
        for event, call in zip(events, calls):
            assert event.model == "orchestrion/calc" and event.output.usage is not None
            assert event.output.usage.input_tokens == call.input_tokens > 0
            assert event.output.usage.output_tokens == call.output_tokens > 0
            assert event.output.completion == sample.output.completion  # direct: one call, its text is the answer
            assert event.input and sample.input in event.input[-1].text
            assert event.completed is not None and event.completed >= event.timestamp
            assert event.metadata is not None and event.metadata["orchestrion_span_id"] == call.id
        infos = [e for e in sample.events if isinstance(e, InfoEvent) and e.source == "orchestrion"]
        assert [i.data["orchestrion_trace_id"] for i in infos] == [trace_id]  # type: ignore[index]
        usage = sample.model_usage["orchestrion/calc"]
        assert usage.input_tokens == sample.metadata["orchestrion"]["input_tokens"]
        total_in += usage.input_tokens
        total_out += usage.output_tokens
    stats = written.stats.model_usage["orchestrion/calc"]
    assert stats.input_tokens == total_in > 0 and stats.output_tokens == total_out > 0
    assert stats.total_tokens == total_in + total_out
    [step] = written.plan.steps
    assert step.params["strategy"] == "direct" and step.params["pool"] == "<in-memory>"
    assert step.params["models"] == ["calc"] and step.params["run_id"] == "inspect-run"
    assert step.params["store"] == str(store.path) and step.params["options"] == {}
    assert step.params_passed == step.params


def test_missing_inspect_ai_is_a_config_error_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    inspect_bridge._solver_factory.cache_clear()
    for name in ("inspect_ai", "inspect_ai.model", "inspect_ai.solver"):
        monkeypatch.setitem(sys.modules, name, None)
    try:
        with pytest.raises(ConfigError, match=r"pip install 'orchestrion\[inspect\]'"):
            orchestrion_solver("direct", pool=Pool.from_models([ScriptedModel(["x"])]))
    finally:
        inspect_bridge._solver_factory.cache_clear()


def test_unknown_strategy_fails_when_the_solver_is_made() -> None:
    with pytest.raises(StrategyNotFoundError):
        orchestrion_solver("no-such-strategy", pool=Pool.from_models([ScriptedModel(["x"])]))


ROUND1 = orjson.dumps({"thought": "add", "calls": [{"tool": "calculator", "input": "2+3"},
                                                   {"tool": "reasoner", "input": "what is 2+3"}]}).decode()
FINAL = orjson.dumps({"thought": "done", "calls": [], "final": True}).decode()


def test_orchestrion_model_provider_logs_tools_spans_and_writes_the_score_back(
        offline: list[Any], store: TraceStore, tmp_path: Path) -> None:
    """``--model orchestrion/para`` through inspect's own model lookup (the entry point), on a task
    whose solver is plain generate(): the log holds the episode's tool calls, nested spans and
    usage, and inspect's score lands in the episode's meta."""
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.event import ModelEvent, SpanBeginEvent, SpanEndEvent, ToolEvent
    from inspect_ai.log import read_eval_log
    from inspect_ai.scorer import match

    from tests.helpers import script

    pool = Pool.from_models([ScriptedModel(script([ROUND1, FINAL], worker=lambda p: "5"), name="calc")])
    task = Task(dataset=[Sample(input="What is 2+3?", target="5", id="add")], scorer=match())
    [log] = eval(task, model="orchestrion/para", model_args={"pool": pool, "store": store, "run_id": "inspect-model"},
                 log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    assert offline == []

    written = read_eval_log(log.location)
    assert written.eval.model == "orchestrion/para" and written.samples is not None
    [sample] = written.samples
    assert sample.output.completion == "5" and sample.scores is not None and sample.scores["match"].value == "C"
    trace_id = sample.output.metadata["orchestrion"]["trace_id"]  # type: ignore[index]
    row = store.episode(trace_id)
    assert row is not None and row.run_id == "inspect-model" and row.strategy == "para" and row.answer == "5"

    # (a) one tool event per tool or agent call of the episode, with its arguments and result
    tool_spans = store.spans(trace_id, kinds=["tool", "agent"])
    tools = [e for e in sample.events if isinstance(e, ToolEvent)]
    assert [(e.function, e.result) for e in tools] == [(s.name, "5") for s in tool_spans]
    assert {e.function for e in tools} == {"calculator", "reasoner"}
    assert next(e for e in tools if e.function == "calculator").arguments == {"expression": "2+3"}
    # nested spans: the episode, its rounds, decisions and answer, each begun and ended once
    begins = {e.id: e for e in sample.events if isinstance(e, SpanBeginEvent) and e.id.startswith("orch-")}
    ends = {e.id for e in sample.events if isinstance(e, SpanEndEvent) and e.id.startswith("orch-")}
    assert set(begins) == ends
    [root] = [e for e in begins.values() if e.type == "orchestrion"]
    assert root.name == "orchestrion/para"
    assert {"round", "decision", "answer", "agent"} <= {e.type for e in begins.values()}
    assert all(e.parent_id in begins for e in begins.values() if e is not root)
    assert all(e.span_id in begins for e in tools)  # each tool call sits inside the episode's spans
    # the agent's own model call sits in the agent's span, named by its tool event
    reasoner = next(e for e in tools if e.function == "reasoner")
    calls = [e for e in sample.events if isinstance(e, ModelEvent) and e.model == "orchestrion/calc"]
    assert len(calls) == len(store.spans(trace_id, kinds=["call"])) == 4
    assert reasoner.agent_span_id is not None and any(c.span_id == reasoner.agent_span_id for c in calls)

    # token usage: the episode's, counted once under the model inspect ran
    assert set(written.stats.model_usage) == {"orchestrion/para"}
    usage = written.stats.model_usage["orchestrion/para"]
    assert usage.input_tokens == row.input_tokens > 0 and usage.output_tokens == row.output_tokens > 0

    # (c) inspect's score written back into the episode's meta
    meta = store.episode(trace_id).meta_value()  # type: ignore[union-attr]
    assert meta["score"] == 1.0 and meta["correct"] is True and meta["scorer"] == "inspect/match"
    assert meta["inspect_scores"] == {"match": "C"}
