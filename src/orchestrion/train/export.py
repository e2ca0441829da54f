"""Decision records as training data: TRL's prompt-completion JSONL and verl's parquet.

TRL: one row per decision in the conversational prompt-completion format. The prompt is
the exact context the orchestrator was given (system, task, tool results, repair notes), the
completion its raw output; ``SFTTrainer`` puts the loss on the completion only, so tool and
environment text in the prompt is masked. Each row also carries ``input_ids`` and
``completion_mask`` built from the token ids the backend recorded (llama.cpp gives them), so
TRL uses them as they are and nothing is re-tokenized; a record without ids (a scripted or
remote model) is tokenized with the chat template instead.

verl: a parquet file with verl's RL fields (``data_source``, ``prompt`` messages, ``ability``,
``reward_model`` {style, ground_truth}, ``extra_info``), one row per decision context.

Either export writes its files in a temporary folder beside the output folder and renames each
into it once all are written: a file is whole or absent, and the folder (0o700) and the files
(0o600) are owner-only, like the other exports: they hold every prompt.
"""

from __future__ import annotations

import importlib
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import ConfigError
from ..trace import atomic_files, check_output_folder
from .records import DecisionRecord

if TYPE_CHECKING:
    from ..tools.registry import ToolRegistry

_LABEL = "export folder"  # how errors about the output folder name it


def tool_schemas(registry: ToolRegistry) -> list[dict[str, Any]]:
    """The registry's tools as OpenAI-style function schemas (what chat templates take as ``tools``)."""
    out = []
    for tool in registry.tools():
        params = dict(tool.schema())
        params.pop("title", None)
        out.append({"type": "function", "function": {"name": tool.name, "description": tool.description,
                                                      "parameters": params}})
    return out


def _ids(value: Any) -> list[int]:
    if isinstance(value, Mapping):  # transformers 5 returns a BatchEncoding from apply_chat_template
        value = value["input_ids"]
    return [int(i) for i in value]


def _ids_fit(rec: DecisionRecord, tokenizer: Any) -> bool:
    """Whether the record's stored ids come from ``tokenizer``: all in its vocabulary, and the
    output ids decode to the recorded output text."""
    if rec.token_ids is None:
        return rec.prompt_token_ids is not None and max(rec.prompt_token_ids, default=0) < len(tokenizer)
    ids = [*rec.token_ids, *(rec.prompt_token_ids or [])]
    if max(ids, default=0) >= len(tokenizer):
        return False
    return str(tokenizer.decode(list(rec.token_ids), skip_special_tokens=True)).strip() == rec.output.strip()


def tokenize_record(rec: DecisionRecord, tokenizer: Any) -> tuple[list[int], list[int]]:
    """``(input_ids, completion_mask)``: prompt ids then completion ids plus EOS; the mask is 1
    exactly on the orchestrator's output tokens (and the EOS that ends them).

    Stored ids are used when the backend recorded them *with this tokenizer* (a teacher's
    decisions made by another model are re-tokenized: its ids mean other tokens here);
    otherwise the prompt is the chat template with the generation prompt and the completion is
    the output tokenized alone.
    """
    stored = _ids_fit(rec, tokenizer)
    if stored and rec.prompt_token_ids is not None:
        prompt = list(rec.prompt_token_ids)
    else:
        prompt = _ids(tokenizer.apply_chat_template(rec.messages, add_generation_prompt=True, tokenize=True))
    if stored and rec.token_ids is not None:
        completion = list(rec.token_ids)
    else:
        completion = _ids(tokenizer(rec.output, add_special_tokens=False)["input_ids"])
    eos = tokenizer.eos_token_id
    if eos is not None and (not completion or completion[-1] != eos):
        completion.append(int(eos))
    return prompt + completion, [0] * len(prompt) + [1] * len(completion)


def record_meta(rec: DecisionRecord, reward: float | None = None) -> dict[str, Any]:
    """Ids and outcome of a record, as stored in each exported row's ``meta``."""
    return {
        "decision_id": rec.decision_id, "episode_id": rec.episode_id, "run_id": rec.run_id, "task_id": rec.task_id,
        "epoch": rec.epoch, "strategy": rec.strategy, "seq": rec.seq, "attempt": rec.attempt, "model": rec.model,
        "schema_name": rec.schema_name, "valid": rec.valid, "repaired": rec.repaired,
        "episode_status": rec.episode_status, "score": rec.score, "correct": rec.correct, "reward": reward,
        "tools_used": list(rec.tools_used), "exact_ids": rec.prompt_token_ids is not None and rec.token_ids is not None,
    }


def _prepare(records: Sequence[DecisionRecord], out_dir: Path) -> None:
    """Refuse, before any work: no records, or an output folder that is a file (or a device)."""
    if not records:
        raise ConfigError("no decision records to export; check the run id and the filters")
    check_output_folder(out_dir, _LABEL)


def _info(records: Sequence[DecisionRecord], fmt: str, files: list[str],
          extra: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        "format": fmt, "files": files, "created": time.time(), "rows": len(records),
        "episodes": len({r.episode_id for r in records}), "tasks": len({r.task_id or r.episode_id for r in records}),
        "runs": sorted({r.run_id for r in records if r.run_id}),
        "strategies": dict(Counter(r.strategy for r in records)),
        "schemas": dict(Counter(r.schema_name for r in records)),
        "repaired": sum(1 for r in records if r.repaired), "invalid": sum(1 for r in records if not r.valid),
        "tools": dict(Counter(t for r in records for t in r.tools_used)), **(dict(extra) if extra else {}),
    }


def export_trl(
    records: Sequence[DecisionRecord],
    out_dir: Path,
    *,
    tokenizer: Any = None,
    tools: list[dict[str, Any]] | None = None,
    rewards: Mapping[str, float] | None = None,
    info: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``out_dir/train.jsonl`` (one row per record) and ``out_dir/dataset_info.json``.

    ``tools`` are the function schemas of the pool's tools (default: :func:`tool_schemas` of
    the default registry); ``rewards`` maps episode id to its combined reward (``meta.reward``);
    ``info`` is added to ``dataset_info.json`` (e.g. the filters and counts used).
    """
    out_dir = Path(out_dir)
    _prepare(records, out_dir)
    if tokenizer is None:
        from .hf import load_tokenizer

        tokenizer = load_tokenizer()
    if tools is None:
        from ..tools.defaults import default_tools

        tools = tool_schemas(default_tools())
    with atomic_files(out_dir, _LABEL) as staging:  # each file whole or absent; owner-only (0o600 / 0o700)
        _write_trl(records, staging / "train.jsonl", tokenizer, tools, rewards)
        _write_info(staging, _info(records, "trl", ["train.jsonl"], info))
    return out_dir / "train.jsonl"


def _write_trl(records: Sequence[DecisionRecord], path: Path, tokenizer: Any, tools: list[dict[str, Any]],
               rewards: Mapping[str, float] | None) -> None:
    with path.open("wb") as fh:
        for rec in records:
            input_ids, mask = tokenize_record(rec, tokenizer)
            row = {
                "prompt": [{"role": m["role"], "content": m["content"]} for m in rec.messages],
                "completion": [{"role": "assistant", "content": rec.output}],
                "tools": tools,
                "input_ids": input_ids,
                "completion_mask": mask,
                "meta": record_meta(rec, rewards.get(rec.episode_id) if rewards else None),
            }
            fh.write(orjson.dumps(row) + b"\n")


def export_verl(
    records: Sequence[DecisionRecord],
    out_dir: Path,
    *,
    rewards: Mapping[str, float] | None = None,
    info: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``out_dir/train.parquet`` with verl's RL fields, one row per decision context.

    ``reward_model.ground_truth`` is the task's reference answer ("" when it has none);
    ``extra_info`` keeps the ids, the stored output and the episode's score and reward.
    """
    try:  # pyarrow ships no type stubs; the module objects are typed as Any here
        pa: Any = importlib.import_module("pyarrow")
        pq: Any = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise ConfigError("verl export needs pyarrow: pip install 'orchestrion[train]'") from None

    out_dir = Path(out_dir)
    _prepare(records, out_dir)
    rows = []
    for index, rec in enumerate(records):
        meta = record_meta(rec, rewards.get(rec.episode_id) if rewards else None)
        rows.append({
            "data_source": rec.dataset or f"orchestrion/{rec.strategy}",
            "prompt": [{"role": m["role"], "content": m["content"]} for m in rec.messages],
            "ability": "orchestration",
            "reward_model": {"style": "rule", "ground_truth": rec.task_answer or ""},
            "extra_info": {
                "split": "train", "index": index, "question": rec.task_prompt, "response": rec.output,
                **{k: meta[k] for k in ("decision_id", "episode_id", "run_id", "task_id", "strategy",
                                        "schema_name", "score", "reward")},
            },
        })
    with atomic_files(out_dir, _LABEL) as staging:
        pq.write_table(pa.Table.from_pylist(rows), staging / "train.parquet")
        _write_info(staging, _info(records, "verl", ["train.parquet"], info))
    return out_dir / "train.parquet"


def _write_info(out_dir: Path, info: dict[str, Any]) -> None:
    (out_dir / "dataset_info.json").write_bytes(orjson.dumps(info, option=orjson.OPT_INDENT_2, default=str))
