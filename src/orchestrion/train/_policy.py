"""The trainable orchestrator: SmolLM2 float32 weights plus a LoRA adapter (peft).

One :class:`Policy` holds the trainable LoRA model, its tokenizer and, on demand, a
frozen copy of where training started (the base model, or base + the initial adapter):
GRPO's KL reference and OPOD's self-teacher. Log-probs are always computed on exact
token ids; :meth:`Policy.prompt_ids` applies the chat template only where a backend gave
no ids (scripted or remote models), with the same template llama.cpp uses.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._errors import ConfigError
from ._losses import PaddedBatch, completion_logits, gather_logprobs, pad_batch

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def set_threads() -> None:
    """Use ``$ORCHESTRION_THREADS`` torch threads when set (as llama.cpp does); else torch's default.

    On a machine whose cores are busy with other work, one thread is much faster than
    several that wait on each other (measured: a 4x difference on the 2-core dev machine).
    """
    if os.environ.get("ORCHESTRION_THREADS"):
        from ..models.llama_cpp import default_threads

        torch.set_num_threads(default_threads())


@contextmanager
def _quiet() -> Iterator[None]:
    """No weight-loading progress bar and no library deprecation notices in the trainers' output."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def check_adapter_dir(path: Path) -> Path:
    """A PEFT adapter directory (``adapter_config.json``), as ``train sft``/``grpo``/``opod`` write."""
    if path.is_file() and path.suffix == ".gguf":
        raise ConfigError(f"{path}: training starts from a PEFT adapter directory, not a .gguf; "
                          "pass the folder `orchestrion train sft` wrote")
    if not (path / "adapter_config.json").is_file():
        raise ConfigError(f"{path}: no adapter_config.json there; pass the folder `orchestrion train sft` wrote")
    return path


class Policy:
    """A LoRA policy on the orchestrator model; ``model`` is the peft model being trained."""

    def __init__(self, model: Any, tokenizer: Any, *, init_adapter: Path | None, gguf_path: Path | None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.init_adapter = init_adapter
        self.gguf_path = gguf_path
        self._frozen: Any = None
        self.device: torch.device = next(model.parameters()).device
        eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.eos_id: int = int(eos if isinstance(eos, int) and eos >= 0 else tokenizer.eos_token_id)
        pad = tokenizer.pad_token_id
        self.pad_id: int = int(pad if pad is not None else self.eos_id)

    @classmethod
    def load(
        cls,
        adapter: Path | None = None,
        *,
        lora_r: int = 8,
        lora_alpha: int = 16,
        gguf_path: Path | None = None,
        seed: int = 0,
        device: str | None = None,
    ) -> Policy:
        """The base orchestrator with a trainable LoRA: a fresh one, or ``adapter`` (a PEFT dir) to continue.

        ``device``: where it trains; default the first CUDA device when there is one, else the CPU.
        """
        from peft import LoraConfig, PeftModel, get_peft_model

        from .hf import load_model, load_tokenizer

        torch.manual_seed(seed)
        set_threads()
        if adapter is not None:
            check_adapter_dir(adapter)
        with _quiet():
            base = load_model(gguf_path)
            if adapter is not None:
                model = PeftModel.from_pretrained(base, str(adapter), is_trainable=True)
            else:
                config = LoraConfig(r=lora_r, lora_alpha=lora_alpha, lora_dropout=0.0,
                                    target_modules=list(LORA_TARGETS), task_type="CAUSAL_LM")
                model = get_peft_model(base, config)
        model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        model.train()
        return cls(model, load_tokenizer(gguf_path), init_adapter=adapter, gguf_path=gguf_path)

    def parameters(self) -> list[torch.nn.Parameter]:
        """The trainable (LoRA) parameters."""
        return [p for p in self.model.parameters() if p.requires_grad]

    # -- token ids ------------------------------------------------------------------
    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The chat-templated ids of ``messages`` plus the assistant header, as llama.cpp builds them."""
        ids = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
        if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def text_ids(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]

    # -- scoring ----------------------------------------------------------------------
    def batch(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]]) -> PaddedBatch:
        return pad_batch(prompts, completions, pad_id=self.pad_id).to(self.device)

    def logits(self, batch: PaddedBatch) -> Tensor:
        """The trainable policy's logits on the completion positions (with gradients)."""
        return completion_logits(self.model, batch)

    def logprobs(self, batch: PaddedBatch) -> Tensor:
        return gather_logprobs(self.logits(batch), batch.targets) * batch.mask

    @torch.no_grad()
    def frozen_logits(self, batch: PaddedBatch) -> Tensor:
        """Logits of the starting point (base, or base + the initial adapter), never trained."""
        if self.init_adapter is None:
            with self.model.disable_adapter():
                return completion_logits(self.model, batch)
        return completion_logits(self._frozen_model(), batch)

    @torch.no_grad()
    def frozen_logprobs(self, batch: PaddedBatch) -> Tensor:
        return gather_logprobs(self.frozen_logits(batch), batch.targets) * batch.mask

    def _frozen_model(self) -> Any:
        if self._frozen is None:
            from peft import PeftModel

            from .hf import load_model

            with _quiet():
                frozen = PeftModel.from_pretrained(load_model(self.gguf_path), str(self.init_adapter))
                frozen = frozen.merge_and_unload().to(self.device)
            frozen.eval()
            frozen.requires_grad_(False)
            self._frozen = frozen
        return self._frozen

    # -- sampling ---------------------------------------------------------------------
    @torch.no_grad()
    def sample(self, prompt_ids: Sequence[int], *, max_new_tokens: int, temperature: float = 1.0,
               top_p: float = 1.0) -> list[int]:
        """One completion sampled from the trainable policy (the end-of-turn token kept when produced)."""
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=self.device)
        was_training = self.model.training
        self.model.eval()
        try:
            out = self.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=temperature > 0,
                temperature=max(temperature, 1e-5), top_p=top_p, max_new_tokens=max_new_tokens,
                eos_token_id=self.eos_id, pad_token_id=self.pad_id,
            )
        finally:
            self.model.train(was_training)
        new = [int(t) for t in out[0, ids.shape[1]:].tolist()]
        if self.eos_id in new:
            new = new[: new.index(self.eos_id) + 1]
        return new

    # -- saving -----------------------------------------------------------------------
    def save(self, out_dir: Path) -> tuple[Path, Path | None, str | None]:
        """Write the PEFT adapter to ``out_dir`` and its llama.cpp form ``adapter.gguf`` beside it.

        Returns ``(adapter_dir, gguf_path or None, note)``; the note says why no GGUF was written.
        """
        out_dir.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(out_dir))
        try:
            from .adapter import peft_to_gguf
        except ImportError:
            return out_dir, None, "adapter.gguf not written: orchestrion.train.adapter is not available"
        gguf = peft_to_gguf(out_dir, out_dir / "adapter.gguf")
        return out_dir, Path(gguf), None


def cycle(items: Sequence[Any], start: int, count: int) -> list[Any]:
    """``count`` items of ``items`` from position ``start``, wrapping around."""
    if not items:
        return []
    return [items[(start + i) % len(items)] for i in range(count)]
