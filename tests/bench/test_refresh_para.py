"""bench/refresh_para.py keeps an old para episode only when ``programs_by_coder`` could not have
acted in it: the orchestrator never called ``python`` with a program that writes no number of the
task (a program the coder agent ran is not the orchestrator's)."""

from __future__ import annotations

import json
from typing import Any

from orchestrion import Pool, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion.tools.agents import CoderAgent
from orchestrion.tools.envelope import ToolResult
from tests.bench import load_bench
from tests.tools.test_agents import FakePython

refresh = load_bench("refresh_para")
TASK = "I have a goat, three bears and a fish. How many animals do I have?"


async def _episode(store: TraceStore, calls: list[dict[str, str]], by_coder: bool) -> str:
    def reply(messages: Any, config: Any) -> str:
        if config.json_schema is not None:
            first = not any("Results so far" in m["content"] for m in messages)
            return json.dumps({"thought": "t", "calls": calls if first else [], "final": not first})
        if "Python program" in messages[-1]["content"]:
            return "```python\nprint(sum([1, 3, 1]))\n```"
        return "Answer: 5"

    res = await solve(TASK, strategy="para", pool=Pool.from_models([ScriptedModel(reply, name="m")]),
                      tools=ToolRegistry([CoderAgent(), FakePython([ToolResult(output="5\n")] * 4)]), store=store,
                      options={"programs_by_coder": by_coder})
    store.flush()
    return res.trace_id


async def test_only_the_orchestrators_own_programs_without_the_tasks_numbers_mark_an_episode(store: TraceStore) -> None:
    guess = [{"tool": "python", "input": "len(['goat', 'three bears', 'fish'])"}]
    old = await _episode(store, guess, by_coder=False)  # as before the change: the guess ran
    assert refresh.touched(store, old, TASK)
    new = await _episode(store, guess, by_coder=True)  # the coder ran it: its own python call is not the orchestrator's
    assert [s.name for s in store.spans(new) if s.kind == "tool"] == ["python"]
    assert not refresh.touched(store, new, TASK)
    coder = await _episode(store, [{"tool": "coder", "input": TASK}], by_coder=False)
    assert not refresh.touched(store, coder, TASK)
    arithmetic = await _episode(store, [{"tool": "python", "input": "1 + 3 + 1"}], by_coder=False)
    assert refresh.touched(store, arithmetic, TASK)  # 1 and 3 are not written in the task (it says "three")
    numbered = "I have 2 goats and 3 bears. How many animals do I have?"
    assert not refresh.uses_task_numbers("len(['goat'])", numbered) and refresh.uses_task_numbers("2 + 3", numbered)
