"""The ``python`` tool: model-written code runs in a sandboxed child process.

Invariant 5 of the design: untrusted code never runs in the orchestrator's
process. :func:`run_sandboxed` starts a separate interpreter in a new session
(process group) with resource limits (address space, CPU seconds, file size,
process count, no core files) in a throw-away working directory with a minimal
environment, and kills the whole group on timeout. Output is read off the event
loop and capped per stream.

Two isolation levels, the strongest available is chosen once per process:

``namespaces`` (when running as root and ``unshare(2)`` is permitted)
    The child gets fresh network, mount and PID namespaces. A new network
    namespace has only a loopback interface that is down, so every address,
    127.0.0.1 included, is unreachable. In the mount namespace every mount is
    remounted read-only except the working directory, so writes anywhere else
    fail (``/tmp`` included). Directories the sandbox user may not traverse
    (e.g. ``/root`` holding a pyenv interpreter) are covered by an empty tmpfs
    into which only the interpreter's prefix is bind-mounted. The code then runs
    under a fresh, unused uid/gid, so ``RLIMIT_NPROC`` really binds (it never
    does for root) and the code cannot signal or read anything of other runs.
    The user code runs as PID 1 of its PID namespace, so when it ends, or is
    killed, the kernel kills every process it left behind.

``audit-hook`` (fallback; weaker)
    No namespaces and no change of user. An audit hook installed before the
    user code refuses socket, ctypes and process-creation events. It can be
    bypassed by code that reaches native functions some other way; it is a
    best effort, recorded as such in every result.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from .envelope import ToolResult, ToolStatus
from .registry import Tool

if TYPE_CHECKING:
    from ..runtime.context import RunContext

Isolation = Literal["auto", "namespaces", "audit-hook"]

OUTPUT_LIMIT = 64 * 1024  # bytes kept per stream
_CLONE_NEWNS, _CLONE_NEWPID, _CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
_MOUNT_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC}
_UID_BASE, _UID_SPAN = 1_600_000_000, 300_000_000  # far above any real or subordinate uid
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}

# Runs as the sandbox user, outside the new PID namespace. Its child becomes PID 1
# there: it starts the user code (PID 2, ordinary signal semantics), reaps orphans,
# and its exit makes the kernel kill whatever is left. A signal death is handed on.
_LAUNCHER = """\
import os, signal, sys
def wait_for(pid):
    while True:
        got, status = os.waitpid(-1, 0)
        if got == pid:
            return os.waitstatus_to_exitcode(status)
if (init := os.fork()) == 0:
    __import__("ctypes").CDLL(None).prctl(1, signal.SIGKILL)  # die with the launcher
    if (child := os.fork()) == 0:
        try:
            os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
        finally:
            os._exit(127)
    code = wait_for(child)
    os._exit(128 - code if code < 0 else code)
code = wait_for(init)
if code > 128:
    if code - 128 not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(code - 128, signal.SIG_DFL)
    os.kill(os.getpid(), code - 128)
sys.exit(code)
"""

# Fallback: an audit hook (irremovable from Python) refuses sockets, native calls,
# new processes and writes outside the working directory; then the code runs.
_PRELUDE = """\
import os, runpy, sys
_home = os.getcwd()
def _outside(path):
    if isinstance(path, int):
        return False
    real = os.path.realpath(os.fsdecode(path))
    return real != "/dev/null" and not real.startswith(_home + os.sep)
def _guard(event, args, _no=("socket.", "ctypes.", "subprocess.", "os.fork", "os.exec", "os.spawn",
           "os.posix_spawn", "os.system", "pty."), _wr=os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC):
    if event.startswith(_no):
        raise PermissionError(f"sandbox: {event} is not allowed (no network, no processes)")
    writes = event == "open" and (any(c in (args[1] or "") for c in "wax+") or (args[2] or 0) & _wr)
    changes = event in ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.symlink", "os.link")
    if (writes or changes) and _outside(args[0]):
        raise PermissionError(f"sandbox: writing outside the working directory is not allowed: {args[0]}")
sys.addaudithook(_guard)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

_libc = ctypes.CDLL(None, use_errno=True)
_namespaces_work: bool | None = None  # learned on first use
_uids_in_use: set[int] = set()


@dataclass
class SandboxResult:
    """What a sandboxed run printed and how it ended."""

    stdout: str
    stderr: str
    exit_code: int  # the child's return code; negative: killed by that signal
    timed_out: bool
    killed_signal: int | None
    isolation: str = ""
    uid: int | None = None  # the throw-away uid (namespaces isolation)
    pid: int = 0  # the child's pid, also its process-group id
    workdir: str = ""  # removed by the time the result is returned


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def _mountinfo() -> list[tuple[str, int]]:
    """Mount points with their nosuid/nodev/noexec flags, from /proc/self/mountinfo."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")  # undo \040-style escapes
            flags = sum(_MOUNT_FLAGS.get(opt, 0) for opt in fields[5].split(","))
            points.append((point, flags))
    return points


def _mount_plan(workdir: str) -> tuple[list[str], list[str]]:
    """Covers (ancestors the sandbox user cannot traverse) and the paths to bind-mount writable or back."""
    covers: set[str] = set()
    binds = {workdir}
    interpreter = (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)))
    for path in {os.path.realpath(p) for p in interpreter} | {workdir}:
        parts = path.split("/")
        for i in range(2, len(parts)):
            ancestor = "/".join(parts[:i])
            if not os.stat(ancestor).st_mode & 0o001:
                covers.add(ancestor)
                binds.add(path)
                break
    return sorted(covers), sorted(binds)


def _limits(memory_mb: int, cpu_s: int, max_file_mb: int, max_procs: int | None) -> None:
    mib = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * mib, memory_mb * mib))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_mb * mib, max_file_mb * mib))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if max_procs is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (max_procs, max_procs))


def _enter_namespaces(workdir: str, uid: int, covers: list[str], binds: list[str]) -> None:
    """Runs in the forked child, as root, before exec: isolate, then drop to ``uid``."""
    _check(_libc.unshare(_CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID), "unshare")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing below propagates back to the host
    fds = [(os.open(path, os.O_PATH | os.O_DIRECTORY), path) for path in binds]
    for cover in covers:
        _mount("tmpfs", cover, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=64k")
    for fd, path in fds:
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        os.close(fd)
    for point, flags in _mountinfo():
        if point == workdir:
            continue
        try:
            _mount(None, point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags)
        except OSError:
            if point == "/":
                raise
    os.chdir(workdir)  # onto the writable bind mount
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _sandbox_uid() -> int:
    while (uid := _UID_BASE + secrets.randbelow(_UID_SPAN)) in _uids_in_use:
        pass
    _uids_in_use.add(uid)
    return uid


def _processes_of(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="utf-8") as fh:
                status = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            continue
        if status.get("Uid", "").split()[:1] == [str(uid)] and not status.get("State", "").strip().startswith("Z"):
            found.append(int(entry))
    return found


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of the throw-away sandbox uid until none is left."""
    for _ in range(200):
        pids = _processes_of(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


async def _read_capped(stream: asyncio.StreamReader | None, limit: int = OUTPUT_LIMIT) -> str:
    """Read to EOF, keep the first ``limit`` bytes, count the rest."""
    if stream is None:
        return ""
    kept, dropped = bytearray(), 0
    while chunk := await stream.read(65536):
        room = max(0, limit - len(kept))
        kept += chunk[:room]
        dropped += len(chunk) - min(room, len(chunk))
    text = kept.decode("utf-8", errors="replace")
    return text + (f"\n...[truncated {dropped} bytes]" if dropped else "")


async def _spawn(
    argv: list[str], workdir: str, preexec: Callable[[], None]
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=workdir,
        env={**_ENV, "HOME": workdir, "TMPDIR": workdir},
        start_new_session=True,
        preexec_fn=preexec,
    )


async def run_sandboxed(
    code: str,
    *,
    timeout_s: float,
    memory_mb: int = 512,
    cpu_s: int | None = None,
    max_file_mb: int = 16,
    max_procs: int = 32,
    isolation: Isolation = "auto",
) -> SandboxResult:
    """Run ``code`` as a Python program in the sandbox; never raises for anything the code does."""
    global _namespaces_work
    cpu = cpu_s if cpu_s is not None else int(timeout_s) + 1
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="orchestrion-sbx-"))
    uid: int | None = None
    try:
        main = os.path.join(workdir, "main.py")
        with open(main, "w", encoding="utf-8") as fh:
            fh.write(code)
        os.chmod(main, 0o644)
        user_argv = ["-I", "-X", "utf8", "-u", main]
        proc: asyncio.subprocess.Process | None = None
        want_ns = isolation == "namespaces" or (isolation == "auto" and _namespaces_work is not False)
        if want_ns and os.geteuid() == 0:
            uid = _sandbox_uid()
            os.chown(workdir, uid, uid)
            os.chmod(workdir, 0o700)
            (covers, binds), ns_uid = _mount_plan(workdir), uid

            def enter() -> None:
                _limits(memory_mb, cpu, max_file_mb, max_procs)
                _enter_namespaces(workdir, ns_uid, covers, binds)

            try:
                proc = await _spawn([sys.executable, "-I", "-S", "-c", _LAUNCHER, *user_argv], workdir, enter)
                _namespaces_work = True
            except subprocess.SubprocessError:
                if isolation == "namespaces":
                    raise
                _namespaces_work = False
                _uids_in_use.discard(uid)
                uid = None
        if proc is None:
            procs = None if os.geteuid() == 0 else max_procs + len(_processes_of(os.getuid()))
            argv = [sys.executable, "-I", "-X", "utf8", "-u", "-c", _PRELUDE, main]
            proc = await _spawn(argv, workdir, lambda: _limits(memory_mb, cpu, max_file_mb, procs))
        return await _supervise(proc, timeout_s, uid, workdir)
    finally:
        if uid is not None:
            _kill_uid(uid)
            _uids_in_use.discard(uid)
        shutil.rmtree(workdir, ignore_errors=True)


async def _supervise(
    proc: asyncio.subprocess.Process, timeout_s: float, uid: int | None, workdir: str
) -> SandboxResult:
    readers = [asyncio.ensure_future(_read_capped(proc.stdout)), asyncio.ensure_future(_read_capped(proc.stderr))]
    timed_out = False
    try:
        try:
            async with asyncio.timeout(timeout_s):
                await proc.wait()
        except TimeoutError:
            timed_out = True
    finally:  # also on cancellation: nothing may outlive the call
        if proc.returncode is None:  # not reaped yet, so its pid still names our group
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
        if uid is not None:
            _kill_uid(uid)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 5.0)
        done, pending = await asyncio.wait(readers, timeout=2.0)
        for task in pending:
            task.cancel()
    stdout, stderr = (t.result() if t in done else "" for t in readers)
    rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    return SandboxResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=rc,
        timed_out=timed_out,
        killed_signal=-rc if rc < 0 else None,
        isolation="namespaces" if uid is not None else "audit-hook",
        uid=uid,
        pid=proc.pid,
        workdir=workdir,
    )


class PythonArgs(BaseModel):
    code: str = Field(description="a complete Python 3 program; print what you want to see")
    timeout_s: float = Field(10.0, gt=0, le=120, description="wall-clock limit in seconds")


class PythonTool(Tool):
    """Runs a Python program in the sandbox and returns what it printed."""

    name = "python"
    description = "run a Python 3 program in a sandbox (no network, limited time and memory); returns its stdout"
    Args = PythonArgs
    kind = "tool"

    def __init__(
        self, *, memory_mb: int = 512, max_file_mb: int = 16, max_procs: int = 32, isolation: Isolation = "auto"
    ) -> None:
        self.memory_mb = memory_mb
        self.max_file_mb = max_file_mb
        self.max_procs = max_procs
        self.isolation: Isolation = isolation
        self.timeout_s = 130.0  # the registry's outer limit; the sandbox enforces args.timeout_s

    async def run(self, args: Any, ctx: "RunContext | None", model: str | None) -> ToolResult:
        parsed = args if isinstance(args, PythonArgs) else PythonArgs.model_validate(args)
        res = await run_sandboxed(
            parsed.code,
            timeout_s=parsed.timeout_s,
            memory_mb=self.memory_mb,
            max_file_mb=self.max_file_mb,
            max_procs=self.max_procs,
            isolation=self.isolation,
        )
        data: dict[str, Any] = {
            "exit_code": res.exit_code,
            "isolation": res.isolation,
            "timed_out": res.timed_out,
            "killed_signal": res.killed_signal,
        }
        if res.timed_out:
            error = f"python: timed out after {parsed.timeout_s:g}s; the process group was killed"
            return ToolResult(status=ToolStatus.TIMEOUT, output=res.stdout, error=error, data=data)
        if res.exit_code == 0:
            return ToolResult(output=res.stdout, data={**data, "stderr": res.stderr[-2000:]})
        if res.stderr.strip():
            error = res.stderr.strip()[-2000:]
        elif res.killed_signal is not None:
            error = f"killed by {signal.Signals(res.killed_signal).name} (a resource limit was hit)"
        else:
            error = f"exited with code {res.exit_code}"
        return ToolResult(status=ToolStatus.EXEC_ERROR, output=res.stdout, error=error, data=data)
