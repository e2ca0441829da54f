"""LoRA adapters for llama.cpp: PEFT -> GGUF conversion and adapter resolution.

The implementation lives in :mod:`orchestrion.models.adapter` (loading a model with an
adapter needs it, and models sit below train); this module re-exports it for training code
and for compatibility (``orchestrion.train.adapter.resolve_adapter``).
"""

from __future__ import annotations

from ..models.adapter import (
    ADAPTER_GGUF,
    MODULE_NAMES,
    BaseShape,
    check_adapter_gguf,
    peft_to_gguf,
    permute_rows,
    read_base,
    resolve_adapter,
)

__all__ = [
    "ADAPTER_GGUF", "MODULE_NAMES", "BaseShape", "check_adapter_gguf", "peft_to_gguf", "permute_rows",
    "read_base", "resolve_adapter",
]
