"""The trace bus: committed events reach in-process subscribers, in order, without polling."""

from __future__ import annotations

import asyncio

from orchestrion import Pool, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion.trace.bus import EventType, TraceEvent


async def _collect(store: TraceStore, episode_id: str | None = None) -> tuple[asyncio.Task[list[TraceEvent]], object]:
    sub = store.bus.subscribe(episode_id)

    async def run() -> list[TraceEvent]:
        seen: list[TraceEvent] = []
        async for event in sub:
            seen.append(event)
            # each event is published after its rows are committed: the store already shows them
            if event.type is EventType.SPAN_STARTED:
                assert any(s.id == event.span_id for s in store.spans(event.episode_id))
            if event.type is EventType.EPISODE_FINISHED:
                ep = store.episode(event.episode_id)
                assert ep is not None and ep.finished == 1
                break
        sub.close()
        return seen

    return asyncio.create_task(run()), sub


async def test_an_episode_streams_its_spans_and_decisions(store: TraceStore) -> None:
    reply = ['{"calls": [{"tool": "calculator", "input": "12*13"}], "final": false}',
             '{"calls": [], "final": true, "answer": "156"}']
    model = ScriptedModel(reply + ["156"] * 4, name="m")
    listener, _ = await _collect(store)
    res = await solve("What is 12*13?", strategy="para", pool=Pool.from_models([model]), store=store)
    seen = await asyncio.wait_for(listener, 10)
    types = [e.type for e in seen]
    assert types[0] is EventType.EPISODE_STARTED and types[-1] is EventType.EPISODE_FINISHED
    assert {e.episode_id for e in seen} == {res.trace_id}
    assert EventType.DECISION in types and EventType.SPAN_ENDED in types
    started = {e.span_id for e in seen if e.type is EventType.SPAN_STARTED}
    ended = {e.span_id for e in seen if e.type is EventType.SPAN_ENDED}
    assert started and started == ended  # every span opened was closed, and both were announced
    assert seen[-1].status == res.status
    # a span's end carries its rolled-up usage, as the store holds it
    spans = {s.id: s for s in store.spans(res.trace_id)}
    for e in seen:
        if e.type is EventType.SPAN_ENDED:
            assert e.data["usage"]["input_tokens"] == spans[str(e.span_id)].input_tokens


async def test_a_subscription_filters_by_episode_and_drops_when_full(store: TraceStore) -> None:
    other = store.bus.subscribe("no-such-episode")
    small = store.bus.subscribe(maxsize=2)
    await solve("q", strategy="direct", pool=Pool.from_models([ScriptedModel(["a"], name="m")]),
                tools=ToolRegistry([]), store=store)
    await store.aflush()
    await asyncio.sleep(0.05)  # deliveries are scheduled on this loop by the writer thread
    assert other.drain() == []
    kept = small.drain()
    assert len(kept) == 2 and small.dropped > 0 and kept[-1].type is EventType.EPISODE_FINISHED
    other.close()
    small.close()
    assert not store.bus.active


async def test_nobody_listening_publishes_nothing(store: TraceStore) -> None:
    assert not store.bus.active
    await solve("q", strategy="direct", pool=Pool.from_models([ScriptedModel(["a"], name="m")]),
                tools=ToolRegistry([]), store=store)
    sub = store.bus.subscribe()
    await store.aflush()
    assert await sub.get(timeout=0.1) is None  # events before subscribing are not replayed
    sub.close()
    assert await sub.get() is None
