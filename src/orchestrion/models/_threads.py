"""One llama.cpp thread budget for the whole process, split among the models that are generating.

Calls to different embedded models run at the same time (each in its own worker
thread), and each llama.cpp context starts its own pool of compute threads. Two busy
models with two threads each on a two-core machine oversubscribe the cores, and
llama.cpp's threads spin at their barriers, so both slow down. Here every call
registers itself as generating and takes ``max(1, total // busy)`` threads, re-checked
between prompt chunks and between tokens; a model with a fixed ``n_threads`` keeps it.

The total is ``$ORCHESTRION_THREADS`` when set, else the cores that other processes leave
free, read when a call starts (:class:`CpuLoad`): the CPU time the whole machine spent
since the last reading (``/proc/stat``) less this process's own (``/proc/self/stat``), in
cores. Processes under ``nice`` count too: a niced test run next to a 2-thread model made
the demo 2-3x slower (llama.cpp's threads wait for each other at every layer, so one
preempted thread stalls both). A core counts as
free when others use at most ``FREE_THRESHOLD`` of it, and at least 1 thread is used. An
idle machine thus gives a lone model every core; one where anything else holds a core
gives it the rest. Where ``/proc`` is missing, the 1-minute load average stands in. The
same count serves prompt batches (``n_threads_batch``) and decoding (``n_threads``), and
each Completion's ``extra["threads"]`` records it (a ``threads`` attribute on the call's
span).

Measured on the 2-core development machine (shared, so +-10 %), tokens/s for one model
with a fixed thread count, idle and next to a process spinning on one core
(prompt: ~420-token prompts; decode: 64 tokens):

    model                  threads  prompt idle  decode idle  prompt busy  decode busy
    Qwen2.5-Coder-0.5B        1          77           24           75           22
    Qwen2.5-Coder-0.5B        2         132           39           51           11
    SmolLM2-135M              1         151           84          164           85
    SmolLM2-135M              2         264          110          108           28

Next to another llama.cpp process generating (as when someone runs tests on the same
machine), Qwen 0.5B prompt tokens/s with 1 / 2 threads: 53 / 38 (neighbour on 2
threads), 77 / 37 (neighbour on 1 thread). In one bench/kv_reuse.py run under outside
load (load average ~2.9), 2 prompt threads fell to 12 prompt tok/s on 0.5B. Two threads win
1.6-1.7x on an idle machine and lose 1.4-3x as soon as anything else holds a core,
hence 1 thread for a lone model on 2 cores. Two Qwen 0.5B instances generating
at once (~420 prompt + 48 output tokens each, wall time for both): 2 threads each 8.0 s,
1 each 8.7 s, budget split with ORCHESTRION_THREADS=2 9.4 s (SmolLM2: 3.4-3.9, 3.7-3.8,
3.3-3.5 s): no difference beyond noise on 2 cores. The split is for larger totals, where
every busy model taking all cores would oversubscribe them many times over.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .._errors import ConfigError


def env_int(name: str, minimum: int) -> int | None:
    """``$name`` as a whole number of at least ``minimum``, or None when it is not set; a
    one-line ConfigError naming the variable otherwise."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}='{raw}' is not a whole number") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}")
    return value


def env_threads() -> int | None:
    """``$ORCHESTRION_THREADS`` as a number, or None when it is not set."""
    return env_int("ORCHESTRION_THREADS", 1)


# a core is free when other processes use at most this share of it: two threads on 2 cores lost
# 1.4-3x as soon as anything else held a core (the table above)
FREE_THRESHOLD = 0.3


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def free_threads(n_cores: int, others: float) -> int:
    """Threads for a machine of ``n_cores`` where other processes use ``others`` cores."""
    taken = max(0, math.ceil(others - FREE_THRESHOLD))
    return max(1, min(n_cores, n_cores - taken))


@dataclass(frozen=True)
class _Sample:
    wall: float
    busy: int  # ticks the whole machine spent busy
    own: int  # ticks this process spent


def _read_sample() -> _Sample | None:
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
        with open("/proc/self/stat", encoding="ascii") as fh:
            mine = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    own = int(mine[11]) + int(mine[12])  # utime, stime (fields 14 and 15)
    return _Sample(time.monotonic(), user + nice + system + irq + softirq + steal, own)


class CpuLoad:
    """How many cores other processes use, measured between readings at least ``window`` s apart."""

    def __init__(self, window: float = 0.5, first_window: float = 0.1) -> None:
        self.window = window
        self.first_window = first_window
        self._lock = threading.Lock()
        self._last = _read_sample()
        self._estimate: float | None = None
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def others(self) -> float:
        """Cores busy with other processes' work (0 when it cannot be told)."""
        with self._lock:
            now = _read_sample()
            if now is None or self._last is None:
                return self._from_loadavg()
            span = now.wall - self._last.wall
            if self._estimate is not None and span < self.window:
                return self._estimate
            if span < self.first_window:  # the first reading of this process: wait for a window
                time.sleep(self.first_window - span)
                now = _read_sample() or now
                span = now.wall - self._last.wall
            ticks = span * self._tick
            self._estimate = max(0.0, (now.busy - self._last.busy - (now.own - self._last.own)) / ticks)
            self._last = now
            return self._estimate

    @staticmethod
    def _from_loadavg() -> float:
        try:
            return max(0.0, os.getloadavg()[0] - BUDGET.busy_count)
        except OSError:
            return 0.0


def thread_total() -> int:
    """Threads all embedded models share: ``$ORCHESTRION_THREADS``, else the cores other
    processes leave free now (:func:`free_threads`, at least 1)."""
    return env_threads() or free_threads(cores(), LOAD.others())


def thread_share(total: int, busy: int) -> int:
    """Threads for one of ``busy`` generating models out of ``total``: never below 1."""
    return max(1, total // max(1, busy))


class ThreadBudget:
    """Counts the models generating now; ``epoch`` changes whenever that count does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0
        self._epoch = 0

    @property
    def busy_count(self) -> int:
        return self._busy

    @property
    def epoch(self) -> int:
        return self._epoch

    @contextmanager
    def generating(self) -> Iterator[None]:
        with self._lock:
            self._busy += 1
            self._epoch += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
                self._epoch += 1

    def threads(self, fixed: int | None = None, total: int | None = None) -> int:
        """The thread count a generating model should use now (prompt batches and decoding)."""
        if fixed is not None:
            return fixed
        return thread_share(thread_total() if total is None else total, self._busy)


BUDGET = ThreadBudget()
LOAD = CpuLoad()
