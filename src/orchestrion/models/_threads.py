"""One llama.cpp thread budget for the whole process, split among the models that are generating.

Calls to different embedded models run at the same time (each in its own worker
thread), and each llama.cpp context starts its own pool of compute threads. Two busy
models with two threads each on a two-core machine oversubscribe the cores, and
llama.cpp's threads spin at their barriers, so both slow down. Here every call
registers itself as generating and takes ``max(1, total // busy)`` threads, re-checked
between prompt chunks and between tokens; a model with a fixed ``n_threads`` keeps it.

The total is ``$ORCHESTRION_THREADS`` when set, else ``os.cpu_count()`` less one core
(``RESERVED_CORES``, at least 1 thread) left to the event loop, the Python sandbox and
whatever else runs on the machine. The same count serves prompt batches
(``n_threads_batch``) and decoding (``n_threads``). On a 2-core machine a lone model
thus uses 1 thread for both (llama-cpp-python's own default had been 2 for prompt
batches); ``ORCHESTRION_THREADS=2`` says the machine is otherwise idle.

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

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .._errors import ConfigError


def env_threads() -> int | None:
    """``$ORCHESTRION_THREADS`` as a number, or None when it is not set."""
    raw = os.environ.get("ORCHESTRION_THREADS")
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"ORCHESTRION_THREADS='{raw}' is not a whole number") from None
    if value < 1:
        raise ConfigError("ORCHESTRION_THREADS must be at least 1")
    return value


# cores left to everything else (event loop, sandbox, other processes) when the total is not set
RESERVED_CORES = 1


def thread_total() -> int:
    """Threads all embedded models share: ``$ORCHESTRION_THREADS``, else the CPU count less
    ``RESERVED_CORES`` (at least 1)."""
    return env_threads() or max(1, (os.cpu_count() or 1) - RESERVED_CORES)


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
