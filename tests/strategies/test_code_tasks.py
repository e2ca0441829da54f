"""``topology`` and ``milestone`` on a code task whose docstring shows examples: candidates and
repairs checked on those examples in the real sandbox, with scripted models."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrion import Budget, GenerateConfig, Message, Pool, ScriptedModel, TraceStore, solve

TASK = '''Write the function below. Reply with it in one ```python code block.

```python
def double(x: int) -> int:
    """Twice x.
    >>> double(2)
    4
    >>> double(-1)
    -2
    """
```'''
RIGHT = "```python\ndef double(x: int) -> int:\n    return 2 * x\n```"
WRONG = "```python\ndef double(x: int) -> int:\n    return x + 2\n```"  # right on 2, wrong on -1
BROKEN = "```python\ndef double(x):\n    return (x\n```"


def coder(name: str, replies: Sequence[str]) -> ScriptedModel:
    """Replies in order (the last repeats); every call's messages are kept."""

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        assert config.json_schema is None, "a code task with examples asks for no plan or decision"
        return replies[min(len(model.calls), len(replies)) - 1]

    model = ScriptedModel(reply, name=name)
    return model


async def test_topology_keeps_a_first_candidate_that_passes_and_asks_nothing_more(store: TraceStore) -> None:
    big, small = coder("big", [RIGHT]), coder("small", [WRONG])
    res = await solve(TASK, strategy="topology", pool=Pool.from_models([big, small], executor="big"), store=store)
    assert res.status == "ok" and "return 2 * x" in res.answer
    assert len(big.calls) == 1 and small.calls == []
    assert res.meta["chosen"] == "candidate 1 (big)" and res.meta["examples_passed"] == 2
    assert res.meta["topology"] == "single"


async def test_topology_runs_a_parallel_round_and_keeps_the_candidate_that_passes(store: TraceStore) -> None:
    big, small = coder("big", [WRONG, WRONG]), coder("small", [RIGHT])
    res = await solve(TASK, strategy="topology", pool=Pool.from_models([big, small], executor="big"), store=store)
    assert "return 2 * x" in res.answer and res.meta["chosen"] == "candidate 2 (small)"
    assert [c["passed"] for c in res.meta["candidates"]] == [1, 1, 2]
    # the repair saw its own reply and the failing example, nothing else of the check
    repair = big.calls[1]
    assert [m["role"] for m in repair] == ["user", "assistant", "user"]
    assert "double(-1) should be -2, but gave 1" in repair[-1]["content"] and "double(2)" not in repair[-1]["content"]
    examples = store.query("SELECT data FROM events WHERE episode_id = ? AND kind = 'examples'", (res.trace_id,))
    assert len(examples) == 3


async def test_topology_keeps_the_first_candidate_when_none_does_better(store: TraceStore) -> None:
    big, small = coder("big", [WRONG, BROKEN]), coder("small", [BROKEN])
    res = await solve(TASK, strategy="topology", pool=Pool.from_models([big, small], executor="big"),
                      store=store, options={"code_rounds": 3})
    assert "return x + 2" in res.answer and res.meta["chosen"] == "candidate 1 (big)"
    assert len(big.calls) == 3 and len(small.calls) == 1  # round 3 repairs the best so far only


async def test_milestone_implements_then_repairs_until_the_examples_pass(store: TraceStore) -> None:
    big = coder("big", [BROKEN, WRONG, RIGHT, WRONG])
    res = await solve(TASK, strategy="milestone", pool=Pool.from_models([big], executor="big"), store=store)
    assert "return 2 * x" in res.answer and len(big.calls) == 3
    assert [m["milestone"] for m in res.meta["milestones"]] == [
        "implement the function", "make the failing examples pass", "make the failing examples pass"]
    assert res.meta["stop"] == "examples pass" and res.meta["completeness"] == 2 / 3  # the broken one did not run
    assert "The program did not run" in big.calls[1][-1]["content"]


async def test_off_the_option_a_code_task_is_planned_as_any_other(store: TraceStore) -> None:
    seen: list[bool] = []

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        seen.append(config.json_schema is not None)
        return RIGHT

    model = ScriptedModel(reply, name="m")
    await solve(TASK, strategy="milestone", pool=Pool.from_models([model]), store=store,
                options={"code_examples": False, "max_milestones": 1})
    assert seen and seen[0] is True  # the first call asked for a milestone decision


async def test_a_budget_spent_mid_way_answers_with_the_best_version_so_far(store: TraceStore) -> None:
    # two steps: the first candidate's call and its check; the repair's call is refused
    for strategy in ("topology", "milestone", "proactive", "spec", "para"):
        big = coder("big", [WRONG, RIGHT])
        res = await solve(TASK, strategy=strategy, pool=Pool.from_models([big], executor="big"), store=store,
                          budget=Budget(steps=2))
        assert res.status == "budget_exceeded", strategy
        assert "return x + 2" in res.answer and res.meta["examples_passed"] == 1 and "steps" in res.meta["stopped"]
        assert len(big.calls) == 1


async def test_a_code_task_without_examples_gets_the_executors_one_version(store: TraceStore) -> None:
    bare = ("Write it in one ```python code block.\n\n```python\ndef double(x):\n    import math\n"
            '    """Twice x."""\n```')
    for strategy in ("topology", "milestone", "proactive"):
        big, small = coder("big", [WRONG, RIGHT]), coder("small", [RIGHT])
        res = await solve(bare, strategy=strategy, pool=Pool.from_models([big, small], executor="big"), store=store)
        assert res.status == "ok" and "return x + 2" in res.answer, strategy
        assert len(big.calls) == 1 and small.calls == [] and res.meta["code_examples"] == 0
        assert [m["content"] for m in big.calls[0]] == [bare]  # asked as direct asks a code task
        ran = store.query("SELECT COUNT(*) AS n FROM spans WHERE episode_id = ? AND kind = 'tool'", (res.trace_id,))
        assert ran[0]["n"] == 0  # nothing to run
