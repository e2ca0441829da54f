from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest

from orchestrion import PlanError
from orchestrion.runtime import Node, run_dag
from orchestrion.runtime.scheduler import topological_order


def sleeper(value: Any, delay: float = 0.2, log: list[str] | None = None, name: str = "") -> Any:
    async def run(inputs: Mapping[str, Any]) -> Any:
        if log is not None:
            log.append(f"start {name}")
        await asyncio.sleep(delay)
        if log is not None:
            log.append(f"end {name}")
        return (value, dict(inputs))

    return run


async def test_independent_nodes_overlap_and_dependent_wait() -> None:
    log: list[str] = []
    nodes = [
        Node("a", sleeper(1, log=log, name="a")),
        Node("b", sleeper(2, log=log, name="b")),
        Node("c", sleeper(3, log=log, name="c"), deps=("a", "b")),
    ]
    results = await run_dag(nodes)
    # a and b both started before either ended; c started after both ended
    assert log.index("start b") < log.index("end a")
    assert log.index("start c") > max(log.index("end a"), log.index("end b"))
    assert results["c"].value == (3, {"a": (1, {}), "b": (2, {})})
    ra, rb = results["a"], results["b"]
    assert ra.started is not None and rb.started is not None and ra.ended is not None
    assert rb.started < ra.ended  # real overlap in time


async def test_max_parallel_one_is_serial() -> None:
    log: list[str] = []
    nodes = [Node(n, sleeper(n, 0.05, log, n)) for n in "abc"]
    await run_dag(nodes, max_parallel=1)
    for n in "abc":
        i = log.index(f"start {n}")
        assert log[i + 1] == f"end {n}"


def test_cycle_is_a_clear_error() -> None:
    with pytest.raises(PlanError, match="cycle among nodes: a, b"):
        topological_order({"a": ["b"], "b": ["a"], "c": []})
    with pytest.raises(PlanError, match="unknown node 'zz'"):
        topological_order({"a": ["zz"]})


async def test_cycle_rejected_before_running() -> None:
    ran: list[str] = []

    async def record(_: Mapping[str, Any]) -> None:
        ran.append("x")

    with pytest.raises(PlanError):
        await run_dag([Node("a", record, deps=("b",)), Node("b", record, deps=("a",)), Node("c", record)])
    assert ran == []


async def test_failure_skips_dependents_timeout_and_error_recorded() -> None:
    async def boom(_: Mapping[str, Any]) -> None:
        raise RuntimeError("kaput")

    nodes = [
        Node("bad", boom),
        Node("slow", sleeper(0, 5.0), timeout_s=0.05),
        Node("after_bad", sleeper(1, 0.0), deps=("bad",)),
        Node("after_after", sleeper(1, 0.0), deps=("after_bad",)),
        Node("fine", sleeper(2, 0.0)),
    ]
    t0 = time.perf_counter()
    res = await run_dag(nodes)
    assert time.perf_counter() - t0 < 2.0
    assert res["bad"].status == "error" and "kaput" in (res["bad"].error or "")
    assert res["slow"].status == "timeout"
    assert res["after_bad"].status == "skipped" and "bad" in (res["after_bad"].error or "")
    assert res["after_after"].status == "skipped"
    assert res["fine"].status == "ok"


async def test_cancellation_cancels_running_nodes() -> None:
    cancelled: list[str] = []

    async def long(_: Mapping[str, Any]) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append("x")
            raise

    task = asyncio.create_task(run_dag([Node("a", long), Node("b", long)]))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == ["x", "x"]


async def test_duplicate_ids_rejected() -> None:
    with pytest.raises(PlanError, match="duplicate"):
        await run_dag([Node("a", sleeper(1)), Node("a", sleeper(2))])


async def test_long_chain_of_skips_does_not_recurse() -> None:
    async def boom(_: Mapping[str, Any]) -> None:
        raise RuntimeError("first fails")

    nodes = [Node("n0", boom)] + [Node(f"n{i}", sleeper(i, 0.0), deps=(f"n{i-1}",)) for i in range(1, 3000)]
    res = await run_dag(nodes)
    assert res["n2999"].status == "skipped" and len(res) == 3000


async def test_empty_dag() -> None:
    assert await run_dag([]) == {}
