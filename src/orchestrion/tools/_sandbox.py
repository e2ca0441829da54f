"""Isolation backends for the Python sandbox, and the argv that starts one.

Three isolations, strongest first; ``auto`` takes the first that works on this host
(learned once per process by a real probe run) and every result records which ran:

``bwrap``
    bubblewrap (Debian's ``bwrap``): new user, mount, PID, network, IPC and UTS
    namespaces; the code sees only ``/usr``, ``/etc``, the interpreter, a fresh ``/proc``
    and ``/dev``, and its scratch space: an empty size-limited tmpfs ``/tmp`` that holds the
    working directory (the program copied in); no host socket, file or process is
    reachable. No new privileges, no user namespaces (``--disable-userns``).
``namespaces``
    The launcher (:mod:`._launcher`) does it itself with ``unshare(2)``: fresh
    tmpfs over ``/tmp``, ``/run``, ``/dev/shm``, the home directories and every other
    non-system top-level directory, all remaining mounts read-only, a fresh
    ``/proc`` for its PID namespace, a network namespace with no interface up. The
    working directory is scratch space as under bwrap, and ``max_user_namespaces`` is 0
    in the sandbox's own user namespace, so no nested one can be made.
``audit-hook``
    Neither works here (no user namespaces, say). The code still runs in a
    separate process with every limit, and an audit hook refuses sockets, native
    calls, new processes and writes outside its directory, but native code can get
    around a hook: the result says so in ``data["isolation_warning"]``. Pass
    ``isolation="bwrap"`` or ``"namespaces"`` to refuse to run instead.

As root, the code runs under a fresh unused uid, so ``RLIMIT_NPROC`` binds (it never
does for root) and runs cannot touch each other.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import sys
from pathlib import Path
from typing import Any, Literal

from ._limits import kill_until_gone

Isolation = Literal["auto", "bwrap", "namespaces", "audit-hook"]
BACKENDS: tuple[Isolation, ...] = ("bwrap", "namespaces")
WEAK_WARNING = (
    "no namespace isolation on this host (bubblewrap and unshare both failed): the code ran with "
    "resource limits and an audit hook only; install bubblewrap or allow user namespaces"
)
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_SYSTEM = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "sys", "dev"}
_WRITABLE_TMPFS = ("/tmp", "/dev/shm")
_UID_BASE, _UID_SPAN = 1_600_000_000, 300_000_000  # far above real and subordinate uid ranges
_LAUNCHER = (Path(__file__).with_name("_launcher.py")).read_text(encoding="utf-8")

works: dict[str, bool] = {}  # backend -> probed result, learned on first use
last_probe_error: dict[str, str] = {}  # backend -> what its failed probe printed
uids_in_use: set[int] = set()


def fresh_uid() -> int | None:
    """A throw-away uid when root (then RLIMIT_NPROC binds), else None (keep our own)."""
    if os.geteuid() != 0:
        return None
    while (uid := _UID_BASE + secrets.randbelow(_UID_SPAN)) in uids_in_use:
        pass
    uids_in_use.add(uid)
    return uid


def _interpreter_paths() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    return sorted({os.path.realpath(p) for p in paths})


def _untraversable_covers(paths: list[str]) -> set[str]:
    """Ancestors of ``paths`` other users may not traverse (``/root`` holding pyenv, say)."""
    covers: set[str] = set()
    for path in paths:
        parts = path.split("/")
        for i in range(2, len(parts)):
            ancestor = "/".join(parts[:i])
            if not os.stat(ancestor).st_mode & 0o001:
                covers.add(ancestor)
                break
    return covers


def _namespace_covers(workdir: str, home: str | None) -> list[tuple[str, str]]:
    """Every non-system top-level directory plus /run, /var/run, /dev/shm and home, with tmpfs modes."""
    tops = {f"/{e.name}" for e in os.scandir("/") if e.is_dir(follow_symlinks=False) and e.name not in _SYSTEM}
    extra = {"/dev/shm", "/run", "/var/run", *([home] if home else [])}
    candidates = tops | {p for p in extra if os.path.isdir(p) and not os.path.islink(p)}
    covers = {p for p in candidates if not any(p.startswith(o + "/") for o in candidates)}  # outermost only
    return sorted((p, "1777" if p in _WRITABLE_TMPFS else "0755") for p in covers)


def _under_tmp(workdir: str) -> bool:
    return workdir.startswith("/tmp/")


def disk_note(backend: Isolation, workdir: str) -> str:
    """How the call's disk limit was enforced, for the result (``limits["disk"]``)."""
    if backend == "audit-hook":
        return "per file only (RLIMIT_FSIZE): no whole-call disk limit without namespace isolation"
    if _under_tmp(workdir):
        return "one size-limited tmpfs holds the work directory and /tmp; /dev/shm has its own of max_file_mb"
    return "size-limited tmpfs on the work directory and another on /tmp; /dev/shm has its own of max_file_mb"


def _bwrap_argv(workdir: str, uid: int | None, tmpfs_mb: int, disk_mb: int) -> list[str]:
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user", "--disable-userns"]
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    size, disk = str(tmpfs_mb * 1024 * 1024), str(disk_mb * 1024 * 1024)
    argv += ["--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev", "--size", disk, "--tmpfs", "/tmp"]
    argv += ["--size", size, "--tmpfs", "/dev/shm"]
    for path in _interpreter_paths():
        argv += ["--ro-bind", path, path]
    # the work directory is scratch space, never the host's: inside /tmp's tmpfs, or a tmpfs of its own;
    # the launcher adds ``--file FD WORKDIR/main.py`` (the program, copied in)
    argv += ["--perms", "0700", "--dir", workdir] if _under_tmp(workdir) else \
        ["--size", disk, "--perms", "0700", "--tmpfs", workdir]
    argv += ["--chdir", workdir, "--remount-ro", "/"]
    if uid is not None:
        argv += ["--uid", str(uid), "--gid", str(uid)]
    return argv


def launcher_argv(
    backend: Isolation, workdir: str, uid: int | None, limits: dict[str, Any], argv: list[str], env: dict[str, str]
) -> list[str]:
    """``python -I -S -c LAUNCHER CONFIG``: the separate program that isolates itself, then runs ``argv``."""
    interp = _interpreter_paths()
    binds = [*interp] if backend in BACKENDS else [*interp, workdir]  # the work dir is a fresh tmpfs there
    covers = [(p, "0755") for p in sorted(_untraversable_covers(binds))] if uid is not None else []
    if backend == "namespaces":
        home = os.environ.get("HOME")
        covers = sorted({*covers, *_namespace_covers(workdir, home)})
    config = {
        **limits,
        "backend": backend,
        "uid": uid,
        "workdir": workdir,
        "covers": covers,
        "binds": binds,
        "writable": list(_WRITABLE_TMPFS),
        "tmpfs_mb": limits["max_file_mb"],
        "main": os.path.join(workdir, "main.py"),
        "bwrap": _bwrap_argv(workdir, uid, limits["max_file_mb"], limits["disk_mb"]) if backend == "bwrap" else [],
        "argv": argv,
        "env": env,
    }
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, json.dumps(config)]


def available(backend: Isolation) -> bool:
    """Whether ``backend`` can work here at all (before the probe run decides)."""
    if sys.platform != "linux":
        return False
    if backend == "bwrap":
        return shutil.which("bwrap") is not None
    return backend == "namespaces"


def processes_of(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid``."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/status", encoding="utf-8") as fh:
                status = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            continue
        if status.get("Uid", "").split()[:1] == [str(uid)] and "Z" not in status.get("State", "")[:3]:
            found.append(int(entry))
    return found


def kill_uid(uid: int) -> None:
    """SIGKILL every process of a throw-away sandbox uid until none is left."""
    kill_until_gone(lambda: processes_of(uid))


def prepare_workdir(workdir: str, uid: int | None) -> None:
    if uid is not None:
        os.chown(workdir, uid, uid)
    os.chmod(workdir, stat.S_IRWXU)
