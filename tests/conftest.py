"""Shared fixtures: a temporary trace store, and no test touching ~/.orchestrion."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrion import TraceStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    s = TraceStore(tmp_path / "traces.db")
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _isolated_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes to the user's ~/.orchestrion, and the default pool is the tiny one
    (tests that want the local pool name it), whatever the machine has pulled."""
    monkeypatch.setenv("ORCHESTRION_DB", str(tmp_path / "default.db"))
    monkeypatch.setenv("ORCHESTRION_POOL", "tiny")
    # pinned prompt-prefix states go to the test's own folder, never the user's cache
    monkeypatch.setenv("ORCHESTRION_PREFIX_CACHE_DIR", str(tmp_path / "kv"))
