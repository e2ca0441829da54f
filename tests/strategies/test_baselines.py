from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from orchestrion import Budget, GenerateConfig, Message, Pool, ScriptedModel, Tool, ToolRegistry, TraceStore, solve
from orchestrion._prompts import render
from orchestrion._text import extract_answer
from orchestrion.strategies.baselines import critique_satisfied
from tests.helpers import TextArgs, act


def prompt_of(messages: Sequence[Message]) -> str:
    return messages[-1]["content"]


# -- cot ------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("Step 1: 7+8\nStep 2: that is 15\nAnswer: 15", "15"),
    ("Answer: 15\nI hope this helps!", "15"),               # the labelled line wins over a trailing remark
    ("first\n**Final answer:** 42.\n", "42"),
    ("The answer is 7", "7"),
    ("Answer: 3\nlater I changed my mind\nANSWER = 4", "4"),  # the last labelled line
    ("no label here\n  just the last line  \n\n", "just the last line"),
    ("Answers vary by region\nParis", "Paris"),             # 'Answers' is not a label
    ("reasoning\nAnswer:", "Answer:"),                      # empty label falls back to the last line
    ("7 + 8 = 15\n\nFinal Answer: Answer: 15", "15"),        # repeated labels
    ("So, the answer is 61.\nmore rambling", "61"),          # a label inside a line
    ("So answer: 7 + 8 = 9", "7 + 8 = 9"),
    ('7 + 8 = 15\n\nThe answer is "15".', "15"),              # quotes and full stop trimmed
    ("the answer-based approach\nresult 3", "result 3"),      # 'answer-' is not a label
    ("3.5 is the ratio\nAnswer: 3.5", "3.5"),
    ("", None),                                             # no answer at all
])
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


async def test_cot_answers_with_the_last_line_and_keeps_the_reasoning(store: TraceStore) -> None:
    model = ScriptedModel(["Step 1: 7+8.\nStep 2: that makes 15.\nAnswer: 15"], name="m")
    res = await solve("What is 7+8?", strategy="cot", pool=Pool.from_models([model]), tools=ToolRegistry([]),
                      store=store)
    assert res.status == "ok" and res.answer == "15"
    assert res.meta["reasoning"].startswith("Step 1") and res.meta["model"] == "m"
    assert "step" in prompt_of(model.calls[0]).lower() and "What is 7+8?" in prompt_of(model.calls[0])


async def test_cot_runs_on_the_model_option(store: TraceStore) -> None:
    a, b = ScriptedModel(["Answer: a"], name="a"), ScriptedModel(["Answer: b"], name="b")
    res = await solve("q", strategy="cot", pool=Pool.from_models([a, b]), tools=ToolRegistry([]), store=store,
                      options={"model": "b"})
    assert res.answer == "b" and not a.calls and res.meta["model"] == "b"


# -- vote -----------------------------------------------------------------------------

def by_seed(replies: list[str]) -> Any:
    """A reply function keyed on the sample's seed, so replies follow sample order, not call order."""
    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        assert config.seed is not None
        return replies[config.seed - 100]
    return reply


async def test_vote_takes_the_majority_after_normalisation(store: TraceStore) -> None:
    model = ScriptedModel(by_seed(["...\nAnswer: 15", "Answer: 14", "so\nanswer: 15.", "Answer: **15**", "Answer: 14"]),
                          name="m", delay_s=0.05)
    res = await solve("What is 7+8?", strategy="vote", pool=Pool.from_models([model]), tools=ToolRegistry([]),
                      store=store, options={"seed": 100})
    assert res.status == "ok" and res.answer == "15"
    assert len(model.calls) == 5                      # k defaults to 5
    assert model.max_active == 5                      # the samples ran concurrently
    assert res.meta["votes"] == 3 and res.meta["k"] == 5
    assert res.meta["distribution"] == {"15": 3, "14": 2}
    assert res.meta["answers"] == ["15", "14", "15", "15", "14"]


@pytest.mark.parametrize(("replies", "winner"), [
    (["Answer: 14", "Answer: 15", "Answer: 14", "Answer: 15"], "14"),
    (["Answer: 15", "Answer: 15", "Answer: 14", "Answer: 14"], "15"),
    (["Answer: Paris", "Answer: paris", "Answer: Lyon", "Answer: LYON"], "Paris"),  # first seen spelling
])
async def test_vote_ties_go_to_the_first_sampled_answer(store: TraceStore, replies: list[str], winner: str) -> None:
    model = ScriptedModel(by_seed(replies), name="m")
    res = await solve("q", strategy="vote", pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store,
                      options={"k": 4, "seed": 100})
    assert res.answer == winner and res.meta["votes"] == 2 and len(model.calls) == 4


async def test_vote_serial_variant(store: TraceStore) -> None:
    model = ScriptedModel(["Answer: 1"], name="m", delay_s=0.02)
    res = await solve("q", strategy="vote", pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store,
                      options={"k": 3, "max_parallel": 1})
    assert res.answer == "1" and model.max_active == 1 and len(model.calls) == 3


# -- self-refine ------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "ok"), [
    ("Looks right.\nVERDICT: ok", True),
    ("verdict: correct", True),
    ("The sum is wrong.\nVERDICT: revise", False),
    ("VERDICT: incorrect", False),
    ("VERDICT: not ok", False),
    ("VERDICT: ok\nOn second thought:\nVERDICT: revise", False),  # the last verdict counts
    ("This is fine and correct.", False),                        # no verdict line: not satisfied
])
def test_critique_satisfied(text: str, ok: bool) -> None:
    assert critique_satisfied(text) is ok


def refine_model(critiques: list[str]) -> ScriptedModel:
    """Drafts 'Answer: 15', refinements count up from 16, critiques come from the list (last repeats)."""
    state = {"critique": 0, "refine": 0}

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = prompt_of(messages)
        if text.startswith("Check the proposed answer"):
            state["critique"] += 1
            return critiques[min(state["critique"], len(critiques)) - 1]
        if text.startswith("Improve the answer"):
            state["refine"] += 1
            return f"fixed\nAnswer: {15 + state['refine']}"
        return "draft\nAnswer: 15"
    return ScriptedModel(reply, name="m")


@pytest.mark.parametrize("max_iters", [1, 3])
async def test_self_refine_ends_after_max_iters_when_never_satisfied(store: TraceStore, max_iters: int) -> None:
    model = refine_model(["Wrong sum.\nVERDICT: revise"])
    res = await solve("What is 7+8?", strategy="self-refine", pool=Pool.from_models([model]), tools=ToolRegistry([]),
                      store=store, options={"max_iters": max_iters})
    assert res.status == "ok"
    assert len(model.calls) == 1 + 2 * max_iters               # draft + (critique, refine) per iteration
    assert res.meta["refinements"] == max_iters and res.meta["stopped"] == "max_iters"
    assert res.answer == str(15 + max_iters)                   # the last refinement's answer line
    # each critique saw the latest draft, each refinement saw the feedback
    assert "Answer: 15" in prompt_of(model.calls[1])
    assert "Wrong sum." in prompt_of(model.calls[2])


async def test_self_refine_default_is_three_iterations(store: TraceStore) -> None:
    model = refine_model(["VERDICT: revise"])
    res = await solve("q", strategy="self-refine", pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store)
    assert len(model.calls) == 7 and res.meta["refinements"] == 3


async def test_self_refine_stops_as_soon_as_the_critique_is_satisfied(store: TraceStore) -> None:
    model = refine_model(["VERDICT: ok"])
    res = await solve("q", strategy="self-refine", pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store)
    assert len(model.calls) == 2 and res.answer == "15"
    assert res.meta["stopped"] == "satisfied" and res.meta["refinements"] == 0

    model = refine_model(["Off by one.\nVERDICT: revise", "VERDICT: ok"])
    res = await solve("q", strategy="self-refine", pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store)
    assert len(model.calls) == 4 and res.answer == "16"
    assert res.meta["stopped"] == "satisfied" and res.meta["refinements"] == 1
    assert "Answer: 16" in prompt_of(model.calls[3])          # the second critique read the refined draft


async def test_self_refine_budget_stop_keeps_the_latest_draft(store: TraceStore) -> None:
    model = refine_model(["VERDICT: revise"])
    res = await solve("q", strategy="self-refine", pool=Pool.from_models([model]), tools=ToolRegistry([]),
                      store=store, budget=Budget(steps=3))
    assert res.status == "budget_exceeded" and res.answer == "16" and res.meta["refinements"] == 1
    assert store.episode(res.trace_id).finished == 1  # type: ignore[union-attr]


# -- react ------------------------------------------------------------------------------

class Lookup(Tool):
    name = "lookup"
    description = "looks a fact up"
    Args = TextArgs

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def run(self, args: Any, ctx: Any, model: str | None) -> str:
        self.seen.append(args.text)
        return f"{args.text} = 5"


class Echo(Tool):
    name = "echo"
    description = "repeats its input"
    Args = TextArgs

    async def run(self, args: Any, ctx: Any, model: str | None) -> str:
        return args.text



async def test_react_uses_tools_and_finishes(store: TraceStore) -> None:
    lookup = Lookup()
    model = ScriptedModel([act(action="tool", tool="lookup", input="x"), act(action="finish", answer="x is 5",
                                                                             evidence="x = 5")],
                          name="m")
    res = await solve("What is x?", strategy="react", pool=Pool.from_models([model]),
                      tools=ToolRegistry([lookup, Echo()]), store=store)
    assert res.status == "ok" and res.answer == "x is 5"
    assert lookup.seen == ["x"]
    assert res.meta == {"model": "m", "ended": "finish", "steps": 2, "tool_calls": 1, "synthesized": False}
    system = model.calls[0][0]["content"]
    assert "What is x?" in system and "lookup(" in system and "echo(" in system   # the task, and every tool
    assert "Result of lookup: status=OK x = 5" in model.calls[1][-1]["content"]
    kinds = [s.kind for s in store.spans(res.trace_id)]
    assert "subagent" in kinds and "tool" in kinds


async def test_react_exhausted_agent_still_yields_an_answer(store: TraceStore) -> None:
    lookup = Lookup()

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is not None:   # an agent step: it never finishes
            return act(action="tool", tool="lookup", input="y")
        return "From the lookups, y is 5.\n5"   # the synthesis call

    model = ScriptedModel(reply, name="m")
    res = await solve("What is y?", strategy="react", pool=Pool.from_models([model]), tools=ToolRegistry([lookup]),
                      store=store, options={"max_steps": 3})
    assert res.status == "ok" and res.answer.endswith("5")
    assert len(lookup.seen) == 3
    assert res.meta["ended"] == "exhausted" and res.meta["steps"] == 3 and res.meta["synthesized"] is True
    synthesis_prompt = prompt_of(model.calls[-1])
    assert "What is y?" in synthesis_prompt and "Result of lookup: status=OK y = 5" in synthesis_prompt


async def test_react_stop_is_synthesised_with_the_agents_message(store: TraceStore) -> None:
    model = ScriptedModel([act(action="stop", status="cannot compute", evidence="no tool fits"), "best guess: 3"],
                          name="m")
    res = await solve("q", strategy="react", pool=Pool.from_models([model]), tools=ToolRegistry([Echo()]), store=store)
    assert res.status == "ok" and res.answer == "best guess: 3"
    assert res.meta["ended"] == "stop" and res.meta["synthesized"] is True
    # the agent stopped without any tool result: the answer is direct's, not a synthesis of its message
    assert prompt_of(model.calls[-1]) == render("direct", task="q")


async def test_react_without_any_answer_is_marked(store: TraceStore) -> None:
    model = ScriptedModel(lambda m, c: act(action="stop", status="no") if c.json_schema else "  ", name="m")
    res = await solve("q", strategy="react", pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store)
    assert res.status == "no_answer" and res.answer == ""


@pytest.mark.parametrize("strategy", ["direct", "cot"])
async def test_seed_option_reaches_the_model(strategy: str, store: TraceStore) -> None:
    seen: list[int | None] = []

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        seen.append(config.seed)
        return "The final answer is 4."

    pool = Pool.from_models([ScriptedModel(reply, name="m")])
    await solve("2+2?", strategy=strategy, pool=pool, store=store, options={"seed": 11})
    await solve("2+2?", strategy=strategy, pool=pool, store=store)
    assert seen == [11, None]


async def test_program_answers_with_what_the_program_printed_else_as_direct(store: TraceStore) -> None:
    from orchestrion.tools.agents import CoderAgent
    from orchestrion.tools.envelope import ToolResult, ToolStatus
    from tests.tools.test_agents import FakePython

    coder = ScriptedModel(lambda m, c: "```python\nprint(' '.join(sorted(['pear', 'apple'])))\n```", name="m")
    fake = FakePython([ToolResult(output="sorting...\napple pear\n")])
    res = await solve("Sort: pear apple", strategy="program", pool=Pool.from_models([coder]),
                      tools=ToolRegistry([CoderAgent(), fake]), store=store)
    assert res.answer == "Answer: apple pear" and res.meta["program_ok"] is True  # the last printed line, as is
    failing = FakePython([ToolResult(status=ToolStatus.EXEC_ERROR, error="boom")] * 2)
    model = ScriptedModel(lambda m, c: "Answer: pear" if "Question:" in m[-1]["content"] else "print(1)", name="m")
    res = await solve("Sort: pear apple", strategy="program", pool=Pool.from_models([model]),
                      tools=ToolRegistry([CoderAgent(), failing]), store=store)
    assert res.answer == "Answer: pear" and res.meta["program_ok"] is False  # no result: direct's answer
    assert model.calls[-1][-1]["content"] == render("direct", task="Sort: pear apple")
