"""Recoverable-failure augmentation: repair copies look exactly like a real repair in the runtime."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrion import Pool, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion._text import extract_json
from orchestrion.tools.calculator import CalculatorTool
from orchestrion.train.augment import DRIFTS, augment_records, drifted, repair_record
from orchestrion.train.records import DecisionRecord, load_records

GOOD = '{"calls": [{"tool": "calculator", "input": "12*13"}], "final": false}'
FINAL = '{"calls": [], "final": true, "answer": "156"}'


@pytest.mark.parametrize("kind", ["truncated", "prose", "fenced"])
def test_every_drift_fails_to_parse(kind: str) -> None:
    with pytest.raises(ValueError):
        extract_json(drifted(GOOD, kind))


@pytest.mark.parametrize("kind", ["truncated", "fenced"])
async def test_a_repair_copy_is_what_the_runtime_shows_after_that_drift(store: TraceStore, kind: str) -> None:
    """A real episode that drifts, then repairs: the copy built from its valid attempt has the
    context the runtime really gave the repair attempt."""
    model = ScriptedModel([drifted(GOOD, kind), GOOD, FINAL, "156"], name="m")
    res = await solve("What is 12*13?", strategy="para", pool=Pool.from_models([model]),
                      tools=ToolRegistry([CalculatorTool()]), store=store)
    records = load_records(store, episode_ids=[res.trace_id])
    bad, repaired = records[0], records[1]
    assert not bad.valid and repaired.valid and repaired.attempt == 1
    as_first_try = replace(repaired, messages=bad.messages, attempt=0, repaired=False)
    copy = repair_record(as_first_try, kind)
    assert copy is not None
    assert copy.messages == repaired.messages and copy.output == repaired.output == GOOD
    assert copy.repaired and copy.attempt == 1 and copy.prompt_token_ids is None


def test_augment_adds_copies_of_valid_first_attempts_only() -> None:
    records = []
    for i in range(8):
        rec = replace(_record(), decision_id=f"d{i}", valid=i % 4 != 3, attempt=0 if i % 2 == 0 else 1)
        records.append(rec)
    assert augment_records(records, 0.0) == records
    out = augment_records(records, 1.0)
    eligible = [r for r in records if r.valid and r.attempt == 0]
    copies = out[len(records):]
    assert len(copies) == len(eligible) and {c.decision_id.split("~")[1] for c in copies} <= set(DRIFTS)
    assert all(c.decision_id.split("~")[0] in {r.decision_id for r in eligible} for c in copies)
    with pytest.raises(ValueError):
        augment_records(records, 1.5)


def _record() -> DecisionRecord:
    return DecisionRecord(
        decision_id="d", episode_id="e", run_id=None, task_id="t", strategy="para", seq=1, attempt=0, model="m",
        schema_name="ParaAction", messages=[{"role": "user", "content": "What is 12*13?"}], output=GOOD,
        prompt_token_ids=[1, 2], token_ids=[3], logprobs=None, action={}, error=None, valid=True,
        episode_status="ok", score=1.0, correct=True, repaired=False)
