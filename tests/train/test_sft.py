"""`train sft`: reading exported rows, LoRA training on the orchestrator's tokens, and using the adapter."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from orchestrion import Pool, ScriptedModel, TraceStore, solve
from orchestrion._errors import ConfigError
from orchestrion.cli import app
from orchestrion.models.pool import EMBEDDED_NAME
from orchestrion.train.settings import SFTSettings
from orchestrion.train.sft import SFTResult, load_rows, train_sft
from tests.helpers import script

EXAMPLES = [
    ("What is 7+8?", '{"thought": "add", "calls": [{"tool": "calculator", "input": "7+8"}]}'),
    ("Name a prime above 10.", '{"thought": "enough", "calls": [], "final": true}'),
]


def _write(d: Path, rows: list[dict[str, Any]]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def _row(prompt_len: int, completion_len: int) -> dict[str, Any]:
    ids = list(range(1, prompt_len + completion_len + 1))
    return {"prompt": [], "completion": [], "input_ids": ids,
            "completion_mask": [0] * prompt_len + [1] * completion_len, "meta": {}}


# -- reading the exported rows -----------------------------------------------------------

def test_rows_keep_ids_and_mask_and_leave_out_rows_too_long(tmp_path: Path) -> None:
    d = _write(tmp_path / "data", [_row(3, 2), _row(10, 5), _row(1, 1)])
    rows, dropped = load_rows(d, max_length=8)
    assert dropped == 1
    assert rows == [{"input_ids": [1, 2, 3, 4, 5], "completion_mask": [0, 0, 0, 1, 1]},
                    {"input_ids": [1, 2], "completion_mask": [0, 1]}]


@pytest.mark.parametrize(("rows", "message"), [
    (None, "run `orchestrion train export"),
    ([], "no rows to train on"),
    ([{"prompt": [], "completion": []}], "missing input_ids"),
    ([{"input_ids": [1, 2], "completion_mask": [0]}], "must match input_ids"),
    ([{"input_ids": [1, 2], "completion_mask": [0, 0]}], "mark some tokens"),
    ([_row(30, 3), _row(40, 2)], "raise it to 42"),
])
def test_bad_data_gives_one_clear_error(tmp_path: Path, rows: list[dict[str, Any]] | None, message: str) -> None:
    d = tmp_path / "data" if rows is None else _write(tmp_path / "data", rows)
    with pytest.raises(ConfigError, match=message):
        load_rows(d, max_length=16)


def test_bad_json_names_the_line(tmp_path: Path) -> None:
    d = tmp_path / "data"
    d.mkdir()
    (d / "train.jsonl").write_text(json.dumps(_row(2, 2)) + "\n{oops\n")
    with pytest.raises(ConfigError, match=r"train.jsonl:2: not valid JSON"):
        load_rows(d, max_length=16)


def test_cli_missing_data_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["train", "sft", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "a")])
    assert result.exit_code == 2
    assert "orchestrion train export" in result.output and "Traceback" not in result.output


def test_settings_are_checked_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="SFTSettings.steps: Input should be greater than or equal to 1"):
        SFTSettings.build(steps=0)
    with pytest.raises(ConfigError, match="SFTSettings.lr: Input should be greater than 0"):
        SFTSettings.build(lr=0.0)
    assert all(f.description for f in SFTSettings.model_fields.values())  # every field says what it is


# -- training on the real orchestrator (HF weights of the embedded GGUF) --------------------

def _chat_rows() -> list[dict[str, Any]]:
    """Rows as `train export` writes them: chat-template prompt ids + completion ids + end of turn."""
    from orchestrion.train.hf import load_tokenizer

    tok = load_tokenizer()
    end = tok.convert_tokens_to_ids("<|im_end|>")
    rows = []
    for question, answer in EXAMPLES:
        prompt = [{"role": "system", "content": "You plan calls for a team. Answer with one JSON action."},
                  {"role": "user", "content": question}]
        ids: Any = tok.apply_chat_template(prompt, add_generation_prompt=True)
        prompt_ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        completion_ids = tok.encode(answer, add_special_tokens=False) + [end]
        rows.append({"prompt": prompt, "completion": [{"role": "assistant", "content": answer}], "tools": [],
                     "input_ids": prompt_ids + completion_ids,
                     "completion_mask": [0] * len(prompt_ids) + [1] * len(completion_ids), "meta": {}})
    return rows


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[SFTResult, Path, list[tuple[int, int, float]]]:
    data = _write(tmp_path_factory.mktemp("data"), _chat_rows())
    (data / "dataset_info.json").write_text(json.dumps({"format": "trl", "rows": 2}))
    seen: list[tuple[int, int, float]] = []
    result = train_sft(data, tmp_path_factory.mktemp("adapter"),
                       SFTSettings(steps=3, lr=1e-3, batch_size=2, lora_r=4, lora_alpha=8, max_length=96, seed=0),
                       progress=lambda *a: seen.append(a))
    return result, data, seen


@pytest.mark.integration
def test_three_steps_on_one_batch_lower_the_loss(trained: tuple[SFTResult, Path, list[tuple[int, int, float]]]) -> None:
    result, _, seen = trained
    assert len(result.losses) == 3
    assert result.losses[-1] < result.losses[0]
    assert [(step, total) for step, total, _ in seen] == [(1, 3), (2, 3), (3, 3)]
    assert [loss for *_, loss in seen] == result.losses


@pytest.mark.integration
def test_adapter_dir_holds_peft_files_gguf_and_log(trained: tuple[SFTResult, Path,
                                                                  list[tuple[int, int, float]]]) -> None:
    result, data, _ = trained
    d = result.adapter_dir
    assert result.gguf_path == d / "adapter.gguf"
    for name in ("adapter_config.json", "adapter_model.safetensors", "adapter.gguf", "train_log.json"):
        assert (d / name).is_file(), name
    config = json.loads((d / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8
    assert set(config["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"}
    log = json.loads((d / "train_log.json").read_text())
    assert log["losses"] == result.losses
    assert log["settings"]["steps"] == 3 and log["examples"] == 2 and log["data"] == str(data)
    assert log["dataset_info"] == {"format": "trl", "rows": 2}
    assert not (d / "checkpoints").exists()


def _completion_nll(rows: list[dict[str, Any]], lora: Path | None) -> float:
    """Mean negative log-likelihood of the completion tokens under llama.cpp (quantized base)."""
    import llama_cpp

    from orchestrion.models.catalog import find_smollm2_gguf

    llm = llama_cpp.Llama(model_path=str(find_smollm2_gguf()), lora_path=str(lora) if lora else None,
                          n_ctx=256, n_threads=1, logits_all=True, verbose=False)
    total, count = 0.0, 0
    try:
        for row in rows:
            ids, mask = row["input_ids"], row["completion_mask"]
            llm.reset()  # type: ignore[no-untyped-call]
            llm.eval(ids)
            logits = np.asarray(llm.scores[: len(ids)], dtype=np.float64)
            for pos in range(1, len(ids)):
                if mask[pos]:
                    z = logits[pos - 1]
                    total -= z[ids[pos]] - z.max() - np.log(np.exp(z - z.max()).sum())
                    count += 1
    finally:
        llm.close()
    return total / count


@pytest.mark.integration
def test_llama_cpp_with_the_trained_adapter_prefers_the_trained_completions(
    trained: tuple[SFTResult, Path, list[tuple[int, int, float]]]
) -> None:
    result, data, _ = trained
    rows = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    assert result.gguf_path is not None
    assert _completion_nll(rows, result.gguf_path) < _completion_nll(rows, None)


@pytest.mark.integration
def test_run_with_the_adapter_decides_with_the_adapted_model(
    trained: tuple[SFTResult, Path, list[tuple[int, int, float]]], tmp_path: Path
) -> None:
    result, _, _ = trained
    db = tmp_path / "traces.db"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrion", "run", "What is 7+8?", "--strategy", "para", "--json",
         "--db", str(db), "--budget", "steps=2", "--orchestrator-adapter", str(result.adapter_dir)],
        check=False, capture_output=True, text=True, timeout=240, env={**os.environ, "ORCHESTRION_THREADS": "1"},
    )
    assert proc.returncode in (0, 1), proc.stderr  # 1: the step budget ended the episode
    episode = json.loads(proc.stdout)
    with sqlite3.connect(db) as conn:
        models = {m for (m,) in conn.execute("SELECT model FROM decisions WHERE episode_id = ?",
                                             (episode["trace_id"],))}
        pool_meta = json.loads(conn.execute("SELECT meta FROM episodes WHERE id = ?",
                                            (episode["trace_id"],)).fetchone()[0])
    assert models == {f"{EMBEDDED_NAME}+adapter"}
    assert "adapter" in pool_meta["pool"]


def test_bad_adapter_path_in_run_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "orchestrion", "run", "hi", "--orchestrator-adapter",
                           str(tmp_path / "nope"), "--db", str(tmp_path / "t.db")],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "adapter not found" in proc.stderr and "Traceback" not in proc.stderr


# -- end to end: scripted episodes -> train export -> train sft ----------------------------

@pytest.mark.integration
async def test_solve_export_then_sft(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    store = TraceStore(db)
    decisions = [EXAMPLES[0][1], EXAMPLES[1][1]]
    for i in range(2):
        pool = Pool.from_models([ScriptedModel(script(decisions, worker=lambda p: "15"), name="tiny")])
        res = await solve("What is 7+8?", strategy="para", pool=pool, store=store, run_id="run-e2e", epoch=i)
        assert res.status == "ok"
    store.close()
    data = tmp_path / "data"
    exported = CliRunner().invoke(app, ["train", "export", "--run", "run-e2e", "--format", "trl", "--out", str(data),
                                        "--db", str(db), "--include-failed"])
    assert exported.exit_code == 0, exported.output
    rows, _ = load_rows(data, max_length=4096)
    assert rows
    # one step on one row: para's prompt is ~900 tokens, and that is what costs time on a CPU
    result = train_sft(data, tmp_path / "adapter",
                       SFTSettings(steps=1, batch_size=1, lora_r=2, lora_alpha=4,
                                   max_length=max(len(r["input_ids"]) for r in rows)))
    assert len(result.losses) == 1 and np.isfinite(result.losses[0])
    assert result.gguf_path is not None and result.gguf_path.is_file()
