"""Strategies by name: every built-in one (each module registers itself on import with
:func:`.base.register`) and any registered by the caller.

Apart from :mod:`.base`, so the strategy modules it imports never import it back.
"""

from __future__ import annotations

from .._errors import StrategyNotFoundError
from .base import _REGISTRY, Strategy


def strategies() -> dict[str, type[Strategy]]:
    # importing the built-in modules registers them
    from . import auto, baselines, milestone, para, proactive, router, spec, topology, uno  # noqa: F401

    return dict(_REGISTRY)


def get_strategy(name: str) -> Strategy:
    found = strategies().get(name)
    if found is None:
        raise StrategyNotFoundError(
            f"unknown strategy '{name}'; choose one of: {', '.join(sorted(strategies()))}"
        )
    return found()


def as_strategy(strategy: str | Strategy) -> Strategy:
    """A strategy object, looked up by name when ``strategy`` is one."""
    return get_strategy(strategy) if isinstance(strategy, str) else strategy
