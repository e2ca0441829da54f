"""Dataset loaders against the real BIG-bench and HumanEval files, the JSONL loader, fetch and the CLI.

BIG-bench's task files must have been fetched once (`orchestrion datasets fetch bigbench`, which
`make test` does); the tests that read them skip with that instruction when they are missing.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrion._errors import ConfigError
from orchestrion.cli import app
from orchestrion.eval.datasets import _fetch, fetch_dataset, list_datasets, load_dataset
from orchestrion.eval.scorers import AutoScorer, CodeExecution
from orchestrion.strategies.base import Task


@pytest.fixture(scope="module")
def bb_root() -> Path:
    root = _fetch.tasks_dir()
    if root is None:
        pytest.skip("BIG-bench task files are missing: run `orchestrion datasets fetch bigbench` once")
    return root


def raw_examples(root: Path, name: str) -> list[dict[str, object]]:
    data = json.loads((root / name / "task.json").read_text(encoding="utf-8"))
    examples = data["examples"]
    assert isinstance(examples, list)
    return examples


# --- BIG-bench, real files ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "count", "mode"),
    [
        ("arithmetic/2_digit_multiplication", 1000, "numeric"),
        ("date_understanding", 369, "multiple_choice"),
        ("navigate", 1000, "multiple_choice"),
        ("word_sorting", 1900, "exact"),
        ("object_counting", 1000, "numeric"),
        ("temporal_sequences", 1000, "multiple_choice"),
    ],
)
def test_bigbench_counts_modes_and_prompts(bb_root: Path, name: str, count: int, mode: str) -> None:
    ds = load_dataset(f"bigbench:{name}")
    raw = raw_examples(bb_root, name)
    assert (ds.kind, ds.name, len(ds.tasks), len(raw)) == ("bigbench", f"bigbench:{name}", count, count)
    assert isinstance(ds.scorer, AutoScorer)
    for task, example in zip(ds.tasks[:50], raw):
        assert str(example["input"]).strip() in task.prompt
        assert task.metadata["scoring"] == mode and task.metadata["dataset"] == f"bigbench:{name}"
        assert task.metadata["source"] == str(bb_root / name / "task.json")
        assert "Answer:" in task.prompt  # how to state the final answer


def test_bigbench_multiple_choice_task_fields(bb_root: Path) -> None:
    task = load_dataset("bigbench:date_understanding").tasks[0]
    scores = raw_examples(bb_root, "date_understanding")[0]["target_scores"]
    assert isinstance(scores, dict)
    assert sorted(task.choices or []) == sorted(scores) and task.metadata["target_scores"] == scores
    assert task.answer == max(scores, key=scores.__getitem__) and task.metadata["targets"] == [task.answer]
    for label, option in zip(task.metadata["labels"], task.choices or []):
        assert f"({label}) {option}" in task.prompt
    # options are shuffled per example, so the right one is not always (A)
    firsts = [t.choices[0] == t.answer for t in load_dataset("bigbench:date_understanding",
                                                             limit=60).tasks if t.choices]
    assert 0 < sum(firsts) < len(firsts)


def test_bigbench_exact_and_numeric_targets(bb_root: Path) -> None:
    counting = load_dataset("bigbench:object_counting", limit=1).tasks[0]
    assert counting.metadata["targets"] == raw_examples(bb_root, "object_counting")[0]["target"] == ["three", "3"]
    assert counting.choices is None and "target_scores" not in counting.metadata
    arith = load_dataset("bigbench:arithmetic/2_digit_multiplication", limit=1).tasks[0]
    assert arith.answer == "1000" and arith.choices is None  # exact_str_match task: the distractors are not listed
    sorting = load_dataset("bigbench:word_sorting", limit=1).tasks[0]
    assert (
        sorting.prompt.startswith("Sort the following words alphabetically:")
        and "List: stick gelatine" in sorting.prompt
    )


def test_bigbench_task_with_subtasks_loads_them_all(bb_root: Path) -> None:
    ds = load_dataset("bigbench:logical_deduction")
    subs = {"five_objects": 500, "seven_objects": 700, "three_objects": 300}
    assert len(ds.tasks) == sum(subs.values())
    for sub, count in subs.items():
        ids = [t.id for t in ds.tasks if t.metadata["task"] == f"logical_deduction/{sub}"]
        assert len(ids) == count and ids[0] == f"logical_deduction/{sub}/0"
    one = load_dataset("bigbench:logical_deduction/three_objects")
    assert [t.id for t in one.tasks] == [t.id for t in ds.tasks if "three_objects" in (t.id or "")]


@pytest.mark.parametrize("name", ["tracking_shuffled_objects", "elementary_math_qa", "penguins_in_a_table"])
def test_bigbench_other_named_tasks_load(bb_root: Path, name: str) -> None:
    ds = load_dataset(f"bigbench:{name}", limit=5, seed=0)
    assert len(ds.tasks) == 5 and all(t.answer and t.prompt for t in ds.tasks)


def test_ids_unique_stable_and_limit_seed_deterministic(bb_root: Path) -> None:
    full = load_dataset("bigbench:navigate")
    ids = [t.id for t in full.tasks]
    assert len(set(ids)) == len(ids) and ids == [t.id for t in load_dataset("bigbench:navigate").tasks]
    assert [t.id for t in load_dataset("bigbench:navigate", limit=3).tasks] == ids[:3]
    a = [t.id for t in load_dataset("bigbench:navigate", limit=10, seed=7).tasks]
    assert a == [t.id for t in load_dataset("bigbench:navigate", limit=10, seed=7).tasks]
    assert a != [t.id for t in load_dataset("bigbench:navigate", limit=10, seed=8).tasks] and a != ids[:10]
    same = {t.id: t for t in full.tasks}
    assert all(same[t.id].prompt == t.prompt for t in load_dataset("bigbench:navigate", limit=10, seed=7).tasks)


def test_a_mixture_interleaves_its_parts_and_scores_each_by_its_own_answers(bb_root: Path) -> None:
    spec = "bigbench:arithmetic/3_digit_multiplication@train+bigbench:sports_understanding@train"
    mix = load_dataset(spec, limit=6, seed=7)
    assert mix.kind == "mix" and mix.split == "train" and len(mix.tasks) == 6
    names = [t.metadata["task"] for t in mix.tasks]
    assert names == ["arithmetic/3_digit_multiplication", "sports_understanding"] * 3  # one of each in turn
    products = load_dataset("bigbench:arithmetic/3_digit_multiplication@train", seed=7).tasks
    assert [t.id for t in mix.tasks[::2]] == [t.id for t in products[:3]]  # each part shuffled on its own
    assert [t.id for t in load_dataset(spec, limit=10, seed=7).tasks][:6] == [t.id for t in mix.tasks]
    product, sport = mix.tasks[0], mix.tasks[1]
    scorer = AutoScorer()
    assert asyncio.run(scorer(product, f"Answer: {product.answer}")).correct
    assert sport.choices and asyncio.run(scorer(sport, f"Answer: {sport.answer}")).correct
    assert not asyncio.run(scorer(sport, f"Answer: {product.answer}")).correct
    with pytest.raises(ConfigError, match="empty part"):
        load_dataset("bigbench:navigate+ ")


def test_bigbench_by_path(bb_root: Path, tmp_path: Path) -> None:
    path = bb_root / "navigate" / "task.json"
    ds = load_dataset(f"bigbench:{path}", limit=2)
    assert [t.id for t in ds.tasks] == ["navigate/0", "navigate/1"] and ds.tasks[0].metadata["source"] == str(path)
    own = tmp_path / "mine" / "task.json"
    own.parent.mkdir()
    own.write_text(json.dumps({
        "name": "mine", "task_prefix": "Answer the riddle.", "preferred_score": "exact_str_match",
        "examples": [{"input": "What has keys but no locks?", "target": ["a piano", "piano"]}],
    }))
    task = load_dataset(f"bigbench:{own}").tasks[0]
    assert task.prompt.startswith("Answer the riddle.\n\nWhat has keys but no locks?")
    assert (task.id, task.answer, task.metadata["scoring"]) == ("mine/0", "a piano", "exact")
    assert asyncio.run(AutoScorer()(task, "Answer: Piano")).correct


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("bigbench:boolean_expressions", "programmatic"),
        ("bigbench:navigat", "did you mean navigate"),
        ("bigbench:navigate/../word_sorting", "not a BIG-bench task name"),
        ("bigbench:../etc", "no such BIG-bench task.json"),
        ("bigbench:/no/such/task.json", "no such BIG-bench task.json"),
        ("bigbench:", "unknown dataset"),
        ("mmlu", "unknown dataset 'mmlu'"),
    ],
)
def test_bigbench_errors(bb_root: Path, spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        load_dataset(spec)
    assert "\n" not in str(info.value)


def test_missing_bigbench_data_says_how_to_fetch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRION_CACHE", str(tmp_path))
    monkeypatch.setattr(_fetch, "installed_tasks_dir", lambda: None)
    with pytest.raises(ConfigError, match="run `orchestrion datasets fetch bigbench`"):
        load_dataset("bigbench:navigate")
    info = {i.name: i for i in list_datasets()}
    assert not info["bigbench"].available and "fetch bigbench" in info["bigbench"].detail


# --- fetch, on a small stand-in for the sdist -------------------------------------


def toy_sdist(path: Path) -> None:
    files = {
        "bigbench-1.0.0/setup.py": b"print('not extracted')",
        "bigbench-1.0.0/bigbench/benchmark_tasks/toy/README.md": b"# toy",
        "bigbench-1.0.0/bigbench/benchmark_tasks/toy/task.json": json.dumps(
            {"examples": [{"input": "2+2?", "target": "4"}, {"input": "sky?",
                                                             "target_scores": {"blue": 1, "green": 0}}]}
        ).encode(),
        "bigbench-1.0.0/bigbench/benchmark_tasks/group/one/task.json": json.dumps(
            {"examples": [{"input": "x", "target": "y"}]}
        ).encode(),
        "bigbench-1.0.0/bigbench/benchmark_tasks/prog/task.py": b"class T: pass",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_fetch_from_local_sdist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sdist = tmp_path / "bigbench-1.0.0.tar.gz"
    toy_sdist(sdist)
    monkeypatch.setenv("ORCHESTRION_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(_fetch.ENV_SDIST, str(sdist))
    monkeypatch.setattr(_fetch, "installed_tasks_dir", lambda: None)
    monkeypatch.setattr(_fetch, "SDIST_SHA256", hashlib.sha256(sdist.read_bytes()).hexdigest())
    seen: list[tuple[int, int]] = []
    root = fetch_dataset("bigbench", progress=lambda done, total: seen.append((done, total)))
    assert root == tmp_path / "cache" / "datasets" / "bigbench-1.0.0" / "benchmark_tasks"
    kept = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert kept == ["group/one/task.json", _fetch.PROGRAMMATIC_LIST, "toy/task.json"]
    assert (root / _fetch.PROGRAMMATIC_LIST).read_text() == "prog\n"
    assert seen and seen[-1][0] == seen[-1][1] == sdist.stat().st_size
    assert sdist.exists()  # a user's own copy is not deleted
    toy = load_dataset("bigbench:toy")
    assert [t.metadata["scoring"] for t in toy.tasks] == ["numeric", "multiple_choice"]
    assert [t.id for t in load_dataset("bigbench:group").tasks] == ["group/one/0"]
    with pytest.raises(ConfigError, match="programmatic"):
        load_dataset("bigbench:prog")
    assert fetch_dataset("bigbench") == root  # already there: nothing is downloaded again


def test_fetch_refuses_a_file_with_the_wrong_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sdist = tmp_path / "bigbench-1.0.0.tar.gz"
    toy_sdist(sdist)
    monkeypatch.setenv("ORCHESTRION_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(_fetch.ENV_SDIST, str(sdist))
    monkeypatch.setattr(_fetch, "installed_tasks_dir", lambda: None)
    with pytest.raises(ConfigError, match="sha256"):
        fetch_dataset("bigbench")
    assert not (tmp_path / "cache" / "datasets" / "bigbench-1.0.0").exists()
    with pytest.raises(ConfigError, match="nothing to fetch for 'mmlu'"):
        fetch_dataset("mmlu")


def test_when_pypi_does_not_list_the_sdist_the_error_names_the_other_ways(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PyPI's index without bigbench-1.0.0.tar.gz (as it has been since 2026-12-07): one line that
    names the two ways left, a local copy of the sdist or a checkout on PYTHONPATH."""
    index = {"files": [{"filename": "bigbench-0.0.1.tar.gz", "url": "https://example.invalid/x.tar.gz"}]}
    monkeypatch.setattr(_fetch.urllib.request, "urlopen",
                        lambda *a, **k: io.BytesIO(json.dumps(index).encode()))
    monkeypatch.setenv("ORCHESTRION_CACHE", str(tmp_path))
    monkeypatch.delenv(_fetch.ENV_SDIST, raising=False)
    monkeypatch.setattr(_fetch, "installed_tasks_dir", lambda: None)
    with pytest.raises(ConfigError) as info:
        fetch_dataset("bigbench")
    message = str(info.value)
    assert "does not list bigbench-1.0.0.tar.gz" in message and "\n" not in message
    assert _fetch.ENV_SDIST in message and "PYTHONPATH" in message
    assert not (tmp_path / "datasets" / "bigbench-1.0.0").exists()


def test_a_checkout_on_the_path_is_read_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout of google/BIG-bench on PYTHONPATH is found without importing it (its package has
    an __init__ that would import its own dependencies) and its tasks load from where they are."""
    tasks = tmp_path / "BIG-bench" / "bigbench" / "benchmark_tasks"
    (tasks / "toy").mkdir(parents=True)
    (tasks.parent / "__init__.py").write_text("raise ImportError('a checkout is never imported')\n")
    (tasks / "toy" / "task.json").write_text(json.dumps({"examples": [{"input": "2+2?", "target": "4"}]}))
    monkeypatch.setenv("ORCHESTRION_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path / "BIG-bench"))
    assert _fetch.tasks_dir() == tasks
    assert [t.id for t in load_dataset("bigbench:toy").tasks] == ["toy/0"]
    assert fetch_dataset("bigbench") == tasks  # nothing to download: the checkout is what is read


# --- HumanEval -------------------------------------------------------------------


def test_humaneval_loads_164_problems() -> None:
    ds = load_dataset("humaneval")
    assert (ds.kind, len(ds.tasks), ds.tasks[0].id) == ("humaneval", 164, "HumanEval/0")
    task = ds.tasks[0]
    assert task.metadata["entry_point"] == "has_close_elements" and task.metadata["scoring"] == "execution"
    assert task.metadata["code_prompt"] in task.prompt or task.metadata["code_prompt"].rstrip() in task.prompt
    assert "```python" in task.prompt and "def check(candidate)" in task.metadata["test"]
    assert len(load_dataset("humaneval", limit=5, seed=1).tasks) == 5


def test_humaneval_canonical_solutions_pass_and_wrong_bodies_fail() -> None:
    tasks = load_dataset("humaneval", limit=3).tasks
    scorer = CodeExecution(timeout_s=20)

    async def run() -> list[float]:
        outputs = [t.metadata["canonical_solution"] for t in tasks]  # a body only: the code prompt is prepended
        outputs.append("    return None\n")  # wrong body for the first problem
        first = tasks[0]
        outputs.append(
            f"Here it is:\n```python\n{first.metadata['code_prompt']}{first.metadata['canonical_solution']}```"
        )
        outputs.append(f"```python\ndef {first.metadata['entry_point']}(numbers, threshold):\n    return False\n```")
        graded = [tasks[0]] * 3
        scores = await asyncio.gather(*(scorer(t, o) for t, o in zip([*tasks, *graded], outputs)))
        return [s.value for s in scores]

    assert asyncio.run(run()) == [1.0, 1.0, 1.0, 0.0, 1.0, 0.0]


def test_humaneval_runaway_code_times_out() -> None:
    task = load_dataset("humaneval", limit=1).tasks[0]
    score = asyncio.run(CodeExecution(timeout_s=2)(task, "    while True:\n        pass\n"))
    assert (score.value, score.correct) == (0.0, False) and "timed out" in score.detail


# --- user JSONL -------------------------------------------------------------------


def write_lines(path: Path, *rows: object) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_jsonl_rows_and_scoring_modes(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "mine.jsonl",
        {"id": "q1", "prompt": "Capital of France?", "answer": "Paris"},
        "",
        {"id": 2, "prompt": "6*7?", "answer": 42},
        {"id": "q3", "prompt": "Pick a colour of the sky.", "answer": "blue", "choices": ["green", "blue"]},
    )
    ds = load_dataset(str(path))
    assert (ds.kind, [t.id for t in ds.tasks]) == ("jsonl", ["q1", "2", "q3"])
    assert [t.metadata["scoring"] for t in ds.tasks] == ["exact", "numeric", "multiple_choice"]
    assert "(B) blue" in ds.tasks[2].prompt and ds.tasks[2].metadata["target_scores"] == {"green": 0.0, "blue": 1.0}
    assert [t.id for t in load_dataset(f"jsonl:{path}").tasks] == ["q1", "2", "q3"]
    got = [asyncio.run(ds.scorer(t, o)).correct for t, o in zip(ds.tasks,
                                                                ["Answer: paris", "It is 42.0", "Answer: (B)"])]
    assert got == [True, True, True]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ('{"id": "a", "prompt": "p"', r"bad\.jsonl:2: not valid JSON"),
        ({"id": "a", "prompt": "p"}, r"bad\.jsonl:2: missing 'answer'"),
        ({"id": "ok", "prompt": "p", "answer": "x"}, r"bad\.jsonl:2: id 'ok' is already used on line 1"),
        ({"id": "b", "prompt": "", "answer": "x"}, r"bad\.jsonl:2: 'prompt' must be"),
        ({"id": "b", "prompt": "p", "answer": "x", "choices": ["y", "z"]}, r"bad\.jsonl:2: answer 'x' is not one of"),
        ([1, 2], r"bad\.jsonl:2: expected a JSON object"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path: Path, row: object, message: str) -> None:
    path = write_lines(tmp_path / "bad.jsonl", {"id": "ok", "prompt": "p", "answer": "x"}, row)
    with pytest.raises(ConfigError, match=message):
        load_dataset(str(path))


def test_jsonl_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_dataset(f"jsonl:{tmp_path / 'nope.jsonl'}")


# --- listing and the CLI ------------------------------------------------------------


def test_list_datasets(bb_root: Path) -> None:
    info = {i.name: i for i in list_datasets()}
    assert set(info) == {"bigbench", "humaneval", "jsonl"}
    assert info["bigbench"].available and info["bigbench"].source == str(bb_root)
    assert info["humaneval"].available and info["humaneval"].detail == "164 problems"


def test_cli_lists_and_fetches(bb_root: Path) -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["datasets"])
    assert listed.exit_code == 0, listed.output
    assert "bigbench" in listed.output and "humaneval" in listed.output and "logical_deduction" in listed.output
    fetched = runner.invoke(app, ["datasets", "fetch", "bigbench"])  # already present: no download
    assert fetched.exit_code == 0 and "ready in" in fetched.output
    bad = runner.invoke(app, ["datasets", "fetch", "mmlu"])
    assert bad.exit_code == 2 and "nothing to fetch" in bad.output


def test_task_objects_are_plain_tasks() -> None:
    assert all(isinstance(t, Task) for t in load_dataset("humaneval", limit=2).tasks)
