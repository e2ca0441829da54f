"""One process at a time per eval run: an advisory lock file beside the trace database.

The lock is ``flock(2)`` on ``<db>.run-<RUN_ID>.lock``: the kernel drops it when its
holder exits, ``kill -9`` included, so a lock left by a dead process is simply free
again and the next taker rewrites the holder note (pid, host, start time). A taker
checks, once it holds the lock, that the file is still the one at that path (the
releaser unlinks it while holding it), so two processes never hold locks on two
different files for the same run.

The same lock tells a later process whether a run still marked ``running`` has a live holder:
:func:`recover_dead_runs` marks the leftovers of those whose lock is free ``interrupted`` (what
``orchestrion serve`` does at start, and ``run`` and ``eval`` before they start their own).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import RunLockedError
from ..status import RunStatus

if TYPE_CHECKING:
    from ..trace.store import TraceStore

LOCKED_KINDS = ("run", "serve")  # kinds of runs whose process holds the run's lock from before its row exists


def lock_path(db: Path, run_id: str) -> Path:
    return db.with_name(f"{db.name}.run-{run_id}.lock")


def _holder(path: Path) -> str:
    try:
        note = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        note = {}
    started = note.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return f"pid {note.get('pid', '?')} on host {note.get('host', '?')} since {when}"


def _take(path: Path) -> int:
    """An open fd holding the lock on the file now at ``path``; raises RunLockedError if held."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLockedError(
                f"run {path.name.split('.run-')[-1].removesuffix('.lock')} is already being run by "
                f"{_holder(path)}; wait for it to finish or stop that process, then resume again"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the releaser unlinked it between our open and our lock: try the new file


@contextlib.contextmanager
def run_lock(db: Path, run_id: str) -> Iterator[Path]:
    """Hold the run's lock for the block; RunLockedError names the live holder."""
    path = lock_path(db, run_id)
    fd = _take(path)
    try:
        note = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(note).encode(), 0)
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)


def recover_dead_runs(store: TraceStore, kinds: Sequence[str] = LOCKED_KINDS) -> list[str]:
    """Runs of ``kinds`` still marked ``running`` whose lock is free belong to a process that is
    gone (killed, or stopped by a full disk before it could close them): their unfinished and
    cancelled episodes become ``interrupted``, and the run too. Returns their ids; a run whose
    lock is held (a live process on the same database) is left alone."""
    recovered = []
    for kind in kinds:
        for run in store.runs(kind=kind):
            if run.status != RunStatus.RUNNING:
                continue
            try:
                with run_lock(store.path, run.id):
                    store.mark_interrupted(run.id)
                    store.set_run_status(run.id, RunStatus.INTERRUPTED)
                    store.flush()
            except RunLockedError:
                continue  # a live process owns it
            recovered.append(run.id)
    return recovered
