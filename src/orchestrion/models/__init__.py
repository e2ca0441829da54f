"""Models: the chat-completion protocol, its backends (``llama-cpp``, ``openai-api``, ``scripted``)
and the pool that names them.

The shared vocabulary lives in :mod:`.types` (messages, sampling settings, usage, completions),
one pool entry in :mod:`.spec`, prices in :mod:`.cost`. The backends are imported by the pool on
first use, so importing this package loads neither llama.cpp nor an HTTP client.
"""

from __future__ import annotations

from .cost import Price, cost_of
from .pool import Pool, PoolConfig
from .protocol import Model
from .scripted import ScriptedModel
from .spec import Backend, ModelSpec
from .types import UNCONSTRAINED_MODES, Completion, GenerateConfig, Message, StructuredMode, Usage, msg

__all__ = [
    "UNCONSTRAINED_MODES", "Backend", "Completion", "GenerateConfig", "Message", "Model", "ModelSpec", "Pool",
    "PoolConfig", "Price", "ScriptedModel", "StructuredMode", "Usage", "cost_of", "msg",
]
