"""The local pool on a real task: the demo's "What is 12*13?" through para, answered 156 and
grounded in the tool result. Pulls the pinned Qwen files into the cache once (about 1.6 GB)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from orchestrion import Pool, TraceStore, solve
from orchestrion.models import download
from orchestrion.models.presets import missing

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def _pulled() -> None:
    gone = missing()
    if gone:
        download.pull(gone)
    assert not missing()


@pytest.fixture
async def local_pool(_pulled: None) -> AsyncIterator[Pool]:
    pool = Pool.preset("local")
    yield pool
    await pool.aclose()


async def test_para_on_the_local_pool_answers_from_a_tool_result(local_pool: Pool, store: TraceStore) -> None:
    res = await solve("What is 12*13?", strategy="para", pool=local_pool, store=store, options={"max_rounds": 3})
    assert res.status == "ok", res.error
    store.flush()
    spans = store.spans(res.trace_id)
    results = [
        json.loads(s.attrs).get("output", "")
        for s in spans
        if s.kind in ("tool", "agent") and s.status == "ok"
    ]
    assert any(r.strip() == "156" for r in results), results  # the orchestrator delegated the product
    assert res.answer.strip().splitlines()[-1].endswith("156"), res.answer
    decisions = [s for s in spans if s.kind == "call"]
    assert {json.loads(s.attrs).get("purpose") for s in decisions} >= {"round 1", "synthesis"}
    # decisions and synthesis both ran on the orchestrator model the local preset names
    assert all(s.name == local_pool.orchestrator for s in decisions)
