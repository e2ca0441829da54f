"""``proactive`` on a code task: a sub-agent tests its function on the docstring's examples and asks
for a revision when one fails; the orchestrator's decision answers it. Scripted models, real sandbox.
Also ``milestone``'s stop at a repair that repeats a program already tried."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from orchestrion import GenerateConfig, Message, Pool, ScriptedModel, TraceStore, solve

from .test_code_tasks import BROKEN, RIGHT, TASK, WRONG, coder


class Orchestrator:
    """Answers each revision request with the next scripted action; keeps what it was shown."""

    def __init__(self, actions: Sequence[dict[str, str]]) -> None:
        self.actions = list(actions)
        self.prompts: list[str] = []
        self.schemas: list[dict[str, Any]] = []
        self.model = ScriptedModel(self.reply, name="boss")

    def reply(self, messages: Sequence[Message], config: GenerateConfig) -> str:
        assert config.json_schema is not None, "the orchestrator only decides"
        self.prompts.append(str(messages[-1]["content"]))
        self.schemas.append(dict(config.json_schema))
        return json.dumps(self.actions[len(self.prompts) - 1])


def pool(boss: Orchestrator, *coders: ScriptedModel) -> Pool:
    return Pool.from_models([boss.model, *coders], orchestrator="boss", executor=coders[0].name)


async def test_a_version_that_passes_its_examples_is_the_answer_and_no_decision_is_made(store: TraceStore) -> None:
    boss, big = Orchestrator([]), coder("big", [RIGHT])
    res = await solve(TASK, strategy="proactive", pool=pool(boss, big), store=store)
    assert res.status == "ok" and "return 2 * x" in res.answer
    assert len(big.calls) == 1 and boss.prompts == [] and res.meta["stop"] == "examples pass"


async def test_a_failing_example_is_a_request_for_a_step_then_for_another_model(store: TraceStore) -> None:
    boss = Orchestrator([{"action": "more_steps", "model": "small"},
                         {"action": "replace_executor", "model": "small"}])
    big, small = coder("big", [WRONG, WRONG]), coder("small", [RIGHT])
    res = await solve(TASK, strategy="proactive", pool=pool(boss, big, small), store=store)
    assert "return 2 * x" in res.answer and res.meta["chosen"] == "a1 revised: executor small"
    assert [c["passed"] for c in res.meta["candidates"]] == [1, 1, 2] and res.meta["revisions"] == 2
    # first it asks for one more step, with the failing example as evidence; the grant is a repair
    assert "one more step" in boss.prompts[0] and "double(-1) should be -2, but gave 1" in boss.prompts[0]
    assert boss.schemas[0]["properties"]["action"]["enum"] == ["more_steps", "complete"]
    assert [m["role"] for m in big.calls[1]] == ["user", "assistant", "user"]
    # its repair wrote the same program: it asks for another model, which writes the task as written
    assert "repeats a version written before" in boss.prompts[1]
    assert boss.schemas[1]["properties"]["action"]["enum"] == ["replace_executor", "complete"]
    assert sorted(boss.schemas[1]["properties"]["model"]["enum"]) == ["boss", "small"]  # any model but big
    assert [m["content"] for m in small.calls[0]] == [TASK]
    kinds = store.query("SELECT kind FROM events WHERE episode_id = ? AND kind IN ('subagent_request', 'revision') "
                        "ORDER BY rowid", (res.trace_id,))
    assert [k["kind"] for k in kinds] == ["subagent_request", "revision"] * 2


async def test_the_orchestrator_may_complete_with_the_best_version_so_far(store: TraceStore) -> None:
    boss, big = Orchestrator([{"action": "complete", "model": "none"}]), coder("big", [WRONG, RIGHT])
    res = await solve(TASK, strategy="proactive", pool=pool(boss, big), store=store)
    assert res.status == "ok" and "return x + 2" in res.answer and len(big.calls) == 1
    assert res.meta["stop"] == "orchestrator completed"


async def test_revisions_stop_at_code_revisions(store: TraceStore) -> None:
    boss = Orchestrator([{"action": "more_steps", "model": "none"}] * 3)
    big = coder("big", [BROKEN, WRONG, BROKEN, RIGHT])
    res = await solve(TASK, strategy="proactive", pool=pool(boss, big), store=store, options={"code_revisions": 1})
    assert "return" in res.answer and len(big.calls) == 2 and res.meta["stop"] == "code_revisions"
    assert "return x + 2" in res.answer  # the repair passes one example, the broken first none


async def test_milestone_stops_when_a_repair_repeats_a_program_already_tried(store: TraceStore) -> None:
    big = coder("big", [WRONG, WRONG, RIGHT])
    res = await solve(TASK, strategy="milestone", pool=Pool.from_models([big], executor="big"), store=store,
                      options={"max_milestones": 5})
    assert "return x + 2" in res.answer and len(big.calls) == 2
    assert res.meta["stop"] == "repeated program"
    events = store.query("SELECT kind FROM events WHERE episode_id = ? AND kind = 'repeated_program'",
                         (res.trace_id,))
    assert len(events) == 1


async def test_para_runs_coder_branches_in_parallel_and_repairs_each_failing_one(store: TraceStore) -> None:
    big, small = coder("big", [WRONG, RIGHT]), coder("small", [BROKEN, BROKEN])
    res = await solve(TASK, strategy="para", pool=Pool.from_models([big, small], executor="big"), store=store)
    assert "return 2 * x" in res.answer and res.meta["chosen"] == "round 2: repair (big)"
    assert [c["label"] for c in res.meta["candidates"]] == [
        "round 1: coder (big)", "round 1: coder (small)", "round 2: repair (big)", "round 2: repair (small)"]
    assert [m["content"] for m in small.calls[0]] == [TASK]  # each branch is asked the task as written
    assert "did not run" in small.calls[1][-1]["content"]  # and repaired with its own failure
    rounds = store.query("SELECT attrs FROM spans WHERE episode_id = ? AND kind = 'round'", (res.trace_id,))
    assert [json.loads(r["attrs"])["branches"] for r in rounds] == [2, 2]


async def test_para_keeps_the_executors_version_on_a_tie_and_stops_when_one_passes(store: TraceStore) -> None:
    big, small = coder("big", [RIGHT]), coder("small", [RIGHT.replace("2 * x", "x * 2")])
    res = await solve(TASK, strategy="para", pool=Pool.from_models([big, small], executor="big"), store=store)
    assert "return 2 * x" in res.answer and res.meta["rounds"] == 1 and len(big.calls) == len(small.calls) == 1


async def test_spec_reviews_a_failing_version_and_the_coder_repairs_with_the_review(store: TraceStore) -> None:
    reviews: list[str] = []

    def review(messages: Sequence[Message], config: GenerateConfig) -> str:
        reviews.append(str(messages[-1]["content"]))
        return "It adds two instead of doubling; multiply by two."

    big, critic = coder("big", [WRONG, RIGHT]), ScriptedModel(review, name="critic")
    res = await solve(TASK, strategy="spec", pool=Pool.from_models([big, critic], executor="big"), store=store,
                      options={"code_reviewer": "critic"})
    assert "return 2 * x" in res.answer and res.meta["roles"] == ["coder", "tester", "reviewer"]
    assert res.meta["reviews"] == 1 and len(big.calls) == 2
    assert "double(-1) should be -2, but gave 1" in reviews[0] and "return x + 2" in reviews[0]
    assert "multiply by two" in big.calls[1][-1]["content"] and "should be -2" in big.calls[1][-1]["content"]


async def test_no_examples_get_one_version_from_para_and_spec(store: TraceStore) -> None:
    bare = "Write it in one ```python code block.\n\n```python\ndef double(x):\n    \"\"\"Twice x.\"\"\"\n```"
    for strategy in ("para", "spec", "uno"):
        big, small = coder("big", [WRONG]), coder("small", [RIGHT])
        res = await solve(bare, strategy=strategy, pool=Pool.from_models([big, small], executor="big"), store=store)
        assert "return x + 2" in res.answer and len(big.calls) == 1 and small.calls == [], strategy


async def test_uno_escalates_to_the_next_pair_only_when_an_example_fails(store: TraceStore) -> None:
    big, small = coder("big", [WRONG]), coder("small", [RIGHT])
    res = await solve(TASK, strategy="uno", pool=Pool.from_models([big, small], executor="big"), store=store)
    assert "return 2 * x" in res.answer and res.meta["pairs"] == ["(big, direct)", "(small, direct)"]
    assert [m["content"] for m in small.calls[0]] == [TASK] and res.meta["escalations"] == 1
    big, small = coder("big", [RIGHT]), coder("small", [WRONG])
    res = await solve(TASK, strategy="uno", pool=Pool.from_models([big, small], executor="big"), store=store)
    assert "return 2 * x" in res.answer and small.calls == [] and res.meta["escalations"] == 0


async def test_uno_keeps_the_first_version_when_the_next_pair_does_no_better(store: TraceStore) -> None:
    big, small = coder("big", [WRONG]), coder("small", [BROKEN])
    res = await solve(TASK, strategy="uno", pool=Pool.from_models([big, small], executor="big"), store=store,
                      options={"code_pairs": 1})
    assert "return x + 2" in res.answer and small.calls == []  # one pair allowed
    res = await solve(TASK, strategy="uno", pool=Pool.from_models([coder("big", [WRONG]), small]), store=store)
    assert "return x + 2" in res.answer and res.meta["chosen"] == "(big, direct)"
