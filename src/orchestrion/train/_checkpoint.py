"""Resume checkpoints of the hand-written trainer loops (OPOD, GRPO's ``loop`` engine).

``OUT/checkpoint/`` holds the LoRA weights (PEFT files), ``trainer_state.pt`` (the optimizer
state and torch's RNG state) and ``state.json`` (the step counter, the settings the run was
started with, and whatever the trainer adds: its run id, its step log). A checkpoint is
written to ``checkpoint.tmp`` and then renamed over the old one, so an interruption while
saving leaves the previous checkpoint whole. Loading restores the trainable LoRA weights in
place: the policy's starting point (the KL reference, OPOD's self-teacher) stays the adapter
training began from.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .._errors import ConfigError
from ._policy import Policy

CHECKPOINT = "checkpoint"
# settings that may differ between the first call and a resuming one
MAY_CHANGE = frozenset({"steps", "max_steps_now", "concurrency", "micro_batch", "out"})


def save_checkpoint(out: Path, policy: Policy, optimizer: torch.optim.Optimizer, step: int,
                    state: Mapping[str, Any]) -> Path:
    """Write the checkpoint after ``step`` optimizer steps; returns its folder."""
    final, tmp = out / CHECKPOINT, out / f"{CHECKPOINT}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    policy.model.save_pretrained(str(tmp))
    torch.save({"optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state()}, tmp / "trainer_state.pt")
    (tmp / "state.json").write_text(json.dumps({**state, "step": step}, indent=2, default=str), encoding="utf-8")
    old = out / f"{CHECKPOINT}.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def read_state(out: Path, settings: Mapping[str, Any], *, file: str = f"{CHECKPOINT}/state.json"
               ) -> dict[str, Any] | None:
    """``out/file`` (the checkpoint's ``state.json`` by default) when there is one (None otherwise), after
    checking that it was written with the same settings (those in :data:`MAY_CHANGE` aside)."""
    path = out / file
    if not path.is_file():
        return None
    state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    saved = state.get("settings") or {}
    for key, value in settings.items():
        if key not in MAY_CHANGE and key in saved and saved[key] != value:
            raise ConfigError(f"{out}: its checkpoint was written with {key}={saved[key]!r}, not {value!r}; "
                              "rerun with the same settings to resume, or pass another --out to start afresh")
    return state


def load_checkpoint(out: Path, policy: Policy, optimizer: torch.optim.Optimizer) -> None:
    """Put the checkpoint's LoRA weights, optimizer state and RNG state back."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    folder = out / CHECKPOINT
    weights = load_file(str(folder / "adapter_model.safetensors"), device=str(policy.device))
    set_peft_model_state_dict(policy.model, weights)
    saved = torch.load(folder / "trainer_state.pt", map_location=policy.device, weights_only=False)
    optimizer.load_state_dict(saved["optimizer"])
    torch.set_rng_state(saved["torch_rng"])
