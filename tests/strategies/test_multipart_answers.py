"""A multi-part task (``metadata["scoring"] == "multipart"``, the ``bigbench-mix:K`` kind) keeps its
whole answer, its labelled lines, in every strategy that takes an answer out of a model's text:
``cot``, ``vote`` (part by part), ``self-refine``, ``topology`` (no consistency check between sinks
that answer different parts), ``uno``'s ensemble on the whole task, and the synthesis's rule that a
result must support the answer (one supported part is enough)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from orchestrion import GenerateConfig, Message, Pool, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion.eval.datasets.multipart import PartsScorer
from orchestrion.runtime.parts import answer_text, parse_parts, parts_block, task_answer
from orchestrion.runtime.support import supported
from orchestrion.strategies.baselines import part_majorities
from orchestrion.tools.agents import agent_tools
from tests.eval.test_multipart import HAND as MIX  # combined as bigbench-mix:3 combines them
from tests.eval.test_multipart import NUM  # three parts shaped as the loader makes them
from tests.helpers import SlowTool

RIGHT = "1: 156\n2: (B) apple\n3: fig pear"
# numbered working, then an "Answer:" line, then the labelled lines the task asks for
WORKED = f"Steps:\n1. 12*13 = 120 + 36\n2. apple is the fruit\n3. f before p\nAnswer: see below\n{RIGHT}"


async def score(answer: str) -> float:
    return (await PartsScorer()(MIX, answer)).value


def test_the_answer_of_a_multipart_task_is_its_final_run_of_labelled_lines() -> None:
    assert MIX.metadata["scoring"] == "multipart"
    assert task_answer(MIX, WORKED) == RIGHT
    assert task_answer(MIX, "Part 1:\nworking\nAnswer: 156\nPart 2: (B) apple\nPart 3: fig pear\nDone.") == \
        "Part 1:\nworking\nAnswer: 156\nPart 2: (B) apple\nPart 3: fig pear\nDone."
    assert task_answer(MIX, "no labels at all\n156") == "no labels at all\n156"  # the whole text
    assert task_answer(MIX, "  \n") is None and parts_block("plain") is None
    # any other task: what extract_answer reads, as before
    assert task_answer(NUM, WORKED) == "see below" and task_answer(NUM, "x\n156") == "156"
    assert answer_text(WORKED, multipart=False) == "see below"
    assert parse_parts(WORKED) == {1: "156", 2: "(B) apple", 3: "fig pear"}


def test_a_multipart_answer_is_supported_when_one_of_its_parts_is() -> None:
    answer = f"Final answer:\n{RIGHT}"
    assert supported(answer, ["calculator -> status=OK 156"], multipart=True)
    assert not supported(answer, ["calculator -> status=OK 156"])  # read as one answer, "1: 156"
    assert not supported(answer, ["12/01/2026", "banana"], multipart=True)
    assert supported("Answer: 156", ["156"], multipart=True)  # no labelled lines: one answer


def test_votes_are_counted_part_by_part() -> None:
    assert part_majorities(["1: 7\n2: a", "1: 8\n2: b", "1: 7\n2: B."]) == {1: ("7", 2), 2: ("b", 2)}
    assert part_majorities(["7", "8"]) == {}


async def test_cot_keeps_all_the_parts(store: TraceStore) -> None:
    model = ScriptedModel([WORKED], name="m")
    res = await solve(MIX, strategy="cot", pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store)
    assert res.status == "ok" and res.answer == RIGHT and res.meta["reasoning"] == WORKED
    assert await score(res.answer) == 1.0


def by_seed(replies: list[str]) -> Any:
    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        assert config.seed is not None
        return replies[config.seed - 100]
    return reply


async def test_vote_takes_each_parts_majority(store: TraceStore) -> None:
    # no two samples agree as a whole; each part has a majority of 3
    samples = ["1: 156\n2: (A) carrot\n3: fig pear", "1: 155\n2: (B) apple\n3: fig pear",
               "1: 156\n2: (B) apple\n3: pear fig", "1: 154\n2: (C) leek\n3: Fig pear.",
               "working\n1. x\n2. y\n\n1: 156\n2: (B) apple\n3: figs"]
    model = ScriptedModel(by_seed(samples), name="m")
    res = await solve(MIX, strategy="vote", pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store,
                      options={"seed": 100})
    assert res.status == "ok" and res.answer == RIGHT
    assert res.meta["votes"] == {"1": 3, "2": 3, "3": 3} and len(res.meta["answers"]) == 5
    assert res.meta["answers"][4] == "1: 156\n2: (B) apple\n3: figs"
    assert await score(res.answer) == 1.0


async def test_vote_without_labelled_lines_votes_on_the_whole_texts(store: TraceStore) -> None:
    model = ScriptedModel(by_seed(["156 apple", "156 apple", "other"]), name="m")
    res = await solve(MIX, strategy="vote", pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store,
                      options={"seed": 100, "k": 3})
    assert res.answer == "156 apple" and res.meta["votes"] == 2


async def test_self_refine_keeps_all_the_parts(store: TraceStore) -> None:
    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = messages[-1]["content"]
        return "Looks right.\nVERDICT: ok" if "VERDICT" in text else WORKED

    model = ScriptedModel(reply, name="m")
    res = await solve(MIX, strategy="self-refine", pool=Pool.from_models([model]), tools=ToolRegistry([]),
                      store=store)
    assert res.status == "ok" and res.answer == RIGHT and res.meta["stopped"] == "satisfied"
    assert await score(res.answer) == 1.0


def plan(*subs: tuple[str, str]) -> str:
    return json.dumps({"subtasks": [{"id": i, "task": t, "tool": "slow", "deps": []} for i, t in subs]})


@pytest.mark.parametrize("supporting", [True, False])
async def test_topology_synthesises_the_parts_once_and_keeps_them(store: TraceStore, supporting: bool) -> None:
    seen: list[str] = []

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = messages[-1]["content"]
        seen.append(text)
        if config.json_schema is not None:
            return plan(("a", "question 1"), ("b", "question 2"), ("c", "question 3"))
        if text.startswith("A team worked"):
            return f"Final answer:\n{RIGHT}"
        return "1: 1\n2: 2\n3: 3"  # the direct fallback's answer

    answers = {"question 1": "156", "question 2": "(B) apple", "question 3": "fig pear"}
    slow = SlowTool(0.0, reply=lambda t: answers[t] if supporting else "no idea")
    res = await solve(MIX, strategy="topology", pool=Pool.from_models([ScriptedModel(reply, name="o")]),
                      tools=ToolRegistry([slow, *agent_tools()]), store=store)
    # three sinks with three different answers: no reconcile loop, one synthesis
    assert res.meta["consistency"] is None and res.meta["loop_iterations"] == 0 and res.meta["converged"]
    assert not any("answers disagree" in t for t in seen)
    synthesis = next(t for t in seen if t.startswith("A team worked"))
    assert "one line per question" in synthesis and 'ending with the "Answer:" line' not in synthesis
    if supporting:  # the results support its parts: the synthesis stands, all three lines of it
        assert res.answer == f"Final answer:\n{RIGHT}" and await score(res.answer) == 1.0
    else:  # no part supported: direct's answer, whole
        assert res.answer == "1: 1\n2: 2\n3: 3"
        assert any(e.kind == "unsupported_answer" for e in store.events(res.trace_id))


async def test_uno_ensemble_on_the_whole_task_keeps_all_the_parts(store: TraceStore) -> None:
    decision = json.dumps({"thought": "t", "mode": "direct", "model": "o", "primitive": "ensemble", "subtasks": []})
    samples = iter([WORKED, "1: 155\n2: (B) apple\n3: fig pear", f"other working\n{RIGHT}"])

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        return decision if config.json_schema is not None else next(samples)

    res = await solve(MIX, strategy="uno", pool=Pool.from_models([ScriptedModel(reply, name="o")]),
                      tools=ToolRegistry(agent_tools()), store=store)
    assert res.meta["mode"] == "direct" and res.meta["pairs"][0]["primitive"] == "ensemble"
    assert res.answer == RIGHT and await score(res.answer) == 1.0
