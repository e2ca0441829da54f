"""Decision records from real `solve` runs on scripted models, and the SFT data filters."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from orchestrion import Pool, ScriptedModel, Task, ToolRegistry, TraceStore, solve
from orchestrion.tools.calculator import CalculatorTool
from orchestrion.train.records import (
    DecisionRecord,
    RecordFilter,
    cap_tool_share,
    filter_records,
    filter_steps,
    load_records,
)
from tests.helpers import CrashTool, LookupTool

RUN = "run-a"


def action(calls: list[dict[str, Any]], final: bool = False) -> str:
    return json.dumps({"thought": "t", "calls": calls, "final": final})


def tools() -> ToolRegistry:
    return ToolRegistry([CalculatorTool(), LookupTool(), CrashTool("disk on fire")])


async def episode(store: TraceStore, replies: Sequence[str], task_id: str, prompt: str, *, score: float,
                  epoch: int = 0, run_id: str = RUN) -> str:
    """One para episode on a scripted orchestrator, then a score merged into its meta (as the eval runner does)."""
    orch = ScriptedModel(list(replies), name="orch")
    task = Task(prompt=prompt, id=task_id, answer="5")
    res = await solve(task, strategy="para", pool=Pool.from_models([orch]), tools=tools(), store=store,
                      run_id=run_id, epoch=epoch)
    store.submit("UPDATE episodes SET meta = json_patch(meta, ?) WHERE id = ?",
                 (json.dumps({"score": score, "correct": score >= 1.0}), res.trace_id))
    await store.aflush()
    return res.trace_id


async def build_run(store: TraceStore) -> dict[str, str]:
    """Five episodes of run RUN:

    A (t1): an invalid output, repaired to a calculator call; final; correct.
    B (t2): a lookup; final; wrong.
    C (t1, epoch 1): a crashing tool and a lookup in one round (a tool failure), final; correct.
    D (t3): the same prompt and script as C, so its records duplicate C's; correct.
    E (t4): a lookup; final; correct, nothing went wrong.
    """
    ids = {}
    ids["A"] = await episode(store, ["I think we should add", action([{"tool": "calculator", "input": "2+3"}]),
                                     action([], True), "5"], "t1", "What is 2+3?", score=1.0)
    ids["B"] = await episode(store, [action([{"tool": "lookup", "input": "sum"}]), action([], True), "6"],
                             "t2", "What is 2+4?", score=0.0)
    crash_then_lookup = [action([{"tool": "crash", "input": "x"}, {"tool": "lookup", "input": "2+3"}]),
                         action([], True), "5"]
    ids["C"] = await episode(store, crash_then_lookup, "t1", "What is 2+3?", score=1.0, epoch=1)
    ids["D"] = await episode(store, crash_then_lookup, "t3", "What is 2+3?", score=1.0)
    ids["E"] = await episode(store, [action([{"tool": "lookup", "input": "capital"}]), action([], True), "Paris"],
                             "t4", "Capital of France?", score=1.0)
    return ids


async def test_records_carry_exact_context_output_and_outcome(store: TraceStore) -> None:
    ids = await build_run(store)
    records = load_records(store, run_id=RUN)
    by_ep: dict[str, list[DecisionRecord]] = {}
    for r in records:
        by_ep.setdefault(r.episode_id, []).append(r)
    assert [len(by_ep[ids[k]]) for k in "ABCDE"] == [3, 2, 2, 2, 2]
    a = by_ep[ids["A"]]
    assert [r.valid for r in a] == [False, True, True]
    assert [r.attempt for r in a] == [0, 1, 0]
    assert [r.repaired for r in a] == [True, True, False]  # the first decision was repaired; the final one was not
    assert a[0].output == "I think we should add" and a[0].action is None and a[0].error
    assert a[1].action == {"thought": "t",
                           "calls": [{"tool": "calculator", "input": "2+3", "model": None, "args": None}],
                           "final": False}
    # the repair attempt's context is the first context plus the bad output and the error
    assert a[1].messages[: len(a[0].messages)] == a[0].messages
    assert a[1].messages[len(a[0].messages)]["content"] == "I think we should add"
    assert a[0].messages[-1]["role"] == "user" and "What is 2+3?" in a[0].messages[-1]["content"]
    # exactly what the decisions table stored
    stored = store.decisions(ids["A"])
    assert [json.loads(d.messages) for d in stored] == [r.messages for r in a]
    assert [d.output for d in stored] == [r.output for r in a]
    assert [r.tools_used for r in a] == [[], ["calculator"], []]
    assert [r.tools_used for r in by_ep[ids["C"]]] == [["crash", "lookup"], []]
    assert all(r.prompt_token_ids is None and r.token_ids is None for r in records)  # the scripted model gives no ids
    assert {(r.score, r.correct, r.episode_status) for r in a} == {(1.0, True, "ok")}
    assert {(r.score, r.correct) for r in by_ep[ids["B"]]} == {(0.0, False)}
    assert by_ep[ids["C"]][0].episode_tool_failures == 1 and a[0].episode_tool_failures == 0
    assert {r.task_id for r in a} == {"t1"} and {r.epoch for r in by_ep[ids["C"]]} == {1}
    assert a[0].task_answer == "5" and a[0].strategy == "para" and a[0].schema_name == "ParaAction"
    assert load_records(store, episode_ids=[ids["B"]]) == by_ep[ids["B"]]
    assert load_records(store, run_id="no-such-run") == []


async def test_default_filter_keeps_successful_valid_distinct_records(store: TraceStore) -> None:
    ids = await build_run(store)
    kept = filter_records(load_records(store, run_id=RUN), RecordFilter())
    # B failed; A's invalid attempt goes; D duplicates C; the repaired attempt of A stays
    assert [(r.episode_id, r.seq) for r in kept] == [
        (ids["A"], 2), (ids["A"], 3), (ids["C"], 1), (ids["C"], 2), (ids["E"], 1), (ids["E"], 2)]
    assert kept[0].repaired and kept[0].valid


async def test_each_filter_on_its_own(store: TraceStore) -> None:
    ids = await build_run(store)
    records = load_records(store, run_id=RUN)
    off = {"successful_only": False, "max_tool_share": None, "dedupe": False, "valid_only": False}
    assert len(filter_records(records, RecordFilter(**off))) == 11
    eps = {r.episode_id for r in filter_records(records, RecordFilter(**{**off, "successful_only": True}))}
    assert eps == {ids["A"], ids["C"], ids["D"], ids["E"]}
    # not keeping recoverable trajectories drops A (invalid output) and C, D (tool failure) whole
    eps = {r.episode_id for r in filter_records(records, RecordFilter(**{**off, "keep_recoverable": False}))}
    assert eps == {ids["B"], ids["E"]}
    # one per task: t1 has A and C, equal scores; C made no invalid attempt
    eps = {r.episode_id for r in filter_records(records, RecordFilter(**{**off, "one_per_task": True}))}
    assert eps == {ids["B"], ids["C"], ids["D"], ids["E"]}
    kept = filter_records(records, RecordFilter(**{**off, "dedupe": True}))
    assert len(kept) == 9 and ids["D"] not in {r.episode_id for r in kept}
    kept = filter_records(records, RecordFilter(**{**off, "valid_only": True}))
    assert len(kept) == 10 and all(r.valid for r in kept)


async def test_tool_cap_on_a_run(store: TraceStore) -> None:
    ids = await build_run(store)
    records = load_records(store, run_id=RUN)
    # default filters leave 6 records; lookup is used by C's first and E's first (2 of 6)
    kept = filter_records(records, RecordFilter(max_tool_share=0.25))
    # 2 > 0.25*6: drop ceil((2 - 1.5) / 0.75) = 1 lookup record, the latest (E's first) -> 1 of 5
    assert [(r.episode_id, r.seq) for r in kept] == [
        (ids["A"], 2), (ids["A"], 3), (ids["C"], 1), (ids["C"], 2), (ids["E"], 2)]


def rec(i: int, tools: list[str]) -> DecisionRecord:
    return DecisionRecord(
        decision_id=f"d{i}", episode_id=f"e{i}", run_id="r", task_id=f"t{i}", strategy="para", seq=1, attempt=0,
        model="m", schema_name="ParaAction", messages=[{"role": "user", "content": str(i)}], output="{}",
        prompt_token_ids=None, token_ids=None, logprobs=None, action={}, error=None, valid=True,
        episode_status="ok", score=1.0, correct=True, repaired=False, tools_used=tools)


def test_tool_cap_worked_example() -> None:
    records = [rec(0, ["a"]), rec(1, ["b"]), rec(2, ["a"]), rec(3, []), rec(4, ["a"]), rec(5, ["a", "b"])]
    # a: 4 of 6 > 0.5 -> drop ceil((4 - 3) / 0.5) = 2 records with a, the latest: 5 and 4 -> a: 2 of 4
    assert [r.decision_id for r in cap_tool_share(records, 0.5)] == ["d0", "d1", "d2", "d3"]
    # 1/3: a 4 > 2 -> drop ceil((4-2)/(2/3)) = 3 (d5, d4, d2) -> [d0, d1, d3]: a 1/3, b 1/3 -> holds
    assert [r.decision_id for r in cap_tool_share(records, 1 / 3)] == ["d0", "d1", "d3"]
    assert cap_tool_share(records, 1.0) == records
    # a single tool in every record cannot stay under any cap below 1
    assert cap_tool_share([rec(0, ["a"]), rec(1, ["a"])], 0.5) == []


@pytest.mark.parametrize("score,correct,status,expected", [
    (1.0, True, "ok", True), (0.0, False, "ok", False), (0.7, None, "ok", True), (0.4, None, "ok", False),
    (0.9, None, "budget_exceeded", False), (None, None, "ok", False), (1.0, False, "ok", False),
])
def test_successful_means_correct_or_ok_with_score(score: float | None, correct: bool | None, status: str,
                                                   expected: bool) -> None:
    r = rec(0, [])
    r.score, r.correct, r.episode_status = score, correct, status
    assert r.successful is expected


async def test_replayed_decisions_are_marked_and_left_out(store: TraceStore) -> None:
    ids = await build_run(store)
    # a tree rollout marks the decision attempts it replayed on the decision span
    first = store.decisions(ids["E"])[0]
    store.submit("UPDATE spans SET attrs = json_patch(attrs, ?) WHERE id = ?",
                 (json.dumps({"replayed": True, "replayed_attempts": [0]}), first.span_id))
    await store.aflush()
    records = load_records(store, run_id=RUN)
    assert [r.decision_id for r in records if r.replayed] == [first.id]
    kept = filter_records(records, RecordFilter())
    assert first.id not in {r.decision_id for r in kept} and len(kept) == 5
    assert first.id in {r.decision_id for r in filter_records(records, RecordFilter(sampled_only=False))}


GROUNDING_RUN = "run-grounding"


async def build_grounding_run(store: TraceStore) -> dict[str, str]:
    """Four para episodes of GROUNDING_RUN scored as eval scores them (answer '5' is correct):

    G: calculator(2+3) gives 5, the answer 5: grounded.
    U: calculator(1) gives 1, the answer 5 anyway: correct, but no result of the episode is.
    N: no call at all, the answer 5: correct, no result to measure.
    W: calculator(2+3) gives 5, the answer 6: wrong.
    """
    from orchestrion.eval.scoring import scoring
    from orchestrion.runtime.episode import run_episode
    from orchestrion.strategies.registry import get_strategy

    async def scorer(task: Task, output: str) -> dict[str, Any]:
        right = output.strip() == "5"
        return {"score": 1.0 if right else 0.0, "correct": right}

    plans = {"G": ([{"tool": "calculator", "input": "2+3"}], "5"), "U": ([{"tool": "calculator", "input": "1"}], "5"),
             "N": ([], "5"), "W": ([{"tool": "calculator", "input": "2+3"}], "6")}
    ids = {}
    for key, (calls, answer) in plans.items():
        replies = [action(calls), action([], True), answer] if calls else [action([], True), answer]
        res = await run_episode(Task(prompt="What is 2+3?", id=f"t-{key}", answer="5"), get_strategy("para"),
                                pool=Pool.from_models([ScriptedModel(replies, name="orch")]), tools=tools(),
                                store=store, run_id=GROUNDING_RUN, review=scoring(scorer))
        assert res.answer == answer, (key, res.answer)
        ids[key] = res.trace_id
    await store.aflush()
    return ids


async def test_grounded_only_keeps_episodes_whose_answer_rests_on_their_own_result(store: TraceStore) -> None:
    ids = await build_grounding_run(store)
    meta = {k: (store.episode(i) or pytest.fail("missing")).meta_value() for k, i in ids.items()}
    assert [meta[k].get("evidence_correct") for k in "GUNW"] == [True, False, None, True]
    records = load_records(store, run_id=GROUNDING_RUN)
    assert {r.episode_id for r in records if r.grounded} == {ids["G"]}
    flt = RecordFilter(grounded_only=True, max_tool_share=None, dedupe=False)
    steps = dict(filter_steps(records, flt))
    assert {r.episode_id for r in steps["successful episodes"]} == {ids["G"], ids["U"], ids["N"]}
    assert {r.episode_id for r in steps["answer grounded on a result"]} == {ids["G"]}
    assert {r.episode_id for r in filter_records(records, flt)} == {ids["G"]}
    # off by default: the other filters keep the correct but ungrounded episodes
    assert ids["U"] in {r.episode_id for r in filter_records(records, RecordFilter(max_tool_share=None))}
