"""Shared fixtures: a temporary trace store and scripted-model pools."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrion import Pool, ScriptedModel, TraceStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    s = TraceStore(tmp_path / "traces.db")
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _isolated_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes to the user's ~/.orchestrion."""
    monkeypatch.setenv("ORCHESTRION_DB", str(tmp_path / "default.db"))


def scripted_pool(*models: ScriptedModel, **roles: str) -> Pool:
    return Pool.from_models(list(models), **roles)
