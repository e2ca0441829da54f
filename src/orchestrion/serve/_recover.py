"""Crash recovery for `orchestrion serve`: episodes a dead server left ``running`` become ``interrupted``.

Each serve process holds the lock of its own ``runs`` row (the eval runner's lock file,
:mod:`orchestrion.eval._lock`: ``flock`` beside the database, dropped by the kernel when its
holder dies, ``kill -9`` included) from before the row is written until it stops. A server that
starts looks at every serve run still marked ``running``: one whose lock it can take belongs to a
dead process, so its unfinished episodes are marked ``interrupted`` and the run too. A run whose
lock is held belongs to a live server on the same database and is left alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..eval import recover_dead_runs as recover_runs
from ..eval import run_lock
from ..trace.store import TraceStore


def recover_dead_runs(store: TraceStore) -> list[str]:
    """Mark the leftovers of dead serve processes ``interrupted``; returns their run ids."""
    return recover_runs(store, ("serve",))


@contextlib.contextmanager
def own_run(store: TraceStore, run_id: str) -> Iterator[None]:
    """Hold this server's run lock for the block (taken before its row exists)."""
    with run_lock(store.path, run_id):
        yield
