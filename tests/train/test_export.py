"""Export for TRL and verl: exact loss masks on the real tokenizer, round trips through
`datasets` and `trl.SFTTrainer`, the `orchestrion train export` command, and (integration)
token ids recorded by the embedded model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrion import Budget, Pool, TraceStore, solve
from orchestrion.cli import app
from orchestrion.tools.defaults import default_tools
from orchestrion.train.export import (
    export_trl,
    export_verl,
    tokenize_record,
    tool_schemas,
)
from orchestrion.train.hf import load_tokenizer
from orchestrion.train.records import (
    DecisionRecord,
    RecordFilter,
    filter_records,
    load_records,
)
from tests.helpers import needs_train
from tests.train.test_records import RUN, build_run


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    pytest.importorskip("transformers", reason="the train extra is not installed")
    return load_tokenizer()


def chat_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"])


def check_mask(rec: DecisionRecord, ids: list[int], mask: list[int], prompt_ids: list[int], tokenizer: Any) -> None:
    """Token by token: the unmasked part is the prompt, the masked part decodes to the output then EOS."""
    assert len(ids) == len(mask)
    n = mask.index(1)
    assert mask == [0] * n + [1] * (len(ids) - n)
    assert ids[:n] == prompt_ids
    completion = ids[n:]
    assert completion[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(completion[:-1]) == rec.output
    assert tokenizer.decode(completion) == rec.output + tokenizer.eos_token


async def test_mask_covers_exactly_the_output_tokens(store: TraceStore, tokenizer: Any) -> None:
    await build_run(store)
    records = load_records(store, run_id=RUN)
    assert records and all(r.prompt_token_ids is None for r in records)  # scripted: the chat template is used
    for rec in records:
        ids, mask = tokenize_record(rec, tokenizer)
        check_mask(rec, ids, mask, chat_ids(tokenizer, rec.messages), tokenizer)


class NoRetokenizing:
    """A tokenizer that only knows its EOS, size and decoding: any attempt to tokenize fails the test."""

    eos_token_id = 2

    def __init__(self, real: Any) -> None:
        self.real = real

    def __len__(self) -> int:
        return len(self.real)

    def decode(self, ids: list[int], **k: Any) -> str:
        return str(self.real.decode(ids, **k))

    def apply_chat_template(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("re-tokenized the prompt")

    def __call__(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("re-tokenized the output")


def stored_ids_record(tokenizer: Any) -> DecisionRecord:
    messages = [{"role": "system", "content": "plan"}, {"role": "user", "content": "What is 2+3?"}]
    output = '{"calls": [], "final": true}'
    return DecisionRecord(
        decision_id="d", episode_id="e", run_id=None, task_id=None, strategy="para", seq=1, attempt=0, model="m",
        schema_name="ParaAction", messages=messages, output=output,
        prompt_token_ids=chat_ids(tokenizer, messages),
        token_ids=list(tokenizer(output, add_special_tokens=False)["input_ids"]),
        logprobs=None, action={}, error=None, valid=True, episode_status="ok", score=1.0, correct=True, repaired=False)


def test_stored_ids_are_used_as_they_are(tokenizer: Any) -> None:
    rec = stored_ids_record(tokenizer)
    assert rec.prompt_token_ids is not None and rec.token_ids is not None
    ids, mask = tokenize_record(rec, NoRetokenizing(tokenizer))
    assert ids == rec.prompt_token_ids + rec.token_ids + [2]
    check_mask(rec, ids, mask, rec.prompt_token_ids, tokenizer)
    rec.token_ids = rec.token_ids + [2]  # an EOS already recorded is not doubled
    assert tokenize_record(rec, NoRetokenizing(tokenizer))[0] == rec.prompt_token_ids + rec.token_ids


def test_ids_stored_by_another_model_are_retokenized(tokenizer: Any) -> None:
    """A teacher's decisions (another model, another vocabulary) are re-tokenized for the student."""
    rec = stored_ids_record(tokenizer)
    own_prompt, own_output = list(rec.prompt_token_ids or []), list(rec.token_ids or [])
    rec.prompt_token_ids = [151644, *own_prompt]  # an id beyond this vocabulary (Qwen's <|im_start|>)
    assert tokenize_record(rec, tokenizer)[0][: len(own_prompt)] == chat_ids(tokenizer, rec.messages)
    rec.prompt_token_ids = own_prompt
    rec.token_ids = [i + 1 for i in own_output]  # in range, but other tokens: they decode to other text
    ids, mask = tokenize_record(rec, tokenizer)
    assert ids[len(own_prompt):-1] == own_output and sum(mask) == len(own_output) + 1


async def test_trl_export_loads_and_sft_trainer_masks_the_prompt(store: TraceStore, tokenizer: Any,
                                                                 tmp_path: Path) -> None:
    import datasets
    from trl import SFTConfig, SFTTrainer

    from orchestrion.train.hf import load_model

    ids = await build_run(store)
    kept = filter_records(load_records(store, run_id=RUN), RecordFilter())
    path = export_trl(kept, tmp_path / "trl", tokenizer=tokenizer, rewards={ids["A"]: 0.75},
                      info={"filters": "default"})
    assert path == tmp_path / "trl" / "train.jsonl"
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    assert ds.num_rows == len(kept) == 6
    assert set(ds.column_names) == {"prompt", "completion", "tools", "input_ids", "completion_mask", "meta"}
    for row, rec in zip(ds, kept):
        assert row["prompt"] == rec.messages
        assert row["completion"] == [{"role": "assistant", "content": rec.output}]
        assert [t["function"]["name"] for t in row["tools"]] == default_tools().names
        assert row["meta"]["decision_id"] == rec.decision_id and row["meta"]["episode_id"] == rec.episode_id
        assert row["meta"]["reward"] == (0.75 if rec.episode_id == ids["A"] else None)
        check_mask(rec, row["input_ids"], row["completion_mask"], chat_ids(tokenizer, rec.messages), tokenizer)
    assert [r["meta"]["repaired"] for r in ds] == [True, False, False, False, False, False]
    info = json.loads((tmp_path / "trl" / "dataset_info.json").read_text())
    assert info["rows"] == 6 and info["episodes"] == 3 and info["format"] == "trl" and info["filters"] == "default"
    assert info["repaired"] == 1 and info["tools"] == {"calculator": 1, "crash": 1, "lookup": 2}

    # TRL takes the ids as they are and turns the mask into labels: -100 on every prompt token
    cfg = SFTConfig(output_dir=str(tmp_path / "sft"), max_steps=1, report_to=[], max_length=None,
                    per_device_train_batch_size=2, use_cpu=True, dataset_num_proc=None)
    trainer = SFTTrainer(model=load_model(), args=cfg, train_dataset=ds, processing_class=tokenizer)
    prepared = trainer.train_dataset
    assert "labels" in prepared.column_names
    by_ids = {tuple(r["input_ids"]): r["labels"] for r in prepared}
    for row in ds:
        labels = by_ids[tuple(row["input_ids"])]
        assert labels == [t if m else -100 for t, m in zip(row["input_ids"], row["completion_mask"])]


async def test_verl_export(store: TraceStore, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    await build_run(store)
    kept = filter_records(load_records(store, run_id=RUN), RecordFilter())
    path = export_verl(kept, tmp_path / "verl")
    rows = pq.read_table(path).to_pylist()
    assert len(rows) == 6
    assert set(rows[0]) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    first = rows[0]
    assert first["prompt"] == kept[0].messages and first["data_source"] == "orchestrion/para"
    assert first["reward_model"] == {"style": "rule", "ground_truth": "5"}
    assert first["extra_info"]["response"] == kept[0].output and first["extra_info"]["index"] == 0
    assert first["extra_info"]["decision_id"] == kept[0].decision_id
    assert json.loads((tmp_path / "verl" / "dataset_info.json").read_text())["format"] == "verl"


def test_tool_schemas_are_openai_functions() -> None:
    schemas = tool_schemas(default_tools())
    assert [s["function"]["name"] for s in schemas] == default_tools().names
    calc = next(s for s in schemas if s["function"]["name"] == "calculator")
    assert calc["type"] == "function" and calc["function"]["parameters"]["required"] == ["expression"]
    assert "title" not in calc["function"]["parameters"]


@needs_train  # the trl format tokenizes
async def test_cli_export_prints_counts_and_writes(store: TraceStore, tmp_path: Path) -> None:
    await build_run(store)
    runner = CliRunner()
    out = tmp_path / "out"
    res = runner.invoke(app, ["train", "export", "--run", RUN, "--format", "trl", "--out", str(out),
                              "--db", str(store.path), "--one-per-task", "--max-tool-share", "0.5"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == f"records read: 11 decision attempts from 5 episodes of run {RUN}"
    # successful: A, C, D, E (9); one per task: t1 -> C, so C, D, E (6); all valid; D duplicates C (4)
    assert "kept after successful episodes: 9" in res.output
    assert "kept after one episode per task: 6" in res.output
    assert "kept after distinct (context, output): 4" in res.output
    assert "kept after no tool above 0.5 of records: 4" in res.output
    assert f"wrote {out / 'train.jsonl'} (4 rows, 2 episodes)" in res.output
    assert len((out / "train.jsonl").read_text().splitlines()) == 4
    res = runner.invoke(app, ["train", "export", "--run", RUN[:4], "--format", "verl", "--out", str(tmp_path / "v"),
                              "--db", str(store.path), "--all"])
    assert res.exit_code == 0, res.output
    assert "(11 rows, 5 episodes)" in res.output and (tmp_path / "v" / "train.parquet").is_file()
    res = runner.invoke(app, ["train", "export", "--run", RUN, "--format", "verl", "--out", str(tmp_path / "a"),
                              "--db", str(store.path), "--one-per-task", "--augment", "1"])
    assert res.exit_code == 0, res.output
    added = int(res.output.split("repair copies added (--augment 1): ")[1].split()[0])
    assert added >= 1 and f"({4 + added} rows" in res.output


@needs_train
async def test_cli_errors_are_one_line(store: TraceStore, tmp_path: Path) -> None:
    await build_run(store)
    runner = CliRunner()
    base = ["train", "export", "--out", str(tmp_path / "o"), "--db", str(store.path)]
    res = runner.invoke(app, [*base, "--run", "nope"])
    assert res.exit_code == 2 and "run 'nope' not found" in res.output and "--db" in res.output
    res = runner.invoke(app, [*base, "--run", RUN, "--format", "csv"])
    assert res.exit_code == 2 and "--format 'csv': choose trl or verl" in res.output
    failed = await build_failed_run(store)
    res = runner.invoke(app, [*base, "--run", failed])
    assert res.exit_code == 2
    assert f"no successful episodes in run {failed}; pass --include-failed" in res.output
    assert not (tmp_path / "o" / "train.jsonl").exists()
    res = runner.invoke(app, [*base, "--run", failed, "--include-failed", "--max-tool-share", "0.4"])
    # 4 valid records, lookup in 2: 2 > 0.4*4 -> one dropped -> 1 of 3
    assert res.exit_code == 0 and "kept after no tool above 0.4 of records: 3" in res.output


async def test_cli_grounded_only_says_how_many_rows_each_filter_removed(store: TraceStore, tmp_path: Path) -> None:
    from tests.train.test_records import GROUNDING_RUN, build_grounding_run

    await build_grounding_run(store)
    runner = CliRunner()
    out = tmp_path / "g"
    res = runner.invoke(app, ["train", "export", "--run", GROUNDING_RUN, "--format", "verl", "--out", str(out),
                              "--db", str(store.path), "--grounded-only"])
    assert res.exit_code == 0, res.output
    # G, U, W: a call decision and a final one; N: the final one only (7 records)
    assert f"records read: 7 decision attempts from 4 episodes of run {GROUNDING_RUN}" in res.output
    assert "kept after successful episodes: 5 (removed 2)" in res.output  # W
    assert "kept after answer grounded on a result: 2 (removed 3)" in res.output  # U and N
    assert "(2 rows, 1 episodes)" in res.output
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["removed_by_filter"]["answer grounded on a result"] == 3 and info["filters"]["grounded_only"] is True
    res = runner.invoke(app, ["train", "export", "--run", GROUNDING_RUN, "--format", "verl", "--out", str(out),
                              "--db", str(store.path)])
    assert res.exit_code == 0 and "answer grounded" not in res.output and "(5 rows, 3 episodes)" in res.output


async def test_cli_label_keeps_only_episodes_annotated_with_it(store: TraceStore, tmp_path: Path) -> None:
    ids = await build_run(store)
    store.annotate_episode(ids["A"], label="keep", note="a clean repair")  # as the viewer's POST does
    store.annotate_episode(ids["B"], label="keep", note=None)
    store.annotate_episode(ids["E"], label="review", note="check the lookup")
    await store.aflush()
    records = load_records(store, run_id=RUN)
    assert {r.episode_id: r.label for r in records} == {ids["A"]: "keep", ids["B"]: "keep", ids["C"]: None,
                                                        ids["D"]: None, ids["E"]: "review"}
    assert {r.episode_id for r in filter_records(records, RecordFilter(labels=("review",)))} == {ids["E"]}
    runner = CliRunner()
    base = ["train", "export", "--run", RUN, "--format", "verl", "--db", str(store.path)]
    res = runner.invoke(app, [*base, "--out", str(tmp_path / "k"), "--label", "keep"])
    assert res.exit_code == 0, res.output
    # A (3 attempts) and B (2) are labelled keep; B is wrong; A's invalid attempt goes
    assert "kept after labelled keep: 5 (removed 6)" in res.output
    assert "kept after successful episodes: 3 (removed 2)" in res.output
    assert "(2 rows, 1 episodes)" in res.output
    info = json.loads((tmp_path / "k" / "dataset_info.json").read_text())
    assert info["filters"]["labels"] == ["keep"] and info["removed_by_filter"]["labelled keep"] == 6
    res = runner.invoke(app, [*base, "--out", str(tmp_path / "kr"), "--label", "keep", "--label", "review"])
    assert res.exit_code == 0 and "kept after labelled keep or review: 7 (removed 4)" in res.output
    assert "(4 rows, 2 episodes)" in res.output
    res = runner.invoke(app, [*base, "--out", str(tmp_path / "n"), "--label", "nope"])
    assert res.exit_code == 2 and "no episode of run run-a is labelled nope (its labels are keep, review)" in res.output


def test_empty_after_grounding_says_why() -> None:
    from orchestrion.cli._train_data import _why_empty

    rec = DecisionRecord(decision_id="d", episode_id="e", run_id="r9", task_id="t", strategy="para", seq=1, attempt=0,
                         model="m", schema_name="S", messages=[], output="", prompt_token_ids=None, token_ids=None,
                         logprobs=None, action=None, error=None, valid=True, episode_status="ok", score=1.0,
                         correct=True, repaired=False)
    msg = _why_empty("answer grounded on a result", "r9", [rec])
    assert "no episode of run r9 has its answer grounded" in msg and "1 of 1 episodes have no grounding measure" in msg
    assert msg.endswith("leave out --grounded-only")


def test_empty_after_tool_cap_says_which_option_to_change() -> None:
    from orchestrion.cli._train_data import _why_empty

    msg = _why_empty("no tool above 0.5 of records", "r9", [])
    assert msg.startswith("the tool cap removed every row of run r9") and "--max-tool-share 1" in msg


async def build_failed_run(store: TraceStore) -> str:
    from tests.train.test_records import action, episode

    for i in range(2):
        await episode(store, [action([{"tool": "lookup", "input": str(i)}]), action([], True), "no"], f"f{i}",
                      f"Question {i}?", score=0.0, run_id="failed-run")
    return "failed-run"


@pytest.mark.integration
async def test_embedded_para_ids_round_trip_and_cli(store: TraceStore, tokenizer: Any, tmp_path: Path) -> None:
    res = await solve("What is 2+3?", strategy="para", pool=Pool.default(), store=store, run_id="real",
                      budget=Budget(tokens=6000, wall_s=180), options={"max_rounds": 2})
    records = load_records(store, run_id="real")
    assert records, res.error
    for rec in records:
        assert rec.prompt_token_ids and rec.token_ids is not None and rec.model
        # the recorded ids are what llama.cpp generated: they decode to the stored output exactly
        assert tokenizer.decode(rec.token_ids) == rec.output
        assert rec.logprobs is not None and len(rec.logprobs) == len(rec.token_ids)
        ids, mask = tokenize_record(rec, NoRetokenizing(tokenizer))
        assert ids[: len(rec.prompt_token_ids)] == rec.prompt_token_ids
        check_mask(rec, ids, mask, rec.prompt_token_ids, tokenizer)
        # llama.cpp's prompt ids are the ones the HF chat template gives for the same messages
        assert rec.prompt_token_ids == chat_ids(tokenizer, rec.messages)
    out = tmp_path / "real"
    cli = CliRunner().invoke(app, ["train", "export", "--run", "real", "--out", str(out), "--db", str(store.path),
                                   "--include-failed", "--max-tool-share", "1"])
    valid = [r for r in records if r.valid]
    if not valid:
        assert cli.exit_code == 2 and "no valid orchestrator output" in cli.output
        return
    assert cli.exit_code == 0, cli.output
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert 1 <= len(rows) <= len(valid)
    by_id = {r.decision_id: r for r in valid}
    for row in rows:
        rec = by_id[row["meta"]["decision_id"]]
        assert row["meta"]["exact_ids"] is True
        assert row["input_ids"] == rec.prompt_token_ids + rec.token_ids + [tokenizer.eos_token_id]


async def test_export_files_are_owner_only_and_whole(store: TraceStore, tmp_path: Path) -> None:
    """Issue 36 row 12: the export holds every prompt, so its folder is 0700 and its files 0600,
    and nothing is left half-written beside them."""
    pytest.importorskip("pyarrow")
    await build_run(store)
    kept = filter_records(load_records(store, run_id=RUN), RecordFilter())
    out = tmp_path / "new" / "verl"
    export_verl(kept, out)
    assert out.stat().st_mode & 0o777 == 0o700
    assert {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()} == {
        "train.parquet": 0o600, "dataset_info.json": 0o600}
    assert [p.name for p in out.parent.iterdir()] == ["verl"]  # no staging folder left
