"""The ``python`` tool: model-written code runs in a sandboxed child process.

Invariant 5: untrusted code never runs in the orchestrator's process.
:func:`run_sandboxed` starts a separate interpreter in a new session (process
group) with limits on address space, CPU seconds, file size and process count
(no core files), in a throw-away working directory with a minimal environment;
on timeout the whole group is killed. Output is read asynchronously and capped.
Memory, processes and disk also hold for the call as a whole (:mod:`._limits`: a
cgroup where the host allows one, else an accounted watchdog; a size-limited tmpfs
as scratch space); ``SandboxResult.limits`` and the tool's ``data["limits"]`` say
which held and how.

Small models often end a program with a bare expression and no ``print``. The
child runs the code like a notebook cell: if it printed nothing, the value of a
final expression is printed. A run that still prints nothing is returned with
status ok but an explicit "no output" text and ``data["empty"]``, so that no
answer is built on an empty result.

Isolation (bubblewrap, the launcher's own namespaces, or an audit hook where neither
works) is chosen in :mod:`._sandbox`; ``data["isolation"]`` records which ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from .._errors import SandboxUnavailableError
from . import _limits, _sandbox
from ._sandbox import Isolation
from .envelope import ToolResult, ToolStatus
from .registry import Tool

if TYPE_CHECKING:
    from .context import ToolContext

OUTPUT_LIMIT = 64 * 1024  # bytes kept per stream
EMPTY_OUTPUT = "(no output: the program printed nothing; print the result)"
_PROBE = "print('sandbox-ok')"
_PROBE_LIMITS: dict[str, Any] = {"memory_mb": 512, "cpu_s": 20, "max_file_mb": 16, "max_procs": 32, "disk_mb": 64}

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
    limits: dict[str, Any] = field(default_factory=dict)  # the whole-call limits and how each was enforced
    limit_breach: str | None = None  # set when a whole-call limit (memory) stopped the run


async def _read_capped(stream: asyncio.StreamReader | None, limit: int = OUTPUT_LIMIT) -> str:
    """Read to EOF (so the writer never blocks), keep the first ``limit`` bytes."""
    kept, dropped = bytearray(), 0
    while stream is not None and (chunk := await stream.read(65536)):
        room = max(0, limit - len(kept))
        kept += chunk[:room]
        dropped += max(0, len(chunk) - room)
    text = kept.decode("utf-8", errors="replace")
    return text + (f"\n...[truncated {dropped} bytes]" if dropped else "")


async def _spawn(argv: list[str], workdir: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=workdir,
        env=dict(_sandbox.ENV),
        start_new_session=True,  # its own process group, killed whole
    )


SHOWN_WORKDIR = "/sandbox"  # how outputs name the call's throw-away work directory


async def _run_once(code: str, backend: Isolation, timeout_s: float, limits: dict[str, Any]) -> SandboxResult:
    result = await _run_attempt(code, backend, timeout_s, limits)
    if result.exit_code == 125 and _limits.JOIN_REFUSED in result.stderr and not _limits.cgroups_refused:
        _limits.cgroups_refused = True  # a cgroup we may make but not enter: the accounted limits from now on
        result = await _run_attempt(code, backend, timeout_s, limits)
    return result


async def _run_attempt(code: str, backend: Isolation, timeout_s: float, limits: dict[str, Any]) -> SandboxResult:
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="orchestrion-sbx-"))
    main = os.path.join(workdir, "main.py")
    uid = _sandbox.fresh_uid() if backend != "audit-hook" else None
    try:
        with open(main, "w", encoding="utf-8") as fh:
            fh.write(code)
        os.chmod(main, 0o644)
        _sandbox.prepare_workdir(workdir, uid)
        program = _PRELUDE if backend == "audit-hook" else _RUNNER
        argv = [sys.executable, "-I", "-B", "-X", "utf8", "-u", "-c", program, main]
        env = {**_sandbox.ENV, "HOME": workdir, "TMPDIR": workdir}
        nproc: int | None = limits["max_procs"]
        if uid is None:  # our own uid: count what already runs (root is exempt anyway)
            nproc = None if os.geteuid() == 0 else limits["max_procs"] + len(_sandbox.processes_of(os.getuid()))
        call = _limits.create(limits["memory_mb"], limits["max_procs"], limits["disk_mb"])
        cfg = {**limits, "nproc": nproc, "cgroup_procs": call.procs_files}
        try:
            proc = await _spawn(_sandbox.launcher_argv(backend, workdir, uid, cfg, argv, env), workdir)
            result = await _supervise(proc, timeout_s, uid, call)
        finally:
            _limits.release(call)
        result.limits = call.record(_sandbox.disk_note(backend, workdir))
        result.limit_breach = call.breach
        # the random work dir name never reaches the output: the same program prints the same text
        result.stdout = result.stdout.replace(workdir, SHOWN_WORKDIR)
        result.stderr = result.stderr.replace(workdir, SHOWN_WORKDIR)
        result.isolation, result.workdir = backend, workdir
        return result
    finally:
        if uid is not None:
            _sandbox.kill_uid(uid)
            _sandbox.uids_in_use.discard(uid)
        shutil.rmtree(workdir, ignore_errors=True)


async def _backend(isolation: Isolation) -> Isolation:
    """The isolation to use: the one asked for, or (auto) the strongest that passed its probe here."""
    wanted = _sandbox.BACKENDS if isolation == "auto" else (isolation,)
    for backend in wanted:
        if backend == "audit-hook":
            return backend
        if backend not in _sandbox.works:
            ok = _sandbox.available(backend)
            if ok:
                probe = await _run_once(_PROBE, backend, 20.0, _PROBE_LIMITS)  # not the caller's limits
                ok = probe.exit_code == 0 and probe.stdout == "sandbox-ok\n"
                _sandbox.last_probe_error[backend] = probe.stderr.strip()[-500:]
            _sandbox.works[backend] = ok
        if _sandbox.works[backend]:
            return backend
        if isolation != "auto":
            detail = _sandbox.last_probe_error.get(backend) or "not installed or not supported here"
            raise SandboxUnavailableError(f"python sandbox: isolation {backend!r} does not work on this host: {detail}")
    return "audit-hook"


async def run_sandboxed(
    code: str,
    *,
    timeout_s: float,
    memory_mb: int = 512,
    cpu_s: int | None = None,
    max_file_mb: int = 16,
    max_procs: int = 32,
    disk_mb: int = 64,
    isolation: Isolation = "auto",
) -> SandboxResult:
    """Run ``code`` as a Python program in the sandbox; nothing the code does makes this raise.

    ``memory_mb``, ``max_procs`` and ``disk_mb`` hold for the call as a whole (every process and
    file it makes together; see :mod:`._limits`); ``max_file_mb`` and ``cpu_s`` per process.
    Raises :class:`SandboxUnavailableError` only when a named ``isolation`` cannot work on this host.
    """
    cpu = cpu_s if cpu_s is not None else int(timeout_s) + 1
    limits: dict[str, Any] = {"memory_mb": memory_mb, "cpu_s": cpu, "max_file_mb": max_file_mb, "max_procs": max_procs,
                              "disk_mb": disk_mb}
    backend = await _backend(isolation)
    return await _run_once(code, backend, timeout_s, limits)


async def _watch(proc: asyncio.subprocess.Process, call: _limits.CallLimits) -> None:
    """Return once the call breaks a whole-call limit (never, if it ends first)."""
    while proc.returncode is None:
        if await asyncio.to_thread(_limits.over_limit, call, proc.pid):
            return
        await asyncio.sleep(_limits.WATCH_S if call.mode == "accounted" else 0.1)
    await asyncio.Event().wait()


async def _supervise(proc: asyncio.subprocess.Process, timeout_s: float, uid: int | None,
                     call: _limits.CallLimits) -> SandboxResult:
    readers = [asyncio.ensure_future(_read_capped(proc.stdout)), asyncio.ensure_future(_read_capped(proc.stderr))]
    timed_out = False
    watchdog = asyncio.ensure_future(_watch(proc, call))
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.wait({asyncio.ensure_future(proc.wait()), watchdog}, return_when=asyncio.FIRST_COMPLETED)
    except TimeoutError:
        timed_out = True
    finally:  # also on cancellation: nothing may outlive the call
        watchdog.cancel()
        if proc.returncode is None:  # not reaped yet, so its pid still names our group
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
        _limits.kill_members(call)
        if uid is not None:
            _sandbox.kill_uid(uid)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 5.0)
        done, pending = await asyncio.wait(readers, timeout=2.0)
        for task in pending:
            task.cancel()
    _limits.over_limit_after(call)  # a child the kernel killed for the cgroup's limit, even if the parent lived
    stdout, stderr = (task.result() if task in done else "" for task in readers)
    rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    return SandboxResult(stdout, stderr, rc, timed_out, -rc if rc < 0 else None, "", uid, proc.pid)


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
        self, *, memory_mb: int = 512, max_file_mb: int = 16, max_procs: int = 32, disk_mb: int = 64,
        isolation: Isolation = "auto",
    ) -> None:
        self.memory_mb, self.max_file_mb, self.max_procs, self.disk_mb = memory_mb, max_file_mb, max_procs, disk_mb
        self.isolation: Isolation = isolation
        self.timeout_s = 130.0  # the registry's outer bound; the sandbox enforces args.timeout_s itself

    async def run(self, args: Any, ctx: ToolContext | None, model: str | None) -> ToolResult:
        parsed = args if isinstance(args, PythonArgs) else PythonArgs.model_validate(args)
        try:
            res = await run_sandboxed(
                parsed.code,
                timeout_s=parsed.timeout_s,
                memory_mb=self.memory_mb,
                max_file_mb=self.max_file_mb,
                max_procs=self.max_procs,
                disk_mb=self.disk_mb,
                isolation=self.isolation,
            )
        except SandboxUnavailableError as exc:  # refused, not run: a tool reports, never raises
            return ToolResult(status=ToolStatus.EXEC_ERROR, error=str(exc), data={"isolation": self.isolation})
        data: dict[str, Any] = {"exit_code": res.exit_code, "isolation": res.isolation, "limits": res.limits}
        if res.isolation == "audit-hook":
            data["isolation_warning"] = _sandbox.WEAK_WARNING
        tail = res.stderr.strip()[-2000:]
        if res.limit_breach is not None:
            error = f"python: {res.limit_breach}" + (f"\n{tail}" if tail else "")
            return ToolResult(status=ToolStatus.EXEC_ERROR, output=res.stdout, error=error, data=data)
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
