"""Integration tests on the real embedded SmolLM2-135M model (llama.cpp).

Correctness of the tiny model's answers is not asserted; what is asserted is
that real output flows through the whole system: grammar-constrained actions
parse, token ids and log-probs are recorded, and every episode ends with a
finished trace and an answer or a recorded status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrion import Budget, Pool, RunContext, TraceStore, solve
from orchestrion.models.llama_cpp import LlamaCppModel
from orchestrion.models.pool import EMBEDDED_NAME
from orchestrion.runtime import BudgetTracker, Harness, SubAgent
from orchestrion.strategies.para import ParaAction
from orchestrion.tools.defaults import default_tools
from orchestrion.trace import Tracer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shared_model() -> Iterator[LlamaCppModel]:
    model = LlamaCppModel(EMBEDDED_NAME)
    yield model


@pytest.fixture
def pool(shared_model: LlamaCppModel) -> Pool:
    p = Pool.default()
    p._models[EMBEDDED_NAME] = shared_model  # one model load for the whole module
    return p


def cli(*args: str, db: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ORCHESTRION_DB": str(db)}
    return subprocess.run([sys.executable, "-m", "orchestrion", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_cli_run_para_json_and_trace_show(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    res = cli("run", "What is 12*13?", "--strategy", "para", "--json", "--set", "max_rounds=2", db=db)
    data = json.loads(res.stdout)
    assert {"answer", "strategy", "usage", "cost_usd", "wall_s", "trace_id"} <= set(data), res.stderr
    assert data["status"] in ("ok", "budget_exceeded", "error")
    assert data["status"] != "ok" or data["answer"]
    # local models are priced by the compute they take, never silently free
    assert data["usage"]["input_tokens"] > 0 and data["cost_usd"] > 0
    shown = cli("trace", "show", data["trace_id"], db=db)
    assert shown.returncode == 0, shown.stderr
    assert "decision round 1" in shown.stdout and "(finished)" in shown.stdout


async def test_grammar_constrained_decision_is_valid_and_recorded(pool: Pool, store: TraceStore) -> None:
    tools = default_tools()
    ctx = RunContext(pool, tools, Tracer(store, "ep"), BudgetTracker(Budget(tokens=4000)))
    from orchestrion.runtime.protocol import narrow

    schema = narrow(ParaAction.model_json_schema(), {"tool": tools.names, "model": pool.names}, drop=("args",))
    decision = await ctx.decide(ParaAction, [{"role": "user", "content": "Plan calls to compute 12*13."}],
                                json_schema=schema)
    assert decision.valid, decision.error
    assert all(c.tool in tools.names for c in decision.action.calls)  # type: ignore[union-attr]
    store.flush()
    rows = store.decisions("ep")
    # a grammar keeps every attempt parseable, but a long reply can still hit max_tokens and be
    # repaired; every attempt is recorded and the last one is the valid decision
    assert len(rows) == len(decision.attempts) >= 1
    row = rows[-1]
    assert row.valid == 1
    token_ids = json.loads(row.token_ids)
    logprobs = json.loads(row.logprobs)
    assert len(token_ids) == len(logprobs) > 0
    assert all(lp <= 0 for lp in logprobs)
    assert len(json.loads(row.prompt_token_ids)) > 10
    # the recorded ids decode to exactly the recorded output: no re-tokenization needed
    llm = pool.get(EMBEDDED_NAME)._llm  # type: ignore[attr-defined]
    assert llm.detokenize(token_ids).decode("utf-8", errors="ignore") == row.output


async def test_direct_on_real_model(pool: Pool, store: TraceStore) -> None:
    res = await solve("Name a colour.", strategy="direct", pool=pool, store=store, options={"max_tokens": 24})
    assert res.status == "ok" and res.answer
    assert 0 < res.usage.output_tokens <= 24
    assert store.episode(res.trace_id).finished == 1  # type: ignore[union-attr]


async def test_subagent_on_real_model_ends(pool: Pool, store: TraceStore) -> None:
    ctx = RunContext(pool, default_tools(), Tracer(store, "ep2"), BudgetTracker())
    agent = SubAgent(ctx, Harness(instruction="Compute 3+4 with the calculator.", model=EMBEDDED_NAME,
                                  tools=["calculator"], step_budget=3))
    report = await agent.run()
    assert report.kind in ("finish", "revise", "stop", "exhausted")
    assert 1 <= agent.steps_used <= 3
    store.flush()
    assert len(store.decisions("ep2")) >= agent.steps_used


async def test_para_with_tight_budget_records_status(pool: Pool, store: TraceStore) -> None:
    res = await solve("What is 7+8?", strategy="para", pool=pool, store=store, budget=Budget(tokens=600))
    assert res.status in ("ok", "budget_exceeded")
    ep = store.episode(res.trace_id)
    assert ep is not None and ep.finished == 1 and ep.status == res.status
