"""`orchestrion train sft`: a LoRA adapter for the orchestrator from exported decisions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..train.settings import SFTSettings
from ._common import err, friendly, out, out_folder
from ._flags import settings_flags


def register(app: typer.Typer) -> None:
    """Add ``sft`` to the ``train`` app."""
    app.command("sft")(sft)


SFT_FLAGS = ("steps", "lr", "batch_size", "lora_r", "lora_alpha", "max_length", "seed", "gguf_path")


@friendly
@settings_flags(SFTSettings, SFT_FLAGS, flags={"gguf_path": ("--gguf",)})
def sft(
    data: Annotated[Path, typer.Option("--data", help="folder written by `orchestrion train export --format trl`")],
    out_dir: Annotated[Path, typer.Option("--out", callback=out_folder("--out"),
                                          help="adapter folder to write (PEFT files, adapter.gguf, train_log.json)")],
    **values: Any,
) -> None:
    """Fine-tune the orchestrator (LoRA, TRL SFTTrainer) on its own decisions; loss on its output tokens only.

    Runs on whatever device TRL finds (CPU here); on GPUs use `accelerate launch -m orchestrion train sft ...`.
    """
    _quiet_libraries()
    from ..train.sft import load_rows, train_sft

    settings = SFTSettings.build(**values)
    rows, dropped = load_rows(data, settings.max_length)  # fail fast, before torch is imported
    note = f", {dropped} longer than --max-length left out" if dropped else ""
    err.print(f"training on {len(rows)} decisions from {data}{note}", highlight=False)

    def progress(step: int, total: int, loss: float) -> None:
        err.print(f"step {step}/{total}  loss {loss:.4f}", highlight=False)

    result = train_sft(data, out_dir, settings, progress=progress)
    if result.losses:
        err.print(f"loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f}", highlight=False)
    out.print(f"adapter: {result.adapter_dir}", highlight=False)
    if result.gguf_path is not None:
        out.print(f"llama.cpp adapter: {result.gguf_path}  (use: orchestrion run TASK --orchestrator-adapter "
                  f"{result.adapter_dir})", highlight=False)


def _quiet_libraries() -> None:
    """Our progress lines only: no library progress bars or deprecation chatter."""
    import importlib
    import os
    import warnings

    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    try:
        hf_logging: Any = importlib.import_module("transformers.utils.logging")
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass  # train_sft reports the missing extra
