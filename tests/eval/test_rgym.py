"""reasoning-gym families as a dataset: stable generated tasks, the split, and grading by the family's checker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from orchestrion import ConfigError
from orchestrion.eval.datasets import list_datasets, load_dataset, split_of
from orchestrion.eval.datasets.rgym import SIZE


def _score(spec: str, index: int, output: str) -> tuple[bool, float]:
    dataset = load_dataset(spec)
    task = dataset.tasks[index]
    score = asyncio.run(dataset.scorer(task, output))
    return score.correct, score.value


def test_a_family_loads_with_stable_ids_and_a_numeric_mode() -> None:
    tasks = load_dataset("reasoning-gym:gcd").tasks
    assert len(tasks) == SIZE
    assert [t.id for t in tasks[:2]] == ["reasoning-gym/gcd/0", "reasoning-gym/gcd/1"]
    first = tasks[0]
    assert first.metadata["scoring"] == "numeric" and first.metadata["family"] == "gcd"
    assert "Greatest Common Divisor" in first.prompt and first.prompt.rstrip().endswith("only the number.")
    assert first.answer is not None and first.answer.isdigit()


def test_generation_is_the_same_in_another_process() -> None:
    """The split and resumed runs rest on ids naming the same questions in every process."""
    code = ("from orchestrion.eval.datasets import load_dataset; "
            "print([(t.prompt, t.answer) for t in load_dataset('reasoning-gym:chain_sum').tasks[:5]])")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert runs[0] == runs[1]
    here = [(t.prompt, t.answer) for t in load_dataset("reasoning-gym:chain_sum").tasks[:5]]
    assert runs[0].strip() == str(here)


def test_the_split_keeps_each_side_and_covers_the_family() -> None:
    train = load_dataset("reasoning-gym:gcd@train").tasks
    test = load_dataset("reasoning-gym:gcd@test").tasks
    assert len(train) + len(test) == SIZE and train and test
    assert all(split_of(t.id or "") == "train" and t.metadata["split"] == "train" for t in train)
    assert not {t.id for t in train} & {t.id for t in test}


def test_the_reference_and_its_number_forms_are_right_and_a_wrong_number_is_not() -> None:
    reference = load_dataset("reasoning-gym:gcd").tasks[0].answer
    assert _score("reasoning-gym:gcd", 0, f"Answer: {reference}") == (True, 1.0)
    assert _score("reasoning-gym:gcd", 0, f"so it is {reference}.0") == (True, 1.0)
    assert _score("reasoning-gym:gcd", 0, f"Answer: {int(str(reference)) + 1}") == (False, 0.0)


def test_the_family_checker_accepts_another_valid_answer_and_partial_marks_count_as_wrong() -> None:
    """puzzle24 accepts any expression of the four numbers that makes 24; its checker gives 0.01 to a
    wrong one, which must not count."""
    tasks = load_dataset("reasoning-gym:puzzle24").tasks
    reordered, where = None, -1
    for index, task in enumerate(tasks):  # a reference written with + alone stays valid reordered
        ref = str(task.answer)
        if set(ref) <= set("0123456789+ "):
            reordered, where = " + ".join(reversed([p.strip() for p in ref.split("+")])), index
            break
    assert reordered is not None and reordered != tasks[where].answer
    assert _score("reasoning-gym:puzzle24", where, f"Answer: {reordered}") == (True, 1.0)
    assert _score("reasoning-gym:puzzle24", where, "Answer: 1 + 1") == (False, 0.0)
    assert _score("reasoning-gym:puzzle24", where, "no idea") == (False, 0.0)


def test_an_unknown_family_is_one_clear_error_with_close_names() -> None:
    with pytest.raises(ConfigError, match="unknown reasoning-gym family 'gdc'.*did you mean gcd"):
        load_dataset("reasoning-gym:gdc")


def test_the_dataset_list_shows_the_package() -> None:
    info = next(i for i in list_datasets() if i.name == "reasoning-gym")
    assert info.available and "generated families" in info.detail


def test_a_reasoning_gym_mix_holds_one_side_and_grades_each_part_by_its_family() -> None:
    dataset = load_dataset("reasoning-gym-mix:2:puzzle24,chain_sum@test", limit=4)
    assert len(dataset.tasks) == 4
    for task in dataset.tasks:
        assert task.id is not None and task.id.startswith("reasoning-gym-mix:")
        assert split_of(task.id) == "test" and len(task.metadata["parts"]) == 2
    task = next(t for t in dataset.tasks if t.metadata["families"][0] == "puzzle24")
    puzzle = str(task.metadata["parts"][0]["answer"])
    other = str(task.metadata["parts"][1]["answer"])
    assert asyncio.run(dataset.scorer(task, f"1: {puzzle}\n2: {other}")).correct
    assert set(puzzle) <= set("0123456789+ ")  # this sample's first puzzle is a plain sum
    reordered = " + ".join(reversed([p.strip() for p in puzzle.split("+")]))  # still valid: the checker knows
    assert asyncio.run(dataset.scorer(task, f"1: {reordered}\n2: {other}")).correct
    half = asyncio.run(dataset.scorer(task, f"1: 1 + 1\n2: {other}"))
    assert (half.correct, half.value) == (False, 0.5)


def test_a_reasoning_gym_mix_must_name_its_families() -> None:
    with pytest.raises(ConfigError, match="name the families"):
        load_dataset("reasoning-gym-mix:2")


def test_a_family_that_follows_hash_order_needs_a_fixed_hash_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    with pytest.raises(ConfigError, match="PYTHONHASHSEED=0"):
        load_dataset("reasoning-gym:ransom_note")
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    assert len(load_dataset("reasoning-gym:ransom_note").tasks) == SIZE
