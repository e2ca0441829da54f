"""Greedy episodes give the same answers and decisions, token for token, with the prefix cache
on and off: 7 episodes (para on 2 tasks, cot on 5) on the real SmolLM2-135M."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import pytest

from orchestrion import Pool, TraceStore, solve
from orchestrion.models.llama_cpp import LlamaCppModel
from orchestrion.models.pool import EMBEDDED_NAME

pytestmark = pytest.mark.integration

TASKS = ["What is 12*13?", "What is 7+8?", "Sort these words: pear apple fig.", "Is 91 a prime number?",
         "What is 100-37?"]
# para on a product and a list (its episodes are the slow ones: a third task, a sum, took about a
# minute of make test and brings no shape of prompt the product does not), cot on all five.
# The list gets one round: its second round was the coder writing two 384-token programs, 30 s a
# run, with no prompt shape the product's second round does not already bring.
STRATEGIES = {"para": [TASKS[0], TASKS[2]], "cot": TASKS}
PARA_ROUNDS = {TASKS[0]: 2, TASKS[2]: 1}


async def _episodes(prefix_cache: bool, store: TraceStore) -> list[dict[str, Any]]:
    pool = Pool.default()
    # no per-episode states (state_cache=0): with the prefix cache off only the previous call's
    # prefix is reused, so the two runs take different paths to the same prompts
    model = LlamaCppModel(EMBEDDED_NAME, prefix_cache=prefix_cache, state_cache=0)
    pool._models[EMBEDDED_NAME] = model
    out = []
    try:
        for strategy, tasks in STRATEGIES.items():
            for task in tasks:
                res = await solve(task, strategy=strategy, pool=pool, store=store,
                                  options={"max_rounds": PARA_ROUNDS[task], "max_tokens": 48} if strategy == "para"
                                  else {"max_tokens": 48})
                decisions = [(d.output, d.token_ids) for d in store.decisions(res.trace_id)]
                calls = store.spans(res.trace_id, kinds=["call"])
                attrs = [orjson.loads(s.attrs or "{}") for s in calls]
                out.append({"answer": res.answer, "decisions": decisions,
                            "outputs": Counter(a.get("output") for a in attrs),
                            "reused": sum(a.get("prompt_reused", 0) for a in attrs)})
    finally:
        await model.aclose()
    return out


async def test_answers_and_decisions_are_identical_with_the_prefix_cache_on_and_off(store: TraceStore) -> None:
    off = await _episodes(False, store)
    on = await _episodes(True, store)
    assert len(on) == len(off) == 7
    for a, b in zip(off, on):
        assert a["answer"] == b["answer"]
        assert a["decisions"] == b["decisions"]
        assert a["outputs"] == b["outputs"]
    # and the cache did work: the pinned heads were reused (para's system head is 768 tokens of
    # cache blocks; with one list round the margin was 896 tokens, and 0 would mean no cache)
    assert sum(e["reused"] for e in on) > sum(e["reused"] for e in off) + 512
    assert any(d for e in on for d in e["decisions"])  # para decided something
