"""No evidence, no harm, on a real model: a para episode that ends without any result answers
exactly as ``direct`` does, on 10 examples of a BIG-bench multiple-choice task (SmolLM2-135M)."""

from __future__ import annotations

import json

import pytest

from orchestrion import Pool, TraceStore, solve
from orchestrion.eval.datasets import load_dataset
from tests.helpers import needs_bigbench

pytestmark = pytest.mark.integration


@needs_bigbench
async def test_para_without_results_answers_as_direct_on_ten_multiple_choice_tasks(store: TraceStore) -> None:
    tasks = load_dataset("bigbench:date_understanding", limit=10, seed=11).tasks
    assert len(tasks) == 10 and all(t.metadata["scoring"] == "multiple_choice" for t in tasks)
    pool = Pool.default()  # the tiny pool: SmolLM2-135M for every role
    try:
        for task in tasks:
            # the orchestrator's first decision is "final" with no calls: the episode has no result
            para = await solve(task, strategy="para", pool=pool, store=store,
                               options={"replay_decisions": [json.dumps({"calls": [], "final": True})]})
            direct = await solve(task, strategy="direct", pool=pool, store=store)
            assert para.status == direct.status == "ok"
            assert para.answer == direct.answer, task.prompt[:80]
            assert para.meta["calls"] == 0
    finally:
        await pool.aclose()
