"""Fixtures shared by the trainer tests (GRPO, OPOD)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from orchestrion.train._policy import Policy


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """One torch thread: on a machine busy with other work, two threads wait on each other (4x slower)."""
    before = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ORCHESTRION_THREADS", "1")
        yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def policy(one_thread: None) -> Policy:
    return Policy.load(seed=0)
