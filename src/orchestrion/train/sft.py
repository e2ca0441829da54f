"""Supervised fine-tuning of the orchestrator on its exported decisions (TRL + LoRA).

The data is the output of ``orchestrion train export --format trl``: one row per
decision with the exact ``input_ids`` the orchestrator saw and produced and a
``completion_mask`` that marks its own tokens. TRL takes such a pre-tokenized dataset
as is (nothing is re-tokenized) and, with ``completion_only_loss``, turns the mask into
labels, so the loss covers only the orchestrator's output. The adapter is written in
PEFT form and, for the embedded llama.cpp runtime, as ``adapter.gguf``.

The device is left to TRL/accelerate: CPU here, GPUs with ``accelerate launch``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import ConfigError
from .._text import read_jsonl
from .adapter import ADAPTER_GGUF, peft_to_gguf
from .settings import SFTSettings

EXPORT_HINT = "run `orchestrion train export --run RUN_ID --format trl --out DIR` first"

Progress = Callable[[int, int, float], None]  # (step, total steps, loss)


@dataclass
class SFTResult:
    """Where the adapter went and how the loss moved."""

    adapter_dir: Path
    gguf_path: Path | None
    losses: list[float]
    examples: int = 0
    dropped: int = 0


def load_rows(data_dir: str | Path, max_length: int) -> tuple[list[dict[str, list[int]]], int]:
    """The rows of ``DIR/train.jsonl`` that fit ``max_length`` (as input_ids + completion_mask) and how many did not."""
    path = Path(data_dir)
    file = path / "train.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"{file}: no training data; {EXPORT_HINT}")
    rows: list[dict[str, list[int]]] = []
    dropped = 0
    longest = 0
    for n, raw in read_jsonl(file, keys="input_ids and completion_mask"):
        ids, mask = raw.get("input_ids"), raw.get("completion_mask")
        if not isinstance(ids, list) or not isinstance(mask, list):
            raise ConfigError(f"{file}:{n}: missing input_ids/completion_mask (token ids); {EXPORT_HINT}")
        if len(ids) != len(mask) or not any(mask):
            raise ConfigError(f"{file}:{n}: completion_mask must match input_ids in length and mark some tokens")
        longest = max(longest, len(ids))
        if len(ids) > max_length:
            dropped += 1
            continue
        rows.append({"input_ids": [int(i) for i in ids], "completion_mask": [int(bool(b)) for b in mask]})
    if not rows:
        if dropped:
            raise ConfigError(
                f"{file}: all {dropped} rows are longer than --max-length {max_length}; raise it to {longest}"
            )
        raise ConfigError(f"{file}: no rows to train on; {EXPORT_HINT}")
    return rows, dropped


def _require_extra() -> None:
    try:
        import peft  # noqa: F401
        import torch  # noqa: F401
        import trl  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"training needs the 'train' extra ({exc.name} is missing): pip install 'orchestrion[train]'"
        ) from None


def _loss_callback(losses: list[float], total: int, progress: Progress | None) -> Any:
    from transformers import TrainerCallback

    class _Losses(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            if logs and "loss" in logs and state.is_world_process_zero:
                losses.append(float(logs["loss"]))
                if progress is not None:
                    progress(int(state.global_step), total, float(logs["loss"]))

    return _Losses()


def train_sft(
    data_dir: str | Path,
    out_dir: str | Path,
    settings: SFTSettings | None = None,
    *,
    progress: Progress | None = None,
) -> SFTResult:
    """Train a LoRA adapter on the decisions in ``data_dir`` and write it to ``out_dir``.

    ``out_dir`` gets the PEFT adapter (adapter_config.json, adapter_model.safetensors),
    ``adapter.gguf`` for llama.cpp and ``train_log.json`` (per-step losses, settings).
    """
    settings = settings or SFTSettings()
    steps, max_length = settings.steps, settings.max_length
    rows, dropped = load_rows(data_dir, max_length)
    _require_extra()
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers.trainer_callback import PrinterCallback
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    from .hf import _gguf, load_model, load_tokenizer

    base = _gguf(settings.gguf_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    losses: list[float] = []
    bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    config = SFTConfig(
        output_dir=str(out / "checkpoints"),
        max_steps=steps,
        learning_rate=settings.lr,
        per_device_train_batch_size=settings.batch_size,
        max_length=max_length,
        seed=settings.seed,
        data_seed=settings.seed,
        completion_only_loss=True,
        packing=False,
        activation_checkpointing=False,
        dataloader_pin_memory=torch.cuda.is_available(),
        bf16=bf16,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    peft_config = LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=0.0,
                             target_modules=settings.target_modules, task_type="CAUSAL_LM")
    trainer = SFTTrainer(
        model=load_model(base),
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=load_tokenizer(base),
        peft_config=peft_config,
        callbacks=[_loss_callback(losses, steps, progress)],
    )
    trainer.remove_callback(PrinterCallback)  # progress goes through ``progress`` instead
    started = time.time()
    trainer.train()
    _remove_if_empty(out / "checkpoints")
    gguf_out: Path | None = None
    if trainer.is_world_process_zero():
        model: Any = trainer.model
        model.save_pretrained(str(out))
        gguf_out = peft_to_gguf(out, out / ADAPTER_GGUF, base_gguf=base)
        log = {
            "losses": losses,
            "settings": settings.record(),
            "data": str(data_dir),
            "examples": len(rows),
            "dropped_too_long": dropped,
            "base_gguf": str(base),
            "bf16": bf16,
            "train_s": round(time.time() - started, 2),
            "dataset_info": _dataset_info(data_dir),
        }
        (out / "train_log.json").write_text(json.dumps(log, indent=2), encoding="utf-8")
    return SFTResult(adapter_dir=out, gguf_path=gguf_out, losses=losses, examples=len(rows), dropped=dropped)


def _remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _dataset_info(data_dir: str | Path) -> Any:
    info = Path(data_dir) / "dataset_info.json"
    if not info.is_file():
        return None
    try:
        return json.loads(info.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None
