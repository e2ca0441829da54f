"""Limits that hold for a sandboxed call as a whole: every process and file it makes together.

Per-process rlimits alone let six forks of 400 MB hold 2.4 GB under ``memory_mb=512``. So the
call's memory and process count are bounded together, by the strongest means this host allows:

``cgroup-v2``
    A child cgroup of our own (where the unified hierarchy has the memory and pids controllers
    and lets us create one): ``memory.max``, ``memory.swap.max = 0``, ``pids.max``.
``cgroup-v1``
    The same on the legacy memory and pids hierarchies (as root): ``memory.limit_in_bytes``,
    ``memory.memsw.limit_in_bytes`` where swap is accounted, ``pids.max``.
``accounted``
    Neither: a watchdog sums the resident memory of every process of the call (the launcher and
    its descendants: the sandbox's PID namespace adopts every orphan) every ``WATCH_S`` seconds
    and kills the whole call past the limit; ``RLIMIT_AS`` still caps each process, and ``RLIMIT_NPROC`` under the
    throw-away uid caps the call's processes.

The launcher joins the cgroup (it writes its pid to ``cgroup.procs``) before it starts anything,
so every process of the call is born inside. Disk is bounded by the scratch tmpfs (see
:mod:`._sandbox`). :meth:`CallLimits.record` says which limits held and how, for the result.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WATCH_S = 0.02  # the accounted fallback's polling interval
CGROUPS_ENABLED = True  # tests turn cgroups off to exercise the accounted fallback on a host that has them
JOIN_REFUSED = "orchestrion-sandbox: cgroup:"  # how the launcher says it could not enter the cgroup
cgroups_refused = False  # learned once per process: a cgroup was made but the launcher could not join it
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class CallLimits:
    """The whole-call limits of one sandboxed run, and the cgroup (if any) that enforces them."""

    memory_mb: int
    max_procs: int
    disk_mb: int
    mode: str = "accounted"  # cgroup-v2 | cgroup-v1 | accounted
    dirs: list[Path] = field(default_factory=list)  # the cgroup directories (one per v1 hierarchy)
    breach: str | None = None  # set once a whole-call limit stopped the run
    peak_mb: float = 0.0  # accounted mode: the largest total RSS seen

    @property
    def procs_files(self) -> list[str]:
        """Where the launcher writes its pid to join the cgroup(s)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def record(self, disk: str) -> dict[str, Any]:
        """Which limits held for the whole call, and how (``data["limits"]`` of the tool result)."""
        how = {"cgroup-v2": "cgroup v2 (memory.max, memory.swap.max=0)",
               "cgroup-v1": "cgroup v1 (memory.limit_in_bytes)",
               "accounted": f"total RSS of the call's processes checked every {WATCH_S:g}s, the call killed "
                            "past it; RLIMIT_AS per process"}[self.mode]
        procs = ("pids.max of the cgroup" if self.mode != "accounted"
                 else "RLIMIT_NPROC of the call's throw-away uid (or of the user's own processes)")
        return {"memory_mb": self.memory_mb, "memory": how, "max_procs": self.max_procs, "procs": procs,
                "disk_mb": self.disk_mb, "disk": disk, "enforced_by": self.mode}


def create(memory_mb: int, max_procs: int, disk_mb: int) -> CallLimits:
    """The call's limits, with a fresh cgroup where this host allows one."""
    limits = CallLimits(memory_mb, max_procs, disk_mb)
    if CGROUPS_ENABLED and not cgroups_refused:
        for attempt in (_v2, _v1):
            with contextlib.suppress(OSError, ValueError):
                if attempt(limits):
                    return limits
            _remove(limits.dirs)
            limits.dirs = []
    return limits


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, super options) of every cgroup mount."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fstype, _, options = (right.split() + ["", "", ""])[:3]
            if fstype in ("cgroup", "cgroup2"):
                found.append((left.split()[4], fstype, set(options.split(","))))
    return found


def _own(controller: str) -> str:
    """Our cgroup's path within the hierarchy of ``controller`` ('' for the unified one)."""
    with open("/proc/self/cgroup", encoding="utf-8") as fh:
        for line in fh:
            _, names, path = line.rstrip("\n").split(":", 2)
            if controller in names.split(","):
                return path
    raise ValueError(f"no {controller or 'unified'} cgroup")


def _child(base: Path) -> Path:
    path = base / f"orchestrion-sbx-{secrets.token_hex(6)}"
    path.mkdir(mode=0o755)
    return path


def _v2(limits: CallLimits) -> bool:
    mount = next((m for m, kind, _ in _mounts() if kind == "cgroup2"), None)
    if mount is None:
        return False
    parent = Path(mount) / _own("").lstrip("/")
    if not {"memory", "pids"} <= set((parent / "cgroup.controllers").read_text().split()):
        return False
    if not {"memory", "pids"} <= set((parent / "cgroup.subtree_control").read_text().split()):
        (parent / "cgroup.subtree_control").write_text("+memory +pids")  # refused where the parent holds processes
    limits.dirs = [_child(parent)]
    group = limits.dirs[0]
    (group / "memory.max").write_text(str(limits.memory_mb * 1024 * 1024))
    with contextlib.suppress(OSError):
        (group / "memory.swap.max").write_text("0")
    (group / "pids.max").write_text(str(limits.max_procs))
    limits.mode = "cgroup-v2"
    return True


def _v1(limits: CallLimits) -> bool:
    mounts = {c: m for m, kind, options in _mounts() if kind == "cgroup" for c in options & {"memory", "pids"}}
    if set(mounts) != {"memory", "pids"}:
        return False
    memory = _child(Path(mounts["memory"]) / _own("memory").lstrip("/"))
    limits.dirs = [memory]
    pids = _child(Path(mounts["pids"]) / _own("pids").lstrip("/"))
    limits.dirs.append(pids)
    (memory / "memory.limit_in_bytes").write_text(str(limits.memory_mb * 1024 * 1024))
    with contextlib.suppress(OSError):  # only where swap is accounted
        (memory / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_mb * 1024 * 1024))
    (pids / "pids.max").write_text(str(limits.max_procs))
    limits.mode = "cgroup-v1"
    return True


def oom_kills(limits: CallLimits) -> int:
    """How many processes the kernel killed for the cgroup's memory limit so far."""
    if not limits.dirs:
        return 0
    name = "memory.events" if limits.mode == "cgroup-v2" else "memory.oom_control"
    with contextlib.suppress(OSError, ValueError):
        for line in (limits.dirs[0] / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return 0


def members(limits: CallLimits) -> list[int]:
    """The pids in the call's cgroup(s)."""
    pids: set[int] = set()
    for d in limits.dirs:
        with contextlib.suppress(OSError, ValueError):
            pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
    return sorted(pids)


def kill_members(limits: CallLimits) -> None:
    """SIGKILL everything in the cgroup(s) until it is empty (``cgroup.kill`` where v2 has it)."""
    if limits.mode == "cgroup-v2":
        with contextlib.suppress(OSError):
            (limits.dirs[0] / "cgroup.kill").write_text("1")
    kill_until_gone(lambda: members(limits))


def kill_until_gone(processes: Callable[[], list[int]]) -> None:
    """SIGKILL every pid ``processes()`` lists, again and again (about 1 s at most) until it lists none."""
    for _ in range(200):
        if not (pids := processes()):
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def release(limits: CallLimits) -> None:
    """Kill what is left and remove the cgroup(s)."""
    if limits.dirs:
        kill_members(limits)
        _remove(limits.dirs)


def _remove(dirs: list[Path]) -> None:
    for d in reversed(dirs):
        for _ in range(50):  # a killed process leaves its cgroup a moment after it is reaped
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)


def _tree(root: int) -> list[int]:
    """``root`` and every process descended from it (the sandbox's own PID 1 adopts its orphans),
    read from each thread's ``children`` file: the cost grows with the call's processes, not the host's."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                    todo.extend(int(child) for child in fh.read().split())
            except FileNotFoundError:
                if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                    continue  # the thread ended meanwhile
                return _scan_tree(root)  # a kernel without CONFIG_PROC_CHILDREN
            except (OSError, ValueError):
                continue
    return found


def _scan_tree(root: int) -> list[int]:
    """:func:`_tree` by reading every process's parent (slower: the whole of /proc)."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def resident_mb(pids: list[int]) -> float:
    """The summed anonymous resident memory of ``pids`` (gone ones count 0), in MiB: what they
    allocated; the interpreter's shared file pages are not counted once per process, and tmpfs
    pages are bounded by the scratch size already."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
                fields = fh.read().split()
            total += int(fields[1]) - int(fields[2])
        except (OSError, ValueError, IndexError):
            continue
    return total * _PAGE / (1024 * 1024)


def over_limit(limits: CallLimits, root: int) -> bool:
    """Whether the call (``root``, the launcher, and its descendants) broke a whole-call memory
    limit; sets ``limits.breach`` when it did."""
    if limits.mode != "accounted":
        if oom_kills(limits):
            limits.breach = (f"the call went over its memory limit of {limits.memory_mb} MB (all its processes "
                             "together) and was killed")
        return limits.breach is not None
    used = resident_mb(_tree(root))
    limits.peak_mb = max(limits.peak_mb, used)
    if used > limits.memory_mb:
        limits.breach = (f"the call went over its memory limit of {limits.memory_mb} MB (its processes held "
                         f"{used:.0f} MB together) and was killed")
    return limits.breach is not None


def over_limit_after(limits: CallLimits) -> None:
    """Once the call ended: record a cgroup OOM kill the watchdog had no time to see."""
    if limits.mode != "accounted" and limits.breach is None and oom_kills(limits):
        over_limit(limits, 0)
