"""The multi-part dataset kind ``bigbench-mix:K``: K questions of K families in one prompt, drawn
from each family's own side of the split, deterministic, scored per part and all-parts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from orchestrion import ConfigError, Pool, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion.eval.datasets import load_dataset, split_of
from orchestrion.eval.datasets.multipart import (
    DEFAULT_FAMILIES,
    PartsScorer,
    capacity,
    combine,
    parse_parts,
    parse_spec,
    part_ids,
)
from orchestrion.eval.runner import EvalConfig, run_eval
from orchestrion.models.types import GenerateConfig, Message
from orchestrion.runtime.context import RunContext
from orchestrion.runtime.fit import AnswerFormat
from orchestrion.runtime.types import Answer, Task
from orchestrion.strategies.base import Strategy
from tests.bench import load_bench
from tests.helpers import needs_bigbench

# three parts shaped as the BIG-bench loader makes them: numeric, multiple choice, exact match
NUM = Task(prompt="What is 12 times 13?\n\nEnd with a last line of the form \"Answer: N\", where N is only the number.",
           id="arithmetic/x/1", answer="156", metadata={"scoring": "numeric", "targets": ["156"]})
MC = Task(prompt="Which is a fruit?\n\nOptions:\n(A) carrot\n(B) apple\n(C) leek", id="fruits/7", answer="apple",
          choices=["carrot", "apple", "leek"],
          metadata={"scoring": "multiple_choice", "labels": ["A", "B", "C"], "targets": ["apple"],
                    "target_scores": {"carrot": 0.0, "apple": 1.0, "leek": 0.0}})
EXACT = Task(prompt="Sort the words: pear fig", id="word_sorting/3", answer="fig pear",
             metadata={"scoring": "exact", "targets": ["fig pear"]})
HAND = combine("bigbench-mix:3@test", [NUM, MC, EXACT], ["arithmetic/x", "fruits", "word_sorting"], "test")


def test_the_default_families_are_the_tuning_families_of_the_bench() -> None:
    assert list(DEFAULT_FAMILIES) == load_bench("families").TUNING


@pytest.mark.parametrize(("ref", "message"), [
    ("1", "2 or more"), ("x", "whole number"), ("9", "9 different families, 8 given"),
    ("2:navigate,navigate", "named twice"), ("3:navigate,word_sorting", "3 different families, 2 given"),
])
def test_a_bad_spec_says_what_is_wrong(ref: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_spec(ref)


def test_the_example_keeps_each_parts_reference_and_rule_and_its_id_names_the_parts() -> None:
    assert HAND.id == "bigbench-mix:arithmetic/x/1,fruits/7,word_sorting/3"
    assert part_ids(str(HAND.id)) == ["arithmetic/x/1", "fruits/7", "word_sorting/3"]
    assert part_ids("arithmetic/x/1") is None
    parts = HAND.metadata["parts"]
    assert [p["scoring"] for p in parts] == ["numeric", "multiple_choice", "exact"]
    assert parts[1]["target_scores"]["apple"] == 1.0 and parts[1]["choices"] == ["carrot", "apple", "leek"]
    assert HAND.answer == "1: 156\n2: (B) apple\n3: fig pear"
    assert HAND.metadata["scoring"] == "multipart" and HAND.choices is None
    # each question once, numbered; its own "Answer:" hint gives way to the numbered last lines
    assert "Question 1 (answer line: a number only)\nWhat is 12 times 13?" in HAND.prompt
    assert "Question 2 (answer line: one of its options" in HAND.prompt and "(B) apple" in HAND.prompt
    assert 'Answer: N' not in HAND.prompt and HAND.prompt.endswith(
        "1: <your answer to question 1>\n2: <your answer to question 2>\n3: <your answer to question 3>")


@pytest.mark.parametrize(("output", "expected"), [
    ("1: 156\n2: (B) apple\n3: fig pear", {1: "156", 2: "(B) apple", 3: "fig pear"}),
    ("1. 156\n2. B\n3. fig pear", {1: "156", 2: "B", 3: "fig pear"}),
    ("(1) 156\n(2) apple\n(3) fig pear", {1: "156", 2: "apple", 3: "fig pear"}),
    ("Part 1: 156\nPart 2: (B)\nPart 3: fig pear", {1: "156", 2: "(B)", 3: "fig pear"}),
    ("**1:** 156\n- 2) apple\nQuestion 3 - fig pear", {1: "156", 2: "apple", 3: "fig pear"}),
    ("**Question 1:** 156\n**Question 2:** apple\n**Question 3:** fig pear\n\nHope this helps!",
     {1: "156", 2: "apple", 3: "fig pear"}),
    # numbered steps of the working before the answer lines do not count
    ("Steps:\n1. 12*13 = 12*10 + 12*3\n2. = 120 + 36\n3. done\n\n1: 156\n2: (B) apple\n3: fig pear",
     {1: "156", 2: "(B) apple", 3: "fig pear"}),
    # one section per part, the answer marked under each; nested steps inside a section
    ("Part 1:\n1. 12*13\nAnswer: 156\nPart 2:\nThe fruit.\nAnswer: (B) apple\nPart 3:\nfig pear",
     {1: "156", 2: "(B) apple", 3: "fig pear"}),
    ("1: 156\n3: fig pear", {1: "156", 3: "fig pear"}),  # a part left out
    ("1.5 is close\n2 - 1 = 1\nThe answer is 156.", {}),  # a decimal and a sum are no labels
    ("1: 156\n2: apple\n3: fig pear\n4: extra\n12: no", {1: "156", 2: "apple", 3: "fig pear"}),
])
def test_the_answer_lines_are_read_in_their_common_spellings(output: str, expected: dict[int, str]) -> None:
    assert parse_parts(output, 3) == expected


@pytest.mark.parametrize(("output", "scores", "all_right"), [
    ("Working...\n1: 156\n2: (B) apple\n3: fig pear", [1.0, 1.0, 1.0], True),
    ("1: 156.0\n2: B\n3: Fig, pear.", [1.0, 1.0, 1.0], True),  # by value, by letter, after normalising
    ("1: 155\n2: (B) apple\n3: fig pear", [0.0, 1.0, 1.0], False),
    ("1: 156\n3: pear fig", [1.0, 0.0, 0.0], False),  # part 2 missing scores 0
    ("156\napple\nfig pear", [0.0, 0.0, 0.0], False),  # no numbered lines: no part is read
])
async def test_each_part_is_scored_by_its_own_rule_and_the_example_by_both_means(
        output: str, scores: list[float], all_right: bool) -> None:
    score = await PartsScorer()(HAND, output)
    meta = score.to_meta()
    assert [p["score"] for p in meta["parts"]] == scores
    assert meta["score"] == pytest.approx(sum(scores) / 3) == meta["part_score"]
    assert meta["correct"] is all_right and meta["all_parts"] is all_right
    assert meta["parts_right"] == sum(1 for s in scores if s == 1.0)
    assert [p["id"] for p in meta["parts"]] == ["arithmetic/x/1", "fruits/7", "word_sorting/3"]


async def test_the_scorer_grades_any_other_task_as_the_auto_scorer_does() -> None:
    assert (await PartsScorer()(MC, "Answer: (B)")).correct
    assert not (await PartsScorer()(NUM, "Answer: 155")).correct


def test_a_multipart_task_has_no_single_answer_format() -> None:
    # one options format would judge the whole answer by its multiple-choice part alone
    assert AnswerFormat.of(HAND) is None


class Lines(Strategy):
    """Answers with numbered lines, whatever the task."""

    name = "multipart-lines-test"
    summary = "test"

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        return Answer("1: 156\n2: (B) apple\n3: fig pear")


async def test_a_multipart_answer_is_not_replaced_as_out_of_format(store: TraceStore) -> None:
    model = ScriptedModel(lambda messages, config: "Answer: (A) carrot", name="m")
    res = await solve(HAND, strategy=Lines(), pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store)
    await store.aflush()
    assert res.answer == "1: 156\n2: (B) apple\n3: fig pear" and "out_of_format" not in res.meta
    assert not [e for e in store.events(res.trace_id) if e.kind == "answer_out_of_format"]


def test_capacity_uses_every_family_equally() -> None:
    assert capacity([48, 56, 300], 2) == 72 and capacity([48] * 8, 3) == 128 and capacity([], 3) == 0


def _ids(spec: str, **kw: object) -> list[str]:
    return [str(t.id) for t in load_dataset(spec, **kw).tasks]  # type: ignore[arg-type]


@needs_bigbench
def test_examples_are_deterministic_and_the_first_n_do_not_depend_on_the_limit() -> None:
    every = load_dataset("bigbench-mix:3@test")
    assert [t.model_dump() for t in every.tasks] == [t.model_dump() for t in load_dataset("bigbench-mix:3@test").tasks]
    assert _ids("bigbench-mix:3@test", limit=5) == [str(t.id) for t in every.tasks[:5]]
    assert _ids("bigbench-mix:3@test", limit=5, seed=0) == _ids("bigbench-mix:3@test", limit=5)  # seed 0 is the default
    assert _ids("bigbench-mix:3@test", limit=5, seed=1) != _ids("bigbench-mix:3@test", limit=5)
    # stable across processes and versions: the seeds are strings, not Python's salted hash
    assert every.tasks[0].id == ("bigbench-mix:penguins_in_a_table/145,arithmetic/3_digit_multiplication/427,"
                                 "word_sorting/1207")
    assert _ids("bigbench-mix:3@test", limit=0) == []
    with pytest.raises(ConfigError, match="0 or more"):
        load_dataset("bigbench-mix:3@test", limit=-1)


@needs_bigbench
def test_each_example_has_k_families_and_every_family_and_question_is_used_fairly() -> None:
    for k in (3, 4):
        tasks = load_dataset(f"bigbench-mix:{k}@test").tasks
        assert len(tasks) == 48 * 8 // k  # penguins_in_a_table has 48 questions on @test, the fewest
        for t in tasks:
            fams = t.metadata["families"]
            assert len(fams) == k == len(set(fams)) == len(t.metadata["parts"])
            assert [p["family"] for p in t.metadata["parts"]] == fams
        counts = Counter(f for t in tasks for f in t.metadata["families"])
        assert set(counts) == set(DEFAULT_FAMILIES) and max(counts.values()) - min(counts.values()) <= 1
        questions = [q for t in tasks for q in part_ids(str(t.id)) or []]
        assert len(questions) == len(set(questions)) == len(tasks) * k


@needs_bigbench
def test_train_and_test_examples_hold_only_their_sides_questions() -> None:
    sides = {}
    for side in ("train", "test"):
        tasks = load_dataset(f"bigbench-mix:3@{side}").tasks
        assert all(t.metadata["split"] == side and split_of(str(t.id)) == side for t in tasks)
        sides[side] = {q for t in tasks for q in part_ids(str(t.id)) or []}
        assert all(split_of(q) == side for q in sides[side])
    assert sides["train"] and sides["test"] and not sides["train"] & sides["test"]
    # without a side: an example is on the test side when any of its questions is
    for t in load_dataset("bigbench-mix:3", limit=30).tasks:
        assert split_of(str(t.id)) == ("test" if any(split_of(q) == "test" for q in part_ids(str(t.id)) or [])
                                       else "train")


@needs_bigbench
def test_named_families_and_a_mixture_with_another_dataset() -> None:
    tasks = load_dataset("bigbench-mix:2:navigate,word_sorting,object_counting@train", limit=6).tasks
    assert len(tasks) == 6 and all(set(t.metadata["families"]) <= {"navigate", "word_sorting", "object_counting"}
                                   for t in tasks)
    mixed = load_dataset("bigbench-mix:2@test+bigbench:navigate@test", limit=4)
    assert isinstance(mixed.scorer, PartsScorer) and mixed.split == "test"
    assert [t.metadata["scoring"] == "multipart" for t in mixed.tasks] == [True, False, True, False]
    with pytest.raises(ConfigError, match="unknown BIG-bench task"):
        load_dataset("bigbench-mix:2:navigate,no_such_family")


def _answer_key(tasks: list[Task]) -> ScriptedModel:
    """A model that answers each example with its reference lines, part 1 wrong on every second one."""
    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = "\n".join(m["content"] for m in messages)
        for i, t in enumerate(tasks):
            if t.prompt in text:
                lines = str(t.answer).splitlines()
                return "\n".join(["1: none", *lines[1:]] if i % 2 else lines)
        return "no idea"
    return ScriptedModel(reply, name="m")


@needs_bigbench
async def test_an_eval_run_records_per_part_and_all_parts_scores_and_resumes(store: TraceStore) -> None:
    spec = "bigbench-mix:3@test"
    tasks = load_dataset(spec, limit=2).tasks
    config = EvalConfig(dataset=spec, limit=2, strategies=["direct"])
    run = await run_eval(config, store, pool=lambda: Pool.from_models([_answer_key(tasks)]))
    eps = {e.task_id: e.meta_value() for e in store.episodes(run_id=run.run_id)}
    assert list(eps) == [t.id for t in tasks]
    first, second = (eps[str(t.id)] for t in tasks)
    assert first["score"] == 1.0 and first["all_parts"] is True and first["parts_right"] == 3
    assert second["score"] == pytest.approx(2 / 3) and second["correct"] is False and second["parts_right"] == 2
    assert [p["score"] for p in second["parts"]] == [0.0, 1.0, 1.0]
    again = await run_eval(config, store, resume=run.run_id, pool=lambda: Pool.from_models([_answer_key(tasks)]))
    assert again.run_id == run.run_id and len(store.episodes(run_id=run.run_id)) == 2


@needs_bigbench
@pytest.mark.integration
def test_the_cli_runs_a_multipart_eval_on_the_tiny_pool(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from orchestrion.cli import app

    db = tmp_path / "t.db"
    res = CliRunner().invoke(app, ["eval", "--dataset", "bigbench-mix:3@test", "--limit", "2",
                                   "--strategies", "direct", "--pool", "tiny", "--db", str(db)])
    assert res.exit_code == 0, res.output
    store = TraceStore(db)
    try:
        eps = store.episodes()
        assert len(eps) == 2 and all(e.finished == 1 for e in eps)
        for ep in eps:
            meta = ep.meta_value()
            assert len(meta["parts"]) == 3 and isinstance(meta["all_parts"], bool)
            assert meta["score"] == pytest.approx(sum(p["score"] for p in meta["parts"]) / 3)
    finally:
        store.close()
