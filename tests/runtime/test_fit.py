"""An answer fits its task's format, or the episode answers as direct would (scripted model)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from orchestrion import Pool, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion.runtime.context import RunContext
from orchestrion.runtime.fit import AnswerFormat
from orchestrion.runtime.types import Answer, Task
from orchestrion.strategies.base import Strategy

TF = Task(prompt="Is the sky blue?\n\nOptions:\n(A) True\n(B) False", choices=["True", "False"], answer="True",
          metadata={"scoring": "multiple_choice", "labels": ["A", "B"]})
NUMERIC = Task(prompt="What is 2+3?", answer="5", metadata={"scoring": "numeric"})


@pytest.mark.parametrize(("task", "answer", "fits"), [
    (TF, "Answer: (A) True", True),
    (TF, "Answer: False", True),
    (TF, "(B)", True),
    (TF, "Answer: 12/25/2022", False),
    (TF, "# Answer: maybe", False),
    (NUMERIC, "Answer: 5", True),
    (NUMERIC, "the sum is five", True),
    (NUMERIC, "Answer: unknown", False),
    (Task(prompt="Spell it", metadata={"scoring": "exact"}), "   ", False),
])
def test_an_answer_fits_its_options_or_its_number(task: Task, answer: str, fits: bool) -> None:
    fmt = AnswerFormat.of(task)
    assert fmt is not None and (fmt.misfit(answer) is None) is fits


def test_a_task_that_states_no_format_accepts_anything() -> None:
    assert AnswerFormat.of(Task(prompt="Write me a poem")) is None


class Stubborn(Strategy):
    """Answers what it is told to, whatever the task's options."""

    name = "stubborn-test"
    summary = "test"
    text: ClassVar[str] = "Answer: 12/25/2022"

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        return Answer(self.text)


def _model(direct_reply: str) -> ScriptedModel:
    return ScriptedModel(lambda messages, config: direct_reply, name="m")


async def _events(store: TraceStore, trace_id: str) -> list[dict[str, Any]]:
    await store.aflush()
    return [e.data_value() for e in store.events(trace_id) if e.kind == "answer_out_of_format"]


async def test_an_out_of_format_answer_is_replaced_by_directs_and_recorded(store: TraceStore) -> None:
    res = await solve(TF, strategy=Stubborn(), pool=Pool.from_models([_model("Answer: (A) True")]),
                      tools=ToolRegistry([]), store=store)
    assert res.answer == "Answer: (A) True"
    [event] = await _events(store, res.trace_id)
    assert event["replaced"] is True and event["fallback_fits"] is True and "12/25/2022" in event["answer"]
    assert res.meta["out_of_format"]["reason"].startswith("it names none of the task's options")


async def test_an_answer_that_fits_is_kept_untouched(store: TraceStore) -> None:
    class Fits(Stubborn):
        text = "Answer: (B) False"

    res = await solve(TF, strategy=Fits(), pool=Pool.from_models([_model("Answer: (A) True")]),
                      tools=ToolRegistry([]), store=store)
    assert res.answer == "Answer: (B) False" and await _events(store, res.trace_id) == []


async def test_directs_own_out_of_format_answer_is_recorded_not_rerun(store: TraceStore) -> None:
    calls: list[int] = []

    def reply(messages: Any, config: Any) -> str:
        calls.append(1)
        return "Answer: blue"

    res = await solve(TF, strategy="direct", pool=Pool.from_models([ScriptedModel(reply, name="m")]),
                      tools=ToolRegistry([]), store=store)
    assert res.answer == "Answer: blue" and len(calls) == 1
    [event] = await _events(store, res.trace_id)
    assert event["replaced"] is False
