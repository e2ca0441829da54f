from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from orchestrion import Pool, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion._prompts import render
from orchestrion._text import normalize
from orchestrion.models.types import Completion
from orchestrion.tools.agents import (
    CoderAgent,
    ReasonerAgent,
    SolveDirectlyAgent,
    majority,
    prints_only_literals,
    program_of,
)
from orchestrion.tools.envelope import ToolResult, ToolStatus
from orchestrion.tools.registry import Tool


def test_votes_normalise_case_punctuation_articles_and_final_full_stop() -> None:
    assert normalize("  The answer: 15. ") == normalize("the answer 15") == "answer 15"
    assert normalize("3.5") != normalize("35") and normalize("-5") != normalize("5")
    assert normalize("A") == normalize("(a)") == "a" != normalize("") != normalize("B")  # option letters stay apart


def test_majority_and_ties() -> None:
    assert majority(["15", "16", "15."]) == ("15", 2)
    assert majority(["a", "b"]) == ("a", 1)
    assert majority([]) == ("", 0)


# -- the original task beside a subtask, solve_directly, the coder's retry (scripted model, fake python tool) --

async def _episode(strategy_calls: list[dict[str, Any]], replies: Any, tools: list[Any], store: TraceStore,
                   task: str = "Sort: pear apple. End with Answer: ...") -> tuple[Any, ScriptedModel]:
    """A para episode whose first decision makes ``strategy_calls``, then stops; other calls get ``replies``."""
    decided: list[int] = []

    def reply(messages: Any, config: Any) -> str:
        if config.json_schema is not None:
            decided.append(1)
            return json.dumps({"calls": strategy_calls if len(decided) == 1 else [], "final": len(decided) > 1})
        return replies(messages, config)

    model = ScriptedModel(reply, name="m")
    res = await solve(task, strategy="para", pool=Pool.from_models([model]), tools=ToolRegistry(tools), store=store)
    return res, model


class FakePython(Tool):
    """Stands in for the sandbox: replies from a list, in call order."""

    name = "python"
    description = "fake"

    class Args(BaseModel):
        code: str
        timeout_s: float = 10

    def __init__(self, outcomes: list[ToolResult]) -> None:
        self.outcomes = outcomes
        self.codes: list[str] = []

    async def run(self, args: Any, ctx: Any, model: str | None) -> ToolResult:
        self.codes.append(args.code)
        return self.outcomes[len(self.codes) - 1]


async def test_an_agent_gets_the_original_task_verbatim_beside_a_paraphrase(store: TraceStore) -> None:
    prompts: list[str] = []

    def replies(messages: Any, config: Any) -> str:
        prompts.append(messages[-1]["content"])
        return "apple pear"

    task = "Sort: pear apple. End with Answer: ..."
    await _episode([{"tool": "reasoner", "input": "order two fruits"}], replies, [ReasonerAgent()], store, task)
    agent_prompt = next(p for p in prompts if "Subtask: order two fruits" in p)
    assert task in agent_prompt  # the paraphrase did not lose the format line
    # ... and the agent works on its own part only (with a task of several questions shown whole, it
    # answered all of them), the line coming right before its subtask
    assert agent_prompt.index(task) < agent_prompt.index("Work only on what follows") < agent_prompt.index("Subtask:")
    prompts.clear()
    await _episode([{"tool": "reasoner", "input": task}], replies, [ReasonerAgent()], store, task)
    agent_prompt = next(p for p in prompts if "Subtask:" in p)
    assert agent_prompt.count(task) == 1  # the subtask is the task: not shown twice
    assert "Work only on" not in agent_prompt


async def test_solve_directly_sends_the_unchanged_task_with_directs_prompt(store: TraceStore) -> None:
    prompts: list[str] = []

    def replies(messages: Any, config: Any) -> str:
        prompts.append(messages[-1]["content"])
        return "Answer: apple pear" if "Question:" in messages[-1]["content"] else "Answer: [R1]"

    task = "Sort: pear apple. End with Answer: ..."
    res, _ = await _episode([{"tool": "solve_directly", "input": "sort it"}], replies, [SolveDirectlyAgent()], store,
                            task)
    assert prompts[0] == render("direct", task=task) and res.answer == "Answer: apple pear"
    [span] = [s for s in store.spans(res.trace_id) if s.kind == "agent"]
    assert span.attrs_value()["tool"] == "solve_directly"


async def test_the_coder_retries_a_failed_run_once_with_its_error(store: TraceStore) -> None:
    prompts: list[list[Any]] = []

    def replies(messages: Any, config: Any) -> str:
        prompts.append(messages)
        return "```python\nprint(sorted(['pear', 'apple']))\n```"

    fake = FakePython([ToolResult(status=ToolStatus.EXEC_ERROR, error="NameError: x"),
                       ToolResult(output="['apple', 'pear']")])
    res, _ = await _episode([{"tool": "coder", "input": "sort"}], replies, [CoderAgent(), fake], store)
    assert len(fake.codes) == 2
    retry = prompts[1]
    assert retry[-1]["role"] == "user" and "NameError: x" in retry[-1]["content"] and retry[-2]["role"] == "assistant"
    [span] = [s for s in store.spans(res.trace_id) if s.kind == "agent"]
    assert span.status == "ok"


async def test_the_coder_gives_up_after_one_retry_and_an_empty_print_is_a_failure(store: TraceStore) -> None:
    fake = FakePython([ToolResult(output=""), ToolResult(output="  ")])
    res, _ = await _episode([{"tool": "coder", "input": "sort"}], lambda m, c: "print()", [CoderAgent(), fake], store)
    assert len(fake.codes) == 2
    [span] = [s for s in store.spans(res.trace_id) if s.kind == "agent"]
    assert span.status == "exec_error" and "printed nothing" in span.attrs_value()["error"]


def test_a_copied_answer_line_is_dropped_only_when_it_breaks_the_program() -> None:
    reply = "```python\nwords = ['b', 'a']\nprint(' '.join(sorted(words)))\nAnswer: a b\n```"
    assert program_of(reply) == "words = ['b', 'a']\nprint(' '.join(sorted(words)))\n\n"
    assert program_of("```python\nprint(1)\n```") == "print(1)\n"
    broken = "```python\nprint(1\nAnswer: x\n```"
    assert program_of(broken) == "print(1\nAnswer: x\n"  # still broken: left as written, its error is shown


async def test_a_program_that_printed_nothing_is_retried(store: TraceStore) -> None:
    empty = ToolResult(output="(no output: the program printed nothing; print the result)", data={"empty": True})
    fake = FakePython([empty, ToolResult(output="201250")])
    res, _ = await _episode([{"tool": "coder", "input": "350*575"}], lambda m, c: "print(350*575)",
                            [CoderAgent(), fake], store)
    assert len(fake.codes) == 2
    [span] = [s for s in store.spans(res.trace_id) if s.kind == "agent"]
    assert span.status == "ok" and span.attrs_value()["output"] == "201250"


async def test_a_program_of_comments_only_is_retried_saying_so(store: TraceStore) -> None:
    """Seen on object_counting (a tuning family): shown the task's 'End with a last line of the form
    "Answer: N"' the 1.5B replied ``# Answer: 14`` twice; the retry names what is wrong with it."""
    prompts: list[list[Any]] = []
    codes = ["```python\n# Answer: 14\n```", "```python\nitems = [1, 2, 1]\nprint(sum(items))\n```"]

    def replies(messages: Any, config: Any) -> str:
        prompts.append(messages)
        return codes[len(prompts) - 1] if len(prompts) <= len(codes) else "Answer: 4"  # then the synthesis

    empty = ToolResult(output="(no output: the program printed nothing; print the result)", data={"empty": True})
    fake = FakePython([empty, ToolResult(output="4")])
    task = "I have a lamp, two beds and a car. How many objects do I have?\n\n" \
           'End with a last line of the form "Answer: N", where N is only the number.'
    res, _ = await _episode([{"tool": "coder", "input": task}], replies, [CoderAgent(), fake], store, task)
    first = prompts[0][0]["content"]
    assert "How many objects do I have?" in first and 'form "Answer: N"' not in first  # the hint is not shown
    assert "it is only comments" in prompts[1][-1]["content"]
    [span] = [s for s in store.spans(res.trace_id) if s.kind == "agent"]
    assert span.status == "ok" and span.attrs_value()["output"] == "4"


def test_every_answer_line_hint_of_the_loaders_is_taken_off_for_the_coder() -> None:
    from orchestrion._text import without_answer_line_hint
    from orchestrion.eval.datasets._base import HINTS

    for hint in HINTS.values():
        assert without_answer_line_hint(f"Q?\nOptions:\n(A) x\n\n{hint}") == "Q?\nOptions:\n(A) x"
    assert without_answer_line_hint("Say it. Answer: 5") == "Say it. Answer: 5"  # not a closing instruction


# -- the coder reads the task's format, and learns worked programs from @train successes --

TF_TASK = "Take 3 steps. Take 2 steps back. Are you back at the start?\n\nOptions:\n(A) True\n(B) False"


def _tf(prompt: str = TF_TASK, split: str = "train") -> Any:
    from orchestrion import Task

    return Task(prompt=prompt, choices=["True", "False"], answer="False",
                metadata={"scoring": "multiple_choice", "labels": ["A", "B"], "split": split})


async def test_a_printed_answer_outside_the_options_is_retried_with_the_reason(store: TraceStore) -> None:
    prompts: list[list[Any]] = []

    def replies(messages: Any, config: Any) -> str:
        prompts.append(messages)
        return "```python\nprint(4 == 3)\n```"

    fake = FakePython([ToolResult(output="12/25/2022"), ToolResult(output="False")])
    res = await solve(_tf(), strategy="program", pool=Pool.from_models([ScriptedModel(replies, name="m")]),
                      tools=ToolRegistry([CoderAgent(), fake]), store=store)
    assert len(fake.codes) == 2 and res.answer == "Answer: False"
    retry = prompts[1][-1]["content"]
    assert "'12/25/2022'" in retry and "names none of the task's options" in retry


async def test_a_subtask_is_not_held_to_the_whole_tasks_options(store: TraceStore) -> None:
    fake = FakePython([ToolResult(output="1")])
    res, _ = await _episode([{"tool": "coder", "input": "how far from the start after 3 forward, 2 back?"}],
                            lambda m, c: "print(3 - 2)", [CoderAgent(), fake], store, TF_TASK)
    assert len(fake.codes) == 1  # '1' is a fine answer to the subtask, though no option of the task


async def _correct(task: Any, answer: str) -> dict[str, Any]:
    return {"score": 1.0, "correct": True}


async def test_programs_that_solved_similar_train_tasks_are_shown_as_worked_examples(store: TraceStore) -> None:
    seen: list[str] = []

    def replies(messages: Any, config: Any) -> str:
        seen.append(messages[0]["content"])
        return f"```python\nprint(4 == 3)  # program {len(seen)}\n```"

    pool = Pool.from_models([ScriptedModel(replies, name="m")])

    async def run(prompt: str, split: str) -> None:
        fake = FakePython([ToolResult(output="False")])
        await solve(_tf(prompt, split), strategy="program", pool=pool, tools=ToolRegistry([CoderAgent(), fake]),
                    store=store, scorer=_correct)
        await store.aflush()

    await run("Take 4 steps. Take 1 step back. Are you back at the start?\n(A) True\n(B) False", "train")
    assert "answered similar tasks" not in seen[-1]  # an empty library shows nothing
    await run("Take 5 steps. Take 5 steps back. Are you back at the start?\n(A) True\n(B) False", "train")
    await run("Take 9 steps. Take 2 steps back. Are you back at the start?\n(A) True\n(B) False", "test")
    await run("Take 7 steps. Take 3 steps back. Are you back at the start?\n(A) True\n(B) False", "train")
    shown = seen[-1]
    assert "answered similar tasks" in shown and "# program 1" in shown and "# program 2" in shown
    assert "# program 3" not in shown  # a @test episode's program never teaches
    await run("Sort these words: pear apple fig", "train")
    assert "answered similar tasks" not in seen[-1]  # another kind of task gets no template


def test_a_printed_literal_counts_as_typed_in_only_when_nothing_decides_it() -> None:
    """Seen on navigate (a tuning family): the 1.5B wrote ``print("True")`` under a comment saying
    no computation was needed, and the sum tasks' few-shot lines were copied with the answer typed in."""
    assert prints_only_literals('# the answer is given\nprint("True")')
    assert prints_only_literals("print(1203)\nprint('done')")
    assert not prints_only_literals("print(831 + 156)")
    assert not prints_only_literals("x = 0\nfor s in [7, -9]:\n    x += s\nif x == 0:\n    print('True')\n")
    assert not prints_only_literals("ok = 3 > 2\nprint('(A) True' if ok else '(B) False')")
    assert not prints_only_literals("# nothing")  # no print at all: a different problem, said elsewhere
    assert not prints_only_literals("print(1")  # does not parse: its error is shown instead
    assert not prints_only_literals("print()")  # prints nothing: said as such


async def test_a_program_that_prints_a_typed_in_value_is_retried_saying_so(store: TraceStore) -> None:
    prompts: list[list[Any]] = []
    codes = ['```python\nprint("True")\n```', "```python\nx = 7 - 9 + 2\nprint(x == 0)\n```"]

    def replies(messages: Any, config: Any) -> str:
        prompts.append(messages)
        return codes[len(prompts) - 1] if len(prompts) <= len(codes) else "Answer: True"

    fake = FakePython([ToolResult(output="True"), ToolResult(output="True")])
    res, _ = await _episode([{"tool": "coder", "input": "walk"}], replies, [CoderAgent(), fake], store)
    assert len(fake.codes) == 2 and "typed into the program" in prompts[1][-1]["content"]
    [span] = [s for s in store.spans(res.trace_id) if s.kind == "agent"]
    assert span.status == "ok"


class CutModel(ScriptedModel):
    """A scripted model whose first non-decision reply stops at the token limit."""

    async def complete(self, messages: Any, config: Any) -> Completion:
        out = await super().complete(messages, config)
        if config.json_schema is None and "cut" not in self.__dict__:
            self.cut = True
            return replace(out, finish_reason="length")
        return out


async def test_a_program_cut_off_at_the_token_limit_is_retried_saying_so(store: TraceStore) -> None:
    """Seen on navigate (a tuning family): a first program of 384 tokens of unrolled steps, cut
    mid-line, whose retry the coder's old 60 s limit never let finish."""
    prompts: list[list[Any]] = []
    decided: list[int] = []

    def reply(messages: Any, config: Any) -> str:
        if config.json_schema is not None:
            decided.append(1)
            return json.dumps({"calls": [{"tool": "coder", "input": "count"}] if len(decided) == 1 else [],
                               "final": len(decided) > 1})
        prompts.append(messages)
        return "```python\nx = 1\nprint(x" if len(prompts) == 1 else "```python\nprint(sum([1] * 3))\n```"

    fake = FakePython([ToolResult(status=ToolStatus.EXEC_ERROR, error="SyntaxError: '(' was never closed"),
                       ToolResult(output="3")])
    await solve("Sort: pear apple. End with Answer: ...", strategy="para",
                pool=Pool.from_models([CutModel(reply, name="m")]), tools=ToolRegistry([CoderAgent(), fake]),
                store=store)
    retry = prompts[1][-1]["content"]
    assert "cut off at the 384-token limit" in retry and "was never closed" in retry
    assert CoderAgent.timeout_s >= 2 * 60  # two programs fit in the coder's time on 2 cores
