"""Grounded synthesis: labelled results, citations replaced by the cited result, greedy by default."""

from __future__ import annotations

import json
from typing import Any

from orchestrion import Pool, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion.runtime.synthesis import Evidence, ground
from tests.helpers import CrashTool, SlowTool


def action(calls: list[dict[str, Any]], final: bool = False) -> str:
    return json.dumps({"thought": "t", "calls": calls, "final": final})


def test_citation_is_replaced_by_the_cited_result_exactly() -> None:
    text, cited = ground("The product is below.\nAnswer: [R2]", [Evidence("a", "1"), Evidence("b", "221844")])
    assert text.endswith("Answer: 221844") and cited == [2]


def test_a_label_pointing_at_the_answer_line_is_not_repeated() -> None:
    assert ground("[R1] Answer: 156", [Evidence("calculator", "156")]) == ("Answer: 156", [1])
    assert ground("[R1] Answer: [R1]", [Evidence("calculator", "156")]) == ("Answer: 156", [1, 1])


def test_a_bare_label_on_the_answer_line_is_a_citation() -> None:
    text, cited = ground("Answer: R1", [Evidence("calculator -> status=OK 156")])
    assert text == "Answer: 156" and cited == [1]


def test_unknown_labels_and_plain_answers_are_left_alone() -> None:
    assert ground("Answer: [R7]", [Evidence("x", "1")]) == ("Answer: [R7]", [])
    assert ground("Answer: 42", [Evidence("x", "1")]) == ("Answer: 42", [])


def test_a_multi_line_result_is_cited_by_its_last_line() -> None:
    reasoning = "First, 12*13.\nThat is 156.\nAnswer: 156"
    assert ground("[R1]", [Evidence("reasoner", reasoning)])[0] == "156"


def test_value_defaults_to_the_text_after_an_ok_status() -> None:
    assert Evidence("[a] task (ok): 7").citable() == "7"
    assert Evidence("calculator <- '3*4' -> status=OK 12").citable() == "12"


async def test_para_synthesis_sees_labelled_results_and_its_citation_is_grounded(store: TraceStore) -> None:
    prompts: list[str] = []
    configs: list[Any] = []

    def reply(messages: Any, config: Any) -> str:
        configs.append(config)
        if config.json_schema is not None:  # a decision: one calculation, then stop
            decided = sum(1 for c in configs if c.json_schema is not None)
            return action([{"tool": "slow", "input": "x"}]) if decided == 1 else action([], True)
        prompts.append(messages[-1]["content"])
        return "Answer: [R1]"

    orch = ScriptedModel(reply, name="orch")
    tool = SlowTool(0.0, reply=lambda t: "221844")
    res = await solve("What is 221*1004?", strategy="para", pool=Pool.from_models([orch]),
                      tools=ToolRegistry([tool]), store=store)
    assert res.status == "ok" and res.answer == "Answer: 221844"
    assert "[R1] slow <- 'x' -> status=OK 221844" in prompts[0]
    assert all(c.temperature == 0.0 for c in configs)  # decisions and synthesis are greedy by default
    answer_spans = [s for s in store.spans(res.trace_id) if s.kind == "answer"]
    assert answer_spans and json.loads(answer_spans[0].attrs)["cited"] == ["R1"]


async def test_role_temperatures_come_from_options_then_the_pool(store: TraceStore) -> None:
    temps: list[tuple[bool, float]] = []

    def reply(messages: Any, config: Any) -> str:
        temps.append((config.json_schema is not None, config.temperature))
        if config.json_schema is not None:  # one call (a result to synthesise from), then stop
            return action([{"tool": "slow", "input": "x"}], len(temps) > 1)
        return "Answer: 1"

    pool = Pool.from_models([ScriptedModel(reply, name="orch")])
    pool.config = pool.config.model_copy(
        update={"temperature": pool.config.temperature.model_copy(update={"synthesis": 0.3})}
    )
    await solve("q", strategy="para", pool=pool, tools=ToolRegistry([SlowTool(0.0, reply=lambda t: "1")]),
                store=store, options={"decision_temperature": 0.9})
    assert (True, 0.9) in temps and (False, 0.3) in temps


async def test_an_episode_without_results_answers_exactly_as_direct(store: TraceStore) -> None:
    """No evidence, no harm: para that stops at once, and para whose only call failed, answer
    with direct's prompt and decoding on the synthesizer; no [Rn] instructions appear."""
    seen: list[tuple[str, float, int]] = []

    def reply(messages: Any, config: Any) -> str:
        if config.json_schema is not None:
            return action([], True)
        seen.append((messages[-1]["content"], config.temperature, config.max_tokens))
        return "Reasoning.\nAnswer: (B)"

    pool = Pool.from_models([ScriptedModel(reply, name="orch")])
    para = await solve("Which? (A) x (B) y", strategy="para", pool=pool, tools=ToolRegistry([]), store=store)
    direct = await solve("Which? (A) x (B) y", strategy="direct", pool=pool, store=store)
    assert para.answer == direct.answer == "Reasoning.\nAnswer: (B)"
    assert len(seen) == 2 and seen[0] == seen[1] and "[R1]" not in seen[0][0]
    span = next(s for s in store.spans(para.trace_id) if s.kind == "answer")
    assert span.attrs_value()["direct"] is True


async def test_failed_calls_are_no_evidence_but_one_result_is(store: TraceStore) -> None:
    prompts: list[str] = []
    tool = "crash"

    def reply(messages: Any, config: Any) -> str:
        if config.json_schema is not None:
            decided = sum(1 for p in prompts if p == "decision")
            prompts.append("decision")
            return action([{"tool": tool, "input": "x"}]) if decided == 0 else action([], True)
        prompts.append(messages[-1]["content"])
        return "Answer: [R1]"

    res = await solve("q", strategy="para", pool=Pool.from_models([ScriptedModel(reply, name="o")]),
                      tools=ToolRegistry([CrashTool()]), store=store)
    assert res.status == "ok" and prompts[-1].startswith("Answer the question below")  # direct's prompt
    prompts.clear()
    tool = "slow"
    res = await solve("q", strategy="para", pool=Pool.from_models([ScriptedModel(reply, name="o")]),
                      tools=ToolRegistry([SlowTool(0.0, reply=lambda t: "7")]), store=store)
    assert res.answer == "Answer: 7" and "[R1]" in prompts[-1]


def test_what_supports_an_answer() -> None:
    from orchestrion.runtime.support import supported

    assert supported("Answer: 97,180", ["calculator -> status=OK 97180.0"])
    assert supported("Reasoning.\nAnswer: (A) 03/06/1973", ["(A)"])  # the option letter
    assert supported("Answer: (A) 03/06/1973", ["the date is 03/06/1973"])  # the option's text
    assert supported("Answer: apple, banana cherry", ["apple banana, cherry"])
    assert not supported("Answer: (E) 03/05/1972", ["12/01/2026", "Traceback: NameError"])
    assert not supported("Answer: 5", ["15 apples"]) and not supported("", ["x"])


async def test_a_synthesis_no_result_supports_becomes_directs_answer(store: TraceStore) -> None:
    """A program printed today's date for a question about 1973; the synthesizer picked an option no
    result supports. The answer is direct's, and the trace says why."""
    prompts: list[str] = []

    def reply(messages: Any, config: Any) -> str:
        if config.json_schema is not None:
            decided = sum(1 for p in prompts if p == "decision")
            prompts.append("decision")
            return action([{"tool": "slow", "input": "x"}]) if decided == 0 else action([], True)
        prompts.append(messages[-1]["content"])
        return "Answer: (E) 03/05/1972" if "[R1]" in prompts[-1] else "Reasoning.\nAnswer: (A) 03/06/1973"

    task = "Today is 3/5/1973. What is the date 24 hours later? (A) 03/06/1973 (E) 03/05/1972"
    res = await solve(task, strategy="para", pool=Pool.from_models([ScriptedModel(reply, name="o")]),
                      tools=ToolRegistry([SlowTool(0.0, reply=lambda t: "12/01/2026")]), store=store)
    assert res.answer == "Reasoning.\nAnswer: (A) 03/06/1973" and prompts[-1].startswith("Answer the question below")
    [event] = [e.data_value() for e in store.events(res.trace_id) if e.kind == "unsupported_answer"]
    assert event == {"answer": "Answer: (E) 03/05/1972", "reason": "no result supports the synthesis"}
    spans = [s.attrs_value() for s in store.spans(res.trace_id) if s.kind == "answer"]
    assert spans[0]["supported"] is False and spans[1]["direct"] is True
    # a result that supports the synthesis keeps it
    prompts.clear()
    res = await solve(task, strategy="para", pool=Pool.from_models([ScriptedModel(reply, name="o")]),
                      tools=ToolRegistry([SlowTool(0.0, reply=lambda t: "(E)")]), store=store)
    assert res.answer == "Answer: (E) 03/05/1972"
