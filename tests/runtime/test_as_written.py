"""direct asks a task as written when the task says in its own words how to answer."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrion import Pool, ScriptedModel, Task, TraceStore, solve
from orchestrion._prompts import render

CODE = Task(prompt="Write the function below in full.\n\n```python\ndef add(a, b):\n    ...\n```", id="HumanEval/x",
            metadata={"scoring": "execution", "entry_point": "add", "test": "def check(c):\n    assert c(1, 2) == 3\n"})
MIX = Task(prompt="Answer each of the 2 questions below.\n\n...\n1: <answer>\n2: <answer>", id="bigbench-mix:a/1,b/2",
           metadata={"scoring": "multipart"})
PLAIN = Task(prompt="What is 2+3?", answer="5")


@pytest.mark.parametrize(("task", "as_written"), [(CODE, True), (MIX, True), (PLAIN, False)])
async def test_direct_wraps_only_tasks_that_do_not_say_how_to_answer(store: TraceStore, task: Task,
                                                                    as_written: bool) -> None:
    asked: list[str] = []

    def reply(messages: Any, config: Any) -> str:
        asked.append(messages[-1]["content"])
        return "```python\ndef add(a, b):\n    return a + b\n```"

    res = await solve(task, strategy="direct", pool=Pool.from_models([ScriptedModel(reply, name="m")]), store=store)
    assert res.status == "ok" and len(asked) == 1
    assert asked[0] == (task.prompt if as_written else render("direct", task=task.prompt))
