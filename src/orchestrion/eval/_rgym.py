"""reasoning-gym's families as generated once per process, and their own checker.

Kept apart from :mod:`orchestrion.eval.datasets.rgym` (the loader) so that the scorers can ask a
family's checker without importing the datasets package, which imports them.
"""

from __future__ import annotations

import functools
from typing import Any

from .._errors import ConfigError
from .._text import extract_answer
from ..runtime.types import Task

SIZE = 100  # examples per family: about 70 on @train and 30 on @test
SEED = 35  # the generation seed of every family


@functools.lru_cache(maxsize=32)
def generated(name: str) -> tuple[Any, tuple[dict[str, Any], ...]]:
    """The family's dataset object (its checker) and its generated entries (some take seconds)."""
    import reasoning_gym

    try:
        family = reasoning_gym.create_dataset(name, size=SIZE, seed=SEED)
        return family, tuple(family[i] for i in range(SIZE))
    except Exception as exc:  # the package raises assorted errors for a bad name or configuration
        raise ConfigError(f"reasoning-gym family '{name}' could not be generated: {exc}") from None


def family_score(task: Task, output: str) -> tuple[float, str | None]:
    """What the family's own checker gives the answer stated in ``output`` (0 when none is stated)."""
    name, index = task.metadata.get("family"), task.metadata.get("index")
    if not isinstance(name, str) or not isinstance(index, int):
        raise ConfigError(f"task {task.id!r} is not a reasoning-gym task (no family and index in its metadata)")
    stated = extract_answer(output)
    if stated is None:
        return 0.0, None
    family, entries = generated(name)
    return float(family.score_answer(stated, entries[index])), stated
