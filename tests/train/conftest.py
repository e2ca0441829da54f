"""Fixtures shared by the trainer tests (GRPO, OPOD). torch is imported by the fixtures that need
it, so the trainer tests that do not (records, rewards, trees) run without the train extra."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from orchestrion.train._policy import Policy


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """One torch thread: on a machine busy with other work, two threads wait on each other (4x slower)."""
    torch = pytest.importorskip("torch", reason="the train extra is not installed")
    before = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ORCHESTRION_THREADS", "1")
        yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def policy(one_thread: None) -> Policy:
    from orchestrion.train._policy import Policy

    return Policy.load(seed=0)
