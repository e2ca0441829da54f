"""Every registered strategy, once, on the real embedded model with a small budget.

Correctness is not asserted (SmolLM2-135M is tiny); each episode must end with a
finished trace and either an answer or a recorded failure status.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrion import Budget, Pool, TraceStore, solve, strategies
from orchestrion.models.llama_cpp import LlamaCppModel
from orchestrion.models.pool import EMBEDDED_NAME

pytestmark = pytest.mark.integration

RECORDED = {"ok", "budget_exceeded", "error", "invalid_spec", "no_answer", "no_admissible_pair"}


@pytest.fixture(scope="module")
def shared_model() -> Iterator[LlamaCppModel]:
    yield LlamaCppModel(EMBEDDED_NAME)


@pytest.mark.parametrize("name", sorted(strategies()))
async def test_strategy_on_real_model(name: str, shared_model: LlamaCppModel, store: TraceStore) -> None:
    pool = Pool.default()
    pool._models[EMBEDDED_NAME] = shared_model
    res = await solve("What is 7+8?", strategy=name, pool=pool, store=store, budget=Budget(tokens=4000, wall_s=180))
    assert res.status in RECORDED, res.error
    assert res.status != "ok" or res.answer.strip()
    ep = store.episode(res.trace_id)
    assert ep is not None and ep.finished == 1 and ep.status == res.status and ep.strategy == name
    spans = store.spans(res.trace_id)
    assert spans and all(s.ended is not None for s in spans)
    assert any(s.kind == "call" for s in spans)
    if name == "milestone":  # (its own embedded test, folded in here: the same episode twice cost make test 23 s)
        assert store.decisions(res.trace_id)  # the milestone and plan decisions were recorded
