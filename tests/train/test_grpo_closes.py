"""train_grpo closes the pool and the store it opened by name, failures included, and leaves
alone the ones it was given (issue 36: "What opens, closes")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the train extra is not installed")  # train.grpo imports it
from orchestrion import Pool, ScriptedModel, TraceStore  # noqa: E402
from orchestrion.train import grpo  # noqa: E402
from orchestrion.train.settings import GRPOSettings  # noqa: E402
from tests.train.test_grpo import Tasks  # noqa: E402


class Opened:
    """Every store the run opens and the pool ``load_pool`` gives for the name ``by-name``, with
    whether it was closed. Loading the policy fails at once: the run stops before any torch work."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pool = Pool.from_models([ScriptedModel(["{}"], name="orch")])
        self.pool_closed = 0
        self.stores: list[TraceStore] = []
        opened = self.stores

        class Recorded(TraceStore):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                opened.append(self)

        async def closing() -> None:
            self.pool_closed += 1

        def failing_load(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("the policy failed to load")

        def resolve(ref: Any) -> Pool:
            return ref if isinstance(ref, Pool) else {"by-name": self.pool}[ref]

        self.store_type = Recorded
        monkeypatch.setattr(self.pool, "aclose", closing)
        monkeypatch.setattr(grpo, "TraceStore", Recorded)
        monkeypatch.setattr(grpo, "load_pool", resolve)
        monkeypatch.setattr(grpo.Policy, "load", failing_load)


def test_a_pool_and_a_store_opened_by_name_are_closed_when_training_fails(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    opened = Opened(monkeypatch)
    with pytest.raises(RuntimeError, match="the policy failed to load"):
        grpo.train_grpo(Tasks(1), GRPOSettings(out=tmp_path / "out", group=2, steps=1), pool="by-name",
                        store=tmp_path / "t.db")
    [store] = opened.stores
    assert opened.pool_closed == 1
    assert not store._thread.is_alive()  # its writer stopped: closed, everything committed
    assert TraceStore(tmp_path / "t.db").query("SELECT status FROM runs") == [{"status": "interrupted"}]


def test_a_pool_and_a_store_given_as_objects_stay_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened = Opened(monkeypatch)
    store = opened.store_type(tmp_path / "t.db")
    with pytest.raises(RuntimeError, match="the policy failed to load"):
        grpo.train_grpo(Tasks(1), GRPOSettings(out=tmp_path / "out", group=2, steps=1), pool=opened.pool,
                        store=store)
    assert opened.pool_closed == 0 and opened.stores == [store] and store._thread.is_alive()
    store.close()
