"""The core types: Task, Answer and the EpisodeStatus enum that keeps today's strings."""

from __future__ import annotations

import json

import orjson

from orchestrion import Answer, Task
from orchestrion.runtime.types import EpisodeStatus
from orchestrion.strategies import base
from orchestrion.trace.tracer import _status_of


def test_statuses_are_their_strings() -> None:
    assert EpisodeStatus.OK == "ok" and "budget_exceeded" == EpisodeStatus.BUDGET_EXCEEDED
    assert EpisodeStatus("no_answer") is EpisodeStatus.NO_ANSWER
    assert str(EpisodeStatus.INVALID_SPEC) == f"{EpisodeStatus.INVALID_SPEC}" == "invalid_spec"
    assert f"{EpisodeStatus.OK:>4}" == "  ok"
    assert json.dumps({"status": EpisodeStatus.TIMEOUT}) == '{"status": "timeout"}'
    assert orjson.loads(orjson.dumps({"status": EpisodeStatus.CANCELLED})) == {"status": "cancelled"}
    assert {EpisodeStatus.ERROR: 1}["error"] == 1


def test_the_trace_layer_writes_status_values() -> None:
    # trace sits below the runtime and keeps plain strings: they must be EpisodeStatus values
    values = {s.value for s in EpisodeStatus}
    for exc in (TimeoutError(), KeyboardInterrupt(), ValueError()):
        assert _status_of(exc) in values


def test_task_and_answer_keep_their_old_home() -> None:
    assert base.Task is Task and base.Answer is Answer
    assert Answer("x").status == "ok"
