"""The DAG scheduler: every ready node runs at once, within limits.

A node becomes ready when all its dependencies have finished well. Nodes whose
dependency failed are skipped with that reason. Per-model concurrency is
enforced by the pool; this module adds an optional global parallelism cap,
per-node timeouts and clean cancellation of everything still running.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import PlanError
from ..status import NodeStatus

NodeFn = Callable[[Mapping[str, Any]], Awaitable[Any]]


@dataclass
class Node:
    """One unit of work; ``run`` receives the values of its dependencies by id."""

    id: str
    run: NodeFn
    deps: tuple[str, ...] = ()
    timeout_s: float | None = None


@dataclass
class NodeResult:
    id: str
    status: NodeStatus
    value: Any = None
    error: str | None = None
    started: float | None = None
    ended: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def topological_order(nodes: Mapping[str, Iterable[str]]) -> list[str]:
    """Kahn's algorithm in O(V+E); raises PlanError naming a missing dependency or a cycle."""
    deps = {n: list(d) for n, d in nodes.items()}
    for n, ds in deps.items():
        for d in ds:
            if d not in deps:
                raise PlanError(f"node '{n}' depends on unknown node '{d}'")
    indegree = {n: len(ds) for n, ds in deps.items()}
    children: dict[str, list[str]] = {n: [] for n in deps}
    for n, ds in deps.items():
        for d in ds:
            children[d].append(n)
    ready = [n for n, k in indegree.items() if k == 0]
    order: list[str] = []
    while ready:
        n = ready.pop()
        order.append(n)
        for c in children[n]:
            indegree[c] -= 1
            if indegree[c] == 0:
                ready.append(c)
    if len(order) != len(deps):
        stuck = sorted(n for n in deps if n not in set(order))
        raise PlanError(f"plan has a cycle among nodes: {', '.join(stuck)}")
    return order


async def run_dag(nodes: Iterable[Node], *, max_parallel: int | None = None) -> dict[str, NodeResult]:
    """Run a DAG; returns one result per node. Cancelling the caller cancels every running node.

    Bookkeeping is O(V+E) overall: each node keeps a count of unfinished
    dependencies, and a finished node only visits its own children.
    """
    by_id: dict[str, Node] = {}
    for node in nodes:
        if node.id in by_id:
            raise PlanError(f"duplicate node id '{node.id}'")
        by_id[node.id] = node
    topological_order({n.id: n.deps for n in by_id.values()})
    results: dict[str, NodeResult] = {}
    if not by_id:
        return results
    children: dict[str, list[str]] = {i: [] for i in by_id}
    waiting = {i: len(n.deps) for i, n in by_id.items()}
    for n in by_id.values():
        for d in n.deps:
            children[d].append(n.id)
    gate = asyncio.Semaphore(max_parallel) if max_parallel else None
    running: set[asyncio.Task[NodeResult]] = set()
    all_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def execute(node: Node) -> NodeResult:
        inputs = {d: results[d].value for d in node.deps}
        if gate is not None:
            await gate.acquire()
        started = time.perf_counter()
        try:
            if node.timeout_s is None:
                value = await node.run(inputs)
            else:
                async with asyncio.timeout(node.timeout_s):
                    value = await node.run(inputs)
            return NodeResult(node.id, NodeStatus.OK, value, started=started, ended=time.perf_counter())
        except TimeoutError:
            return NodeResult(node.id, NodeStatus.TIMEOUT, error=f"timed out after {node.timeout_s:g}s",
                              started=started, ended=time.perf_counter())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return NodeResult(node.id, NodeStatus.ERROR, error=f"{type(exc).__name__}: {exc}", started=started,
                              ended=time.perf_counter())
        finally:
            if gate is not None:
                gate.release()

    def settle(first_id: str, first: NodeResult | None) -> None:
        """Record a result, then start (or skip) every child it made ready; iterative, no recursion."""
        todo: list[tuple[str, NodeResult | None]] = [(first_id, first)]
        while todo:
            node_id, result = todo.pop()
            node = by_id[node_id]
            if result is None:  # ready to start: skip if a dependency failed
                bad = next((d for d in node.deps if results[d].status != NodeStatus.OK), None)
                if bad is None:
                    task = asyncio.create_task(execute(node), name=f"node:{node_id}")
                    running.add(task)
                    task.add_done_callback(on_done)
                    continue
                result = NodeResult(node_id, NodeStatus.SKIPPED, error=f"dependency '{bad}' {results[bad].status}")
            results[node_id] = result
            for child in children[node_id]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    todo.append((child, None))
        if len(results) == len(by_id) and not all_done.done():
            all_done.set_result(None)

    def on_done(task: asyncio.Task[NodeResult]) -> None:
        running.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:  # not an Exception subclass (execute catches those): stop everything
            if not all_done.done():
                all_done.set_exception(exc)
            return
        result = task.result()
        settle(result.id, result)

    for node_id, node in by_id.items():
        if not node.deps:
            settle(node_id, None)
    try:
        await all_done
    except BaseException:
        for task in list(running):
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
    return results
