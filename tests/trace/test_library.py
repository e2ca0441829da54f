"""The program library shows a worked program only when programs of its shape were mostly right."""

from __future__ import annotations

from typing import Any

from orchestrion import Pool, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion.tools.agents import CoderAgent
from orchestrion.tools.envelope import ToolResult
from orchestrion.trace._library import program_shape, trusted_programs
from tests.tools.test_agents import FakePython, _tf

BUGGY = 'def ok(s):\n    return False  # {n}\nseq = "{seq}"\nprint("Valid" if ok(seq) else "Invalid")\n'
RIGHT = 'seq = "{seq}"\ndepth = 0\nfor ch in seq:\n    depth += 1 if ch == "(" else -1\nprint(depth == {n})\n'


def test_a_shape_is_the_code_without_its_data_comments_or_layout() -> None:
    a = BUGGY.format(n=1, seq="( )")
    b = BUGGY.format(n=2, seq="[ ] ( ) {").replace("    return", "  return")
    assert program_shape(a) == program_shape(b)
    assert program_shape(a) != program_shape(RIGHT.format(n=0, seq="( )"))
    assert program_shape("print(1") == "print(1"  # does not tokenize: its own shape


def test_a_shape_right_by_luck_is_not_shown_and_a_mostly_right_one_is() -> None:
    runs = [(f"task {i}", BUGGY.format(n=i, seq="x" * i), i % 4 == 0) for i in range(8)]  # right in 2 of 8
    runs += [(f"other {i}", RIGHT.format(n=i, seq="(" * i), i != 2) for i in range(3)]  # right in 2 of 3
    assert trusted_programs(runs, 10) == [(f"other {i}", RIGHT.format(n=i, seq="(" * i)) for i in (0, 1)]
    assert trusted_programs(runs, 1) == [("other 0", RIGHT.format(n=0, seq=""))]
    assert trusted_programs([("t", RIGHT, True)], 5) == [("t", RIGHT)]  # one run, right: nothing speaks against it


async def test_the_store_keeps_a_program_from_the_library_when_its_shape_was_mostly_wrong(store: TraceStore) -> None:
    verdicts = iter([True, False, False, True, False])

    async def scorer(task: Any, answer: str) -> dict[str, Any]:
        right = next(verdicts)
        return {"score": float(right), "correct": right}

    def replies(messages: Any, config: Any) -> str:
        return "```python\nx = 4\nprint(x == 3)\n```"

    pool = Pool.from_models([ScriptedModel(replies, name="m")])
    for i in range(5):
        fake = FakePython([ToolResult(output="False")])
        await solve(_tf(f"Take {i + 3} steps. Take 2 steps back. Are you back at the start?\n(A) True\n(B) False"),
                    strategy="program", pool=pool, tools=ToolRegistry([CoderAgent(), fake]), store=store,
                    scorer=scorer)
    await store.aflush()
    assert store.worked_programs(10) == []  # the one shape was right in 2 of 5 runs
