"""Scheduler benchmark: a traced DAG fan-out through orchestrion vs. the official openai SDK.

The fake OpenAI-compatible server (tests/fake_openai_server.py) runs as its own process and
answers every request after ``--delay-ms`` (50 by default). Per fan-out x depth we run
``depth`` layers of ``fanout`` model-call nodes (node i of layer k needs node i of layer
k-1, so the critical path is depth x delay) through ``run_dag`` + ``RunContext.generate``
with tracing on, and the same calls through ``AsyncOpenAI`` + ``asyncio.gather``, layer by
layer. Medians over ``--repeat`` runs of: ratio = wall / (depth x delay), and CPU ms per call
= ``time.process_time`` delta / calls (this process, all threads: the trace writer's SQLite
work counts; the server process does not). A benchmark, not a test: it always exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI
from rich.console import Console
from rich.table import Table

from orchestrion import GenerateConfig, ModelSpec, Pool, PoolConfig, Price, RunContext, ToolRegistry, TraceStore, msg
from orchestrion.runtime import BudgetTracker, Node, run_dag
from orchestrion.trace import Tracer
from orchestrion.trace.tracer import new_id, reset_current, set_current

SERVER_SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "fake_openai_server.py"
MODEL, SERVER_MODEL, MAX_TOKENS = "bench", "fake-model", 16
CALL_CONFIG = GenerateConfig(max_tokens=MAX_TOKENS, temperature=0.0)
TARGET_DELAY_MS = 50.0
TARGET_RATIO = {64: 1.2, 256: 1.8}  # fan-out -> highest acceptable ratio, at 50 ms per call
TARGET_CPU_MS = 0.3  # per call, orchestration and tracing included

console = Console(width=max(140, Console().width))  # keep the table readable when piped


@dataclass
class Sample:
    wall_s: float
    cpu_s: float
    calls: int


@dataclass
class Row:
    fanout: int
    depth: int
    ours: list[Sample] = field(default_factory=list)
    sdk: list[Sample] = field(default_factory=list)


@contextmanager
def fake_server(delay_ms: float, start_timeout_s: float = 20.0) -> Iterator[str]:
    """Run the fake server as a child process and yield its base URL; it is always stopped."""
    cmd = [sys.executable, str(SERVER_SCRIPT), "--port", "0", "--delay-ms", f"{delay_ms:g}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], start_timeout_s)
        url = proc.stdout.readline().strip() if ready else ""
        if not url.startswith("http"):
            raise RuntimeError(f"fake server gave no URL within {start_timeout_s:g}s: {' '.join(cmd)}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


async def measure(work: Callable[[], Awaitable[None]], calls: int,
                  settle: Callable[[], Awaitable[None]] | None) -> Sample:
    """Wall time of ``work``; CPU time of ``work`` plus ``settle`` (committing its trace)."""
    gc.collect()
    cpu0, t0 = time.process_time(), time.perf_counter()
    await work()
    wall = time.perf_counter() - t0
    if settle is not None:
        await settle()
    return Sample(wall, time.process_time() - cpu0, calls)


class Orchestrion:
    """Calls as DAG nodes: run_dag -> RunContext.generate (traced, budgeted) -> Pool -> openai-api."""

    def __init__(self, base_url: str, store: TraceStore) -> None:
        spec = ModelSpec(name=MODEL, backend="openai-api", base_url=base_url, model=SERVER_MODEL,
                         max_concurrency=100_000, price=Price(input_per_mtok=0.15, output_per_mtok=0.60),
                         timeout_s=30.0, max_retries=0)
        self.pool = Pool(PoolConfig(models=[spec]), source="<bench>")
        self.store = store

    @staticmethod
    def nodes(ctx: RunContext, fanout: int, depth: int) -> list[Node]:
        def make(layer: int, i: int) -> Callable[[Mapping[str, Any]], Awaitable[str]]:
            async def run(inputs: Mapping[str, Any]) -> str:
                done = await ctx.generate([msg("user", f"layer {layer} branch {i}")], model=MODEL, config=CALL_CONFIG)
                return done.text
            return run

        return [Node(f"L{k}.{i}", make(k, i),
                     deps=(f"L{k - 1}.{i}",) if k else ()) for k in range(depth) for i in range(fanout)]

    async def run(self, fanout: int, depth: int) -> Sample:
        episode_id = new_id()
        tracer = Tracer(self.store, episode_id)
        ctx = RunContext(self.pool, ToolRegistry([]), tracer, BudgetTracker())
        self.store.submit("INSERT INTO episodes (id, strategy, task, status, started) VALUES (?,?,?,?,?)",
                          (episode_id, "bench-dag", f"fanout={fanout} depth={depth}", "running", time.time()))
        failures: list[str] = []

        async def work() -> None:
            root = tracer.start("episode", "bench-dag", fanout=fanout, depth=depth)
            token = set_current(root)
            try:
                results = await run_dag(self.nodes(ctx, fanout, depth))
            finally:
                reset_current(token)
            failures.extend(f"{r.id}: {r.status} {r.error}" for r in results.values() if r.status != "ok")
            root.end("error" if failures else "ok")

        sample = await measure(work, fanout * depth, self.store.aflush)
        self.store.submit("UPDATE episodes SET status=?, ended=?, finished=1 WHERE id=?",
                          ("error" if failures else "ok", time.time(), episode_id))
        if failures:
            raise RuntimeError(f"{len(failures)} orchestrion node(s) failed; first: {failures[0]}")
        return sample


class Sdk:
    """The reference: the same calls through the official openai SDK, gathered layer by layer."""

    def __init__(self, base_url: str) -> None:
        self.client = AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)

    async def call(self, layer: int, i: int) -> str:
        done = await self.client.chat.completions.create(
            model=SERVER_MODEL, messages=[{"role": "user", "content": f"layer {layer} branch {i}"}],
            max_tokens=MAX_TOKENS, temperature=0.0)
        return done.choices[0].message.content or ""

    async def run(self, fanout: int, depth: int) -> Sample:
        async def work() -> None:
            for layer in range(depth):
                await asyncio.gather(*(self.call(layer, i) for i in range(fanout)))
        return await measure(work, fanout * depth, None)


def ratio(samples: list[Sample], depth: int, delay_ms: float) -> float:
    return statistics.median(s.wall_s for s in samples) / (depth * delay_ms / 1000)


def cpu_ms(samples: list[Sample]) -> float:
    return statistics.median(s.cpu_s / s.calls for s in samples) * 1000


def verdict(row: Row, delay_ms: float) -> str:
    """Orchestrion's numbers against the targets that apply to this row (information only)."""
    misses = ["cpu"] if cpu_ms(row.ours) > TARGET_CPU_MS else []
    limit = TARGET_RATIO.get(row.fanout) if delay_ms == TARGET_DELAY_MS else None
    if limit is not None and ratio(row.ours, row.depth, delay_ms) > limit:
        misses.append(f"ratio>{limit}")
    return "[green]PASS[/]" if not misses else "[red]MISS[/] " + ", ".join(misses)


def report(rows: list[Row], delay_ms: float, repeat: int) -> None:
    table = Table(
        title=f"run_dag + traced generate vs official openai SDK ({delay_ms:g} ms per call, median of {repeat})"
    )
    for name in ("fanout", "depth", "calls", "orchestrion ratio", "orchestrion CPU ms/call",
                 "openai-SDK ratio", "SDK CPU ms/call", "targets"):
        table.add_column(name, justify="left" if name == "targets" else "right")
    for row in rows:
        table.add_row(str(row.fanout), str(row.depth), str(row.fanout * row.depth),
                      f"{ratio(row.ours, row.depth, delay_ms):.2f}", f"{cpu_ms(row.ours):.3f}",
                      f"{ratio(row.sdk, row.depth, delay_ms):.2f}", f"{cpu_ms(row.sdk):.3f}", verdict(row, delay_ms))
    console.print(table)
    console.print(f"targets at {TARGET_DELAY_MS:g} ms per call: ratio <= {TARGET_RATIO[64]} at fan-out 64 and "
                  f"<= {TARGET_RATIO[256]} at fan-out 256 (any depth; checked only with --delay-ms 50); "
                  f"<= {TARGET_CPU_MS} ms CPU per call including orchestration and tracing (every row).")


async def bench(args: argparse.Namespace, base_url: str, store: TraceStore) -> list[Row]:
    ours, sdk = Orchestrion(base_url, store), Sdk(base_url)
    try:
        for _ in range(2):  # warm-up: imports, code paths, and as many connections as the widest fan-out
            async with asyncio.timeout(args.run_timeout):
                await ours.run(max(args.fanout), 1)
                await sdk.run(max(args.fanout), 1)
        # The SDK's import-time heap makes one full collection cost ~50 ms here; freeze it so an
        # automatic collection inside a measured run doesn't charge it to whichever client runs.
        gc.collect()
        gc.freeze()
        rows: list[Row] = []
        for fanout in args.fanout:
            for depth in args.depth:
                row = Row(fanout, depth)
                for r in range(args.repeat):  # alternate who goes first, so drift hurts both alike
                    order = [(ours.run, row.ours), (sdk.run, row.sdk)]
                    for run, samples in order if r % 2 == 0 else order[::-1]:
                        async with asyncio.timeout(args.run_timeout):
                            samples.append(await run(fanout, depth))
                console.print(
                    f"  fanout {fanout:>3} depth {depth}: orchestrion {ratio(row.ours, depth, args.delay_ms):.2f}x "
                    f"{cpu_ms(row.ours):.3f} ms/call | SDK {ratio(row.sdk, depth, args.delay_ms):.2f}x "
                    f"{cpu_ms(row.sdk):.3f} ms/call",
                    style="dim",
                )
                rows.append(row)
        return rows
    finally:
        await ours.pool.aclose()
        await sdk.client.close()


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got '{text}'")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Scheduler benchmark: traced DAG fan-out vs the official openai SDK")
    p.add_argument("--fanout", type=int_list, default=[1, 4, 16, 64, 256],
                   help="comma-separated (default 1,4,16,64,256)")
    p.add_argument("--depth", type=int_list, default=[1, 2, 4], help="comma-separated (default 1,2,4)")
    p.add_argument("--delay-ms", type=float, default=50.0, help="server delay per call (default 50)")
    p.add_argument("--repeat", type=int, default=3, help="runs per configuration and client; medians shown (default 3)")
    p.add_argument("--run-timeout", type=float, default=120.0, help="seconds allowed for one measured run")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds allowed for the whole benchmark")
    args = p.parse_args(argv)
    if args.delay_ms <= 0 or args.repeat < 1:
        p.error("--delay-ms must be > 0 and --repeat >= 1")

    async def everything(url: str, store: TraceStore) -> list[Row]:
        async with asyncio.timeout(args.timeout):
            return await bench(args, url, store)

    with tempfile.TemporaryDirectory(prefix="orchestrion-bench-") as tmp, fake_server(args.delay_ms) as url:
        store = TraceStore(Path(tmp) / "traces.db")
        try:
            rows = asyncio.run(everything(url, store))
        except TimeoutError:
            console.print(
                f"[red]timed out[/] (--run-timeout {args.run_timeout:g}s per run, --timeout {args.timeout:g}s in all)"
            )
            return 1
        else:
            store.flush()
            counts = store.query("SELECT COUNT(*) AS spans, SUM(kind = 'call') AS calls, "
                                 "SUM(kind = 'episode') AS episodes FROM spans")[0]
        finally:
            store.close()
    report(rows, args.delay_ms, args.repeat)
    console.print(f"tracing was on: {counts['spans']} spans committed ({counts['calls']} call spans under "
                  f"{counts['episodes']} episode spans, warm-up included) to a temporary SQLite trace store")
    return 0


if __name__ == "__main__":
    sys.exit(main())
