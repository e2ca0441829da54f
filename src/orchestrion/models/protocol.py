"""The one small protocol every model backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .types import Completion, GenerateConfig, Message


@runtime_checkable
class Model(Protocol):
    """An async chat-completion backend.

    ``name`` is the pool name. ``constrains_json`` says whether the backend can
    force its output to match ``GenerateConfig.json_schema`` by itself; callers
    validate either way.
    """

    name: str
    constrains_json: bool

    async def complete(self, messages: Sequence[Message], config: GenerateConfig) -> Completion:
        """Return one completion for ``messages``; raise :class:`ModelError` on failure."""
        ...

    async def aclose(self) -> None:
        """Release connections, threads or memory held by the backend."""
        ...
