"""Strategies: orchestration policies (``async solve(task, ctx) -> Answer``) over the runtime,
one module each, found by name in the registry.
"""

from __future__ import annotations

from .base import Strategy, register
from .registry import as_strategy, get_strategy, strategies

__all__ = ["Strategy", "as_strategy", "get_strategy", "register", "strategies"]
