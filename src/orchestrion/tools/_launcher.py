"""The sandbox launcher: a separate program that isolates itself, then execs the code.

Nothing here runs in the orchestrator's process. :mod:`._sandbox` reads this file's
source and starts it as ``python -I -S -c SOURCE CONFIG-JSON``, so every ``unshare``
and ``mount`` happens in a fresh single-threaded interpreter, never in a
``preexec_fn`` while the trace writer thread is alive. Standard library only.

The config names a backend:

``bwrap``
    Set the limits, then (as root) enter a private mount namespace where the
    interpreter is reachable by the throw-away uid, drop to that uid, set
    no-new-privileges and exec bubblewrap, which builds a minimal read-only view.
``audit-hook``
    Only the limits and no-new-privileges; the code's own prelude installs the hook.
``namespaces``
    Unshare mount, PID and network namespaces (plus a user namespace when not
    root), cover every top-level directory that is not a system one with an
    empty tmpfs (``/tmp``'s sized as the call's disk limit), bind back the
    interpreter, make the working directory fresh scratch space with the program
    copied in, make every other mount read-only, then fork PID 1 of the new PID
    namespace, which mounts a fresh ``/proc``, drops to the throw-away uid, forbids
    nested user namespaces and runs the code as PID 2.

Every backend first joins the call's cgroup(s), when :mod:`._limits` made any.

A setup failure exits 125 with one line on stderr starting ``orchestrion-sandbox:``.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys
from typing import Any, NoReturn

Config = dict[str, Any]

SETUP_FAILED = 125
_NEWNS, _NEWUSER, _NEWPID, _NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
_RDONLY, _NOSUID, _NODEV, _NOEXEC, _REMOUNT, _BIND, _REC, _PRIVATE = 1, 2, 4, 8, 0x20, 0x1000, 0x4000, 0x40000
_KEPT = {"nosuid": _NOSUID, "nodev": _NODEV, "noexec": _NOEXEC}
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 1, 4, 38
_libc = ctypes.CDLL(None, use_errno=True)


def _fail(message: str) -> NoReturn:
    os.write(2, f"orchestrion-sandbox: {message}\n".encode())
    os._exit(SETUP_FAILED)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    raw = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    if _libc.mount(raw[0], raw[1], raw[2], ctypes.c_ulong(flags), raw[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _unshare(flags: int) -> None:
    if _libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")


def _limits(cfg: Config) -> None:
    mib = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cfg["memory_mb"] * mib,) * 2)
    resource.setrlimit(resource.RLIMIT_CPU, (cfg["cpu_s"], cfg["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["max_file_mb"] * mib,) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if cfg.get("nproc") is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (cfg["nproc"],) * 2)


def _join_cgroup(cfg: Config) -> None:
    """Enter the call's cgroup(s) first: every process of the call is born inside."""
    for path in cfg.get("cgroup_procs") or []:
        try:
            with open(path, "w", encoding="ascii") as fh:
                fh.write(str(os.getpid()))
        except OSError as exc:  # the caller then runs the call again under its accounted limits
            _fail(f"cgroup: cannot join {path}: {exc.strerror or exc}")


def _read_main(cfg: Config) -> bytes:
    with open(cfg["main"], "rb") as fh:
        return fh.read()


def _scratch(cfg: Config, program: bytes) -> None:
    """The work directory as fresh scratch space, never the host's: inside /tmp's size-limited
    tmpfs, or a tmpfs of its own; the program is copied in."""
    workdir, uid = cfg["workdir"], cfg["uid"]
    os.makedirs(workdir, mode=0o700, exist_ok=True)
    if not workdir.startswith("/tmp/"):
        _mount("tmpfs", workdir, "tmpfs", _NOSUID | _NODEV, f"mode=0700,size={cfg['disk_mb']}m")
    main = os.path.join(workdir, "main.py")
    fd = os.open(main, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(program)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    if uid is not None:
        os.chown(workdir, uid, uid)
        os.chown(main, uid, uid)
    os.chmod(workdir, 0o700)


def _forbid_nested_userns(uid: int | None) -> None:
    """No user namespace can be made inside the sandbox: ``max_user_namespaces`` = 0 in the
    sandbox's own user namespace (as root, one is made for it here, mapping its uid to itself),
    as bubblewrap's ``--disable-userns`` does. A host where even this one cannot be made allows
    none to the sandbox's uid anyway."""
    if uid is not None:
        _libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # a changed uid is not dumpable: /proc/self/*_map refuse it
        try:
            _unshare(_NEWUSER)
        except OSError:
            _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
            return
        _map_user(uid, uid)
    with open("/proc/sys/user/max_user_namespaces", "w", encoding="ascii") as fh:
        fh.write("0")
    _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # the code cannot ptrace this PID 1 and its namespace powers


def _mount_points() -> list[tuple[str, int]]:
    """Every mount point with the nosuid/nodev/noexec flags to keep, from mountinfo."""
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        rows = [line.split() for line in fh]

    def unescape(path: str) -> str:  # mountinfo writes a space as \\040
        return path.encode().decode("unicode_escape") if "\\" in path else path

    return [(unescape(r[4]), sum(_KEPT.get(o, 0) for o in r[5].split(","))) for r in rows]


def _cover(cfg: Config) -> None:
    """Empty tmpfs over each cover, then the interpreter and working directory bound back."""
    _mount(None, "/", None, _REC | _PRIVATE)  # nothing below reaches the host
    fds = [(os.open(path, os.O_PATH | os.O_DIRECTORY), path) for path in cfg["binds"]]
    for path, mode in cfg["covers"]:
        size = cfg["disk_mb"] if path == "/tmp" else cfg["tmpfs_mb"]  # /tmp is the call's scratch space
        _mount("tmpfs", path, "tmpfs", _NOSUID | _NODEV, f"mode={mode},size={size}m")
    for fd, path in fds:
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, _BIND | _REC)
        os.close(fd)


def _read_only(writable: set[str]) -> None:
    for point, flags in _mount_points():
        if point in writable or point.startswith("/proc"):
            continue
        try:
            _mount(None, point, None, _REMOUNT | _BIND | _RDONLY | flags)
        except OSError:
            if point == "/":
                raise


def _map_user(uid: int, gid: int) -> None:
    """Inside a fresh user namespace (not root): keep the same ids."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as fh:
            fh.write(text)


def _drop(uid: int | None) -> None:
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS)")


def _wait_for(pid: int) -> int:
    while True:
        got, status = os.waitpid(-1, 0)
        if got == pid:
            return os.waitstatus_to_exitcode(status)


def _exit_like(code: int) -> NoReturn:
    """Hand a child's ending on: an exit code as is, a signal death as that signal."""
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


def _init(cfg: Config) -> NoReturn:
    """PID 1 of the sandbox: fresh /proc, drop privileges, run the code as PID 2, reap orphans."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # die with the launcher
    _mount("proc", "/proc", "proc", _NOSUID | _NODEV | _NOEXEC)
    _drop(cfg["uid"])
    _forbid_nested_userns(cfg["uid"])
    os.chdir(cfg["workdir"])
    if (child := os.fork()) == 0:
        try:
            os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
        finally:
            os._exit(127)
    code = _wait_for(child)
    os._exit(128 - code if code < 0 else code)


def _namespaces(cfg: Config) -> NoReturn:
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    _unshare(_NEWNS | _NEWPID | _NEWNET | (0 if root else _NEWUSER))
    if not root:
        _map_user(uid, gid)
    program = _read_main(cfg)
    _cover(cfg)
    _scratch(cfg, program)
    _read_only({cfg["workdir"], *cfg["writable"]})
    if (init := os.fork()) == 0:
        try:
            _init(cfg)
        except OSError as exc:
            _fail(f"namespaces: {exc}")
    _exit_like(_wait_for(init))


def _bwrap(cfg: Config) -> NoReturn:
    program = os.open(cfg["main"], os.O_RDONLY)  # inherited by bwrap, which copies it into the scratch work dir
    os.set_inheritable(program, True)
    if os.geteuid() == 0:  # make the interpreter reachable by the throw-away uid
        _unshare(_NEWNS)
        _cover(cfg)
    _drop(cfg["uid"])
    os.chdir("/")
    argv = [*cfg["bwrap"], "--file", str(program), os.path.join(cfg["workdir"], "main.py"), "--", *cfg["argv"]]
    os.execve(argv[0], argv, cfg["env"])


def _limits_only(cfg: Config) -> NoReturn:
    _drop(None)
    os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])


def main() -> None:
    cfg = json.loads(sys.argv[1])
    try:
        _join_cgroup(cfg)
        _limits(cfg)
        {"bwrap": _bwrap, "namespaces": _namespaces}.get(cfg["backend"], _limits_only)(cfg)
    except OSError as exc:
        _fail(f"{cfg['backend']}: {exc}")


if __name__ == "__main__":
    main()
