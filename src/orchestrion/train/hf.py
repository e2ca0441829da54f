"""The orchestrator as Hugging Face weights, loaded from the same GGUF file llama.cpp runs.

transformers de-quantizes the GGUF tensors (about 15 s for SmolLM2-135M on this
machine); the result is cached as safetensors under the user cache so later loads
take about a second. Training works on these float32 weights; adapters trained on
them are converted back for llama.cpp by :mod:`orchestrion.train.adapter`.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError
from .._paths import cache_dir
from ..models.catalog import find_smollm2_gguf

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def require_training_extra() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"training needs the 'train' extra ({exc.name} is missing): pip install 'orchestrion[train]'"
        ) from None


def _gguf(gguf_path: str | Path | None) -> Path:
    path = Path(gguf_path) if gguf_path is not None else Path(find_smollm2_gguf())
    if not path.is_file():
        raise ConfigError(f"{path}: GGUF file not found; pass the orchestrator's .gguf path")
    return path


def _hf_dir(gguf: Path) -> Path:
    stat = gguf.stat()
    return cache_dir() / "hf" / f"{gguf.stem}-{stat.st_size}"


@lru_cache(maxsize=4)
def _tokenizer(gguf: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    cached = _hf_dir(gguf)
    if (cached / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(cached)
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def load_tokenizer(gguf_path: str | Path | None = None) -> PreTrainedTokenizerBase:
    """The orchestrator's tokenizer (the same vocabulary llama.cpp uses, so token ids agree)."""
    require_training_extra()
    return _tokenizer(_gguf(gguf_path))


def load_model(gguf_path: str | Path | None = None, **kwargs: Any) -> PreTrainedModel:
    """The orchestrator as a float32 causal LM on CPU (move it with ``.to()`` or accelerate)."""
    require_training_extra()
    from transformers import AutoModelForCausalLM

    gguf = _gguf(gguf_path)
    cached = _hf_dir(gguf)
    if not (cached / "config.json").is_file():
        _convert(gguf, cached)
    return AutoModelForCausalLM.from_pretrained(cached, **kwargs)


def _convert(gguf: Path, cached: Path) -> None:
    """De-quantize once and keep plain float32 safetensors (a GGUF-loaded model can't be saved or trained as is)."""
    import shutil

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    _tokenizer(gguf).save_pretrained(tmp)
    try:
        tmp.rename(cached)
    except OSError:  # another process cached it first; that copy is identical
        shutil.rmtree(tmp, ignore_errors=True)
