"""The ``python`` tool: model-written code runs in a sandboxed child process.

Invariant 5: untrusted code never runs in the orchestrator's process.
:func:`run_sandboxed` starts a separate interpreter in a new session (process
group) with limits on address space, CPU seconds, file size and process count
(no core files), in a throw-away working directory with a minimal environment;
on timeout the whole group is killed. Output is read asynchronously and capped.

Small models often end a program with a bare expression and no ``print``. The
child runs the code like a notebook cell: if it printed nothing, the value of a
final expression is printed. A run that still prints nothing is returned with
status ok but an explicit "no output" text and ``data["empty"]``, so that no
answer is built on an empty result.

The strongest isolation available is chosen once per process:

``namespaces`` (running as root and ``unshare(2)`` permitted)
    Fresh network, mount and PID namespaces. The new network namespace has only
    a loopback interface that is down, so every address, 127.0.0.1 included, is
    unreachable. Every mount is remounted read-only except the working
    directory, so writes anywhere else fail. Directories other users may not
    traverse (``/root`` holding a pyenv interpreter, say) are covered by an empty
    tmpfs into which only the interpreter is bind-mounted. The code runs under a
    fresh unused uid, so ``RLIMIT_NPROC`` binds (it never does for root) and no
    run can touch another. The code's parent is PID 1 of the namespace: when the
    code ends or is killed, the kernel kills everything it left behind.

``audit-hook`` (fallback, weaker)
    No namespaces, same user. An audit hook installed before the code refuses
    sockets, ctypes, new processes and writes outside the working directory.
    Code that reaches native functions another way can get around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import re
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
    from .context import ToolContext

Isolation = Literal["auto", "namespaces", "audit-hook"]

OUTPUT_LIMIT = 64 * 1024  # bytes kept per stream
EMPTY_OUTPUT = "(no output: the program printed nothing; print the result)"
_CLONE_NEWNS, _CLONE_NEWPID, _CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x1, 0x20, 0x1000, 0x4000, 0x40000
_MOUNT_FLAGS = {"nosuid": 0x2, "nodev": 0x4, "noexec": 0x8}  # kept when remounting read-only
_UID_BASE, _UID_SPAN = 1_600_000_000, 300_000_000  # far above real and subordinate uid ranges
_OCTAL = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space in a path as \040
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}

# Runs as the sandbox user outside the new PID namespace. Its child is PID 1 there:
# it starts the code (PID 2, ordinary signal semantics), reaps orphans, and its exit
# makes the kernel kill whatever is left. A signal death is handed on as such.
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

# Runs the user's program in the child, in both isolations, like a notebook cell: the
# source is compiled whole first (a syntax error runs nothing), into a fresh ``__main__``
# module; a final bare expression is evaluated apart and its value printed (str as is,
# repr otherwise, nothing for None) only if the program wrote nothing to stdout itself.
# Tracebacks start at the user's code, so their line numbers are the program's own.
_RUNNER = """\
import ast, sys, types
class _Noted:
    def __init__(self, stream, seen):
        self._stream, self._seen = stream, seen
    def write(self, data):
        if data:
            self._seen[0] = True
        return self._stream.write(data)
    def writelines(self, lines):
        lines = list(lines)
        if any(lines):
            self._seen[0] = True
        return self._stream.writelines(lines)
    def __getattr__(self, name):
        found = getattr(self._stream, name)
        return _Noted(found, self._seen) if name == "buffer" else found
def _fail(exc, tb, path):
    while tb is not None and tb.tb_frame.f_code.co_filename != path:
        tb = tb.tb_next
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)
    sys.exit(1)
def _main(path):
    with open(path, "rb") as fh:
        source = fh.read()
    try:
        tree = compile(source, path, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        body = compile(tree, path, "exec", dont_inherit=True)
        tail = None if last is None else compile(ast.Expression(last.value), path, "eval", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        _fail(exc, None, path)
    module = types.ModuleType("__main__")
    module.__file__, module.__cached__ = path, None
    sys.modules["__main__"] = module
    real, seen = sys.stdout, [False]
    sys.stdout = _Noted(real, seen)
    try:
        exec(body, module.__dict__)
        value = None if tail is None else eval(tail, module.__dict__)
        if value is not None and not seen[0]:
            print(value if isinstance(value, str) else repr(value), file=real)
    except SystemExit:
        raise
    except BaseException as exc:
        _fail(exc, exc.__traceback__, path)
sys.argv = sys.argv[1:]
_main(sys.argv[0])
"""

# Fallback: an audit hook (irremovable from Python) refuses sockets, native calls,
# new processes and writes outside the working directory; then the runner starts.
_PRELUDE = """\
import os, sys
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
""" + _RUNNER

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
    pid: int = 0  # the child's pid, which is also its process-group id
    workdir: str = ""  # already removed when the result is returned


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    raw = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    if _libc.mount(raw[0], raw[1], raw[2], ctypes.c_ulong(flags), raw[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _mount_points() -> list[tuple[str, int]]:
    """Every mount point with its nosuid/nodev/noexec flags, from /proc/self/mountinfo."""
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        rows = [line.split() for line in fh]
    return [
        (_OCTAL.sub(lambda m: chr(int(m[1], 8)), row[4]), sum(_MOUNT_FLAGS.get(o, 0) for o in row[5].split(",")))
        for row in rows
    ]


def _mount_plan(workdir: str) -> tuple[list[str], list[str]]:
    """Ancestors other users cannot traverse (to cover), and the paths to bind-mount back."""
    covers: set[str] = set()
    binds = {workdir}
    interpreter = (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)))
    for path in {os.path.realpath(p) for p in interpreter} | {workdir}:
        parts = path.split("/")
        for i in range(2, len(parts)):
            if not os.stat("/".join(parts[:i])).st_mode & 0o001:
                covers.add("/".join(parts[:i]))
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
    """Runs in the forked child, as root, before exec: isolate, then become ``uid``."""
    if _libc.unshare(_CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing done below reaches the host
    fds = [(os.open(path, os.O_PATH | os.O_DIRECTORY), path) for path in binds]
    for cover in covers:
        _mount("tmpfs", cover, "tmpfs", _MOUNT_FLAGS["nosuid"] | _MOUNT_FLAGS["nodev"], "mode=0755,size=64k")
    for fd, path in fds:
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        os.close(fd)
    for point, flags in _mount_points():
        if point != workdir:
            try:
                _mount(None, point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags)
            except OSError:
                if point == "/":
                    raise
    os.chdir(workdir)  # onto the writable bind mount
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _fresh_uid() -> int:
    while (uid := _UID_BASE + secrets.randbelow(_UID_SPAN)) in _uids_in_use:
        pass
    _uids_in_use.add(uid)
    return uid


def _processes_of(uid: int) -> list[int]:
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


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of a throw-away sandbox uid until none is left."""
    for _ in range(200):
        if not (pids := _processes_of(uid)):
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


async def _read_capped(stream: asyncio.StreamReader | None, limit: int = OUTPUT_LIMIT) -> str:
    """Read to EOF (so the writer never blocks), keep the first ``limit`` bytes."""
    kept, dropped = bytearray(), 0
    while stream is not None and (chunk := await stream.read(65536)):
        room = max(0, limit - len(kept))
        kept += chunk[:room]
        dropped += max(0, len(chunk) - room)
    text = kept.decode("utf-8", errors="replace")
    return text + (f"\n...[truncated {dropped} bytes]" if dropped else "")


async def _spawn(argv: list[str], workdir: str, preexec: Callable[[], None]) -> asyncio.subprocess.Process:
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


async def _start(
    main: str, workdir: str, uid: int | None, limits: Callable[[int | None], None], nproc: int | None
) -> asyncio.subprocess.Process:
    """Start the child: the launcher in fresh namespaces under ``uid``, or the audit-hook prelude."""
    if uid is None:
        argv = [sys.executable, "-I", "-B", "-X", "utf8", "-u", "-c", _PRELUDE, main]
        return await _spawn(argv, workdir, functools.partial(limits, nproc))
    os.chown(workdir, uid, uid)
    covers, binds = _mount_plan(workdir)

    def enter() -> None:
        limits(nproc)
        _enter_namespaces(workdir, uid, covers, binds)

    argv = [sys.executable, "-I", "-S", "-c", _LAUNCHER, "-I", "-B", "-X", "utf8", "-u", "-c", _RUNNER, main]
    return await _spawn(argv, workdir, enter)


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
    """Run ``code`` as a Python program in the sandbox; nothing the code does makes this raise."""
    global _namespaces_work
    cpu = cpu_s if cpu_s is not None else int(timeout_s) + 1
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="orchestrion-sbx-"))
    main = os.path.join(workdir, "main.py")
    uid: int | None = None
    try:
        with open(main, "w", encoding="utf-8") as fh:
            fh.write(code)
        os.chmod(main, 0o644)
        limits = functools.partial(_limits, memory_mb, cpu, max_file_mb)
        proc = None
        if isolation == "namespaces" or (isolation == "auto" and _namespaces_work is not False and os.geteuid() == 0):
            uid = _fresh_uid()
            try:
                proc = await _start(main, workdir, uid, limits, max_procs)
                _namespaces_work = True
            except (subprocess.SubprocessError, PermissionError):  # not root, or no unshare(2) here
                if isolation == "namespaces":
                    raise
                _namespaces_work = False
                _uids_in_use.discard(uid)
                uid = None
        if proc is None:  # root is exempt from RLIMIT_NPROC; the hook refuses fork there anyway
            nproc = None if os.geteuid() == 0 else max_procs + len(_processes_of(os.getuid()))
            proc = await _start(main, workdir, None, limits, nproc)
        result = await _supervise(proc, timeout_s, uid)
        result.workdir = workdir
        return result
    finally:
        if uid is not None:
            _kill_uid(uid)
            _uids_in_use.discard(uid)
        shutil.rmtree(workdir, ignore_errors=True)


async def _supervise(proc: asyncio.subprocess.Process, timeout_s: float, uid: int | None) -> SandboxResult:
    readers = [asyncio.ensure_future(_read_capped(proc.stdout)), asyncio.ensure_future(_read_capped(proc.stderr))]
    timed_out = False
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
    stdout, stderr = (task.result() if task in done else "" for task in readers)
    rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    isolation = "namespaces" if uid is not None else "audit-hook"
    return SandboxResult(stdout, stderr, rc, timed_out, -rc if rc < 0 else None, isolation, uid, proc.pid)


class PythonArgs(BaseModel):
    code: str = Field(description="a complete Python 3 program that prints its result")
    timeout_s: float = Field(10.0, gt=0, le=120, description="wall-clock limit in seconds")


class PythonTool(Tool):
    """Runs a Python program in the sandbox and returns what it printed (or says it printed nothing)."""

    name = "python"
    description = "run a Python 3 program in a sandbox (no network, limited time and memory); returns its stdout"
    Args = PythonArgs
    kind = "tool"

    def __init__(
        self, *, memory_mb: int = 512, max_file_mb: int = 16, max_procs: int = 32, isolation: Isolation = "auto"
    ) -> None:
        self.memory_mb, self.max_file_mb, self.max_procs = memory_mb, max_file_mb, max_procs
        self.isolation: Isolation = isolation
        self.timeout_s = 130.0  # the registry's outer bound; the sandbox enforces args.timeout_s itself

    async def run(self, args: Any, ctx: ToolContext | None, model: str | None) -> ToolResult:
        parsed = args if isinstance(args, PythonArgs) else PythonArgs.model_validate(args)
        res = await run_sandboxed(
            parsed.code,
            timeout_s=parsed.timeout_s,
            memory_mb=self.memory_mb,
            max_file_mb=self.max_file_mb,
            max_procs=self.max_procs,
            isolation=self.isolation,
        )
        data: dict[str, Any] = {"exit_code": res.exit_code, "isolation": res.isolation}
        tail = res.stderr.strip()[-2000:]
        if res.timed_out:
            error = f"python: timed out after {parsed.timeout_s:g}s and was killed" + (f"\n{tail}" if tail else "")
            return ToolResult(status=ToolStatus.TIMEOUT, output=res.stdout, error=error, data=data)
        if res.exit_code == 0:
            if tail:
                data["stderr"] = tail
            if not res.stdout.strip():  # an answer must never be built on nothing
                return ToolResult(output=EMPTY_OUTPUT, data={**data, "empty": True})
            return ToolResult(output=res.stdout, data=data)
        if not tail:
            tail = (
                f"killed by signal {res.killed_signal} ({signal.strsignal(res.killed_signal)}); a limit was hit"
                if res.killed_signal is not None
                else f"exited with code {res.exit_code}"
            )
        return ToolResult(status=ToolStatus.EXEC_ERROR, output=res.stdout, error=tail, data=data)
