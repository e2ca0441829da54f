from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrion import TraceError, TraceStore, Usage
from orchestrion.trace import Tracer
from orchestrion.trace.export import export_jsonl


def test_writes_are_batched_in_few_transactions(store: TraceStore) -> None:
    before = store.transactions
    for i in range(500):
        store.submit("INSERT INTO events (episode_id, kind, data) VALUES (?,?,?)", ("e", "k", str(i)))
    store.flush()
    assert len(store.events("e")) == 500
    assert 1 <= store.transactions - before <= 5, f"500 events took {store.transactions - before} transactions"


def test_flush_waits_for_commit_and_reader_sees_it(store: TraceStore) -> None:
    tracer = Tracer(store, "ep1")
    with tracer.span("episode", "x") as span:
        span.charge(Usage(input_tokens=3, output_tokens=4, cost_usd=0.5))
    store.flush()
    rows = store.spans("ep1")
    assert [r.status for r in rows] == ["ok"]
    assert rows[0].input_tokens == 3 and rows[0].cost_usd == 0.5


async def test_aflush_does_not_block_loop(store: TraceStore) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    t = asyncio.create_task(ticker())
    for i in range(2000):
        store.submit("INSERT INTO events (episode_id, kind, data) VALUES (?,?,?)", ("e2", "k", str(i)))
    await store.aflush()
    t.cancel()
    assert len(store.events("e2")) == 2000
    assert ticks > 0


def test_cost_rolls_up_and_unknown_stays_unknown(store: TraceStore) -> None:
    tracer = Tracer(store, "ep")
    with tracer.span("episode", "root") as root:
        with tracer.span("call", "a") as a:
            a.charge(Usage(input_tokens=10, output_tokens=5, cost_usd=0.01))
        with tracer.span("call", "b") as b:
            b.charge(Usage(input_tokens=1, output_tokens=1, cost_usd=None))
    store.flush()
    by_name = {s.name: s for s in store.spans("ep")}
    assert by_name["a"].cost_usd == pytest.approx(0.01)
    assert by_name["b"].cost_usd is None
    assert by_name["root"].input_tokens == 11 and by_name["root"].output_tokens == 6
    assert by_name["root"].cost_usd is None  # one unknown price makes the total unknown
    assert root.usage.cost_usd is None


def test_span_records_error_status(store: TraceStore) -> None:
    tracer = Tracer(store, "ep")
    with pytest.raises(ValueError):
        with tracer.span("tool", "boom"):
            raise ValueError("bad")
    store.flush()
    (row,) = store.spans("ep")
    assert row.status == "error" and "bad" in row.attrs


def test_unknown_and_ambiguous_ids(store: TraceStore) -> None:
    for eid in ("abc1", "abc2"):
        store.submit("INSERT INTO episodes (id, status) VALUES (?, ?)", (eid, "ok"))
    store.flush()
    assert store.episode("nope") is None
    assert store.episode("abc1").id == "abc1"  # type: ignore[union-attr]
    with pytest.raises(TraceError, match="matches 2 episodes"):
        store.episode("abc")


def test_unwritable_location_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(TraceError, match="cannot open"):
        TraceStore(blocker / "sub" / "traces.db")


def test_jsonl_export_round_trip(store: TraceStore, tmp_path: Path) -> None:
    import orjson

    tracer = Tracer(store, "ep9")
    store.submit("INSERT INTO episodes (id, status, task) VALUES (?,?,?)", ("ep9", "ok", '{"prompt": "hi"}'))
    with tracer.span("episode", "root") as root:
        tracer.event("note", {"x": 1})
        tracer.decision(root,
                        {"messages": [{"role": "user", "content": "q"}], "output": "{}", "valid": True, "action": {}})
    store.flush()
    out = tmp_path / "t.jsonl"
    assert export_jsonl(store, ["ep9"], out) == 1
    rec = orjson.loads(out.read_bytes().splitlines()[0])
    assert rec["task"] == {"prompt": "hi"}
    assert rec["spans"][0]["name"] == "root"
    assert rec["events"][0]["data"] == {"x": 1}
    assert rec["decisions"][0]["messages"][0]["content"] == "q"


def test_ids_do_not_repeat_after_the_global_generator_is_reseeded() -> None:
    """Training libraries call random.seed(seed); two seeded runs must not get the same ids."""
    import random

    from orchestrion.trace.tracer import new_id

    random.seed(0)
    first = [new_id() for _ in range(3)]
    random.seed(0)
    assert not set(first) & {new_id() for _ in range(3)}
