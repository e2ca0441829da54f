"""The Python sandbox, tested for real: separate processes, real limits, a real server.

Every sandbox run here uses a 1-3 s timeout; the machine is small and shared.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrion._errors import SandboxUnavailableError
from orchestrion.tools import _sandbox, python_exec
from orchestrion.tools.envelope import ToolStatus
from orchestrion.tools.python_exec import PythonTool, SandboxResult, run_sandboxed
from orchestrion.tools.registry import ToolRegistry

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox needs Linux")


def survivors(result: SandboxResult) -> list[int]:
    """Processes (zombies included) still belonging to a finished run: its uid, group or script."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
        pgid = int(stat.rsplit(")", 1)[1].split()[2])
        if (result.uid is not None and uid == str(result.uid)) or pgid == result.pid or result.workdir in cmdline:
            found.append(int(entry))
    return found


async def assert_nothing_left(result: SandboxResult) -> None:
    for _ in range(30):  # the kernel may need a moment to reap
        if not survivors(result):
            break
        await asyncio.sleep(0.1)
    assert survivors(result) == []
    assert not os.path.exists(result.workdir)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([PythonTool()])


@pytest.fixture
def http_server() -> Iterator[tuple[int, list[str]]]:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"secret-payload")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], hits
    server.shutdown()
    server.server_close()


async def test_prints_come_back_with_status_ok(registry: ToolRegistry) -> None:
    result = await registry.call("python", {"code": "print(6 * 7)\nprint('done')", "timeout_s": 3})
    assert result.status is ToolStatus.OK, result.error
    assert result.output == "42\ndone\n"
    assert result.data["exit_code"] == 0
    assert result.data["isolation"] in ("bwrap", "namespaces", "audit-hook")


async def test_auto_uses_the_strongest_isolation_that_works_here() -> None:
    result = await run_sandboxed("print('hi')", timeout_s=3)
    expected = "bwrap" if shutil.which("bwrap") else "namespaces"
    assert result.isolation == expected, _sandbox.last_probe_error
    await assert_nothing_left(result)


async def test_runs_in_a_throwaway_directory_that_is_removed() -> None:
    code = "import os\nopen('note.txt', 'w').write('kept here')\nprint(os.getcwd())\nprint(open('note.txt').read())"
    result = await run_sandboxed(code, timeout_s=3)
    assert result.exit_code == 0, result.stderr
    cwd, text = result.stdout.split("\n")[:2]
    # the program ran in the throw-away folder, which its output names /sandbox (the same every call)
    assert cwd == python_exec.SHOWN_WORKDIR and text == "kept here"
    assert result.workdir.startswith(tempfile.gettempdir()) and "orchestrion-sbx-" in result.workdir
    assert not os.path.exists(result.workdir)


@pytest.mark.parametrize("isolation", ["auto", "audit-hook"])
async def test_writes_outside_the_directory_fail(isolation: python_exec.Isolation) -> None:
    targets = [f"/tmp/orchestrion_escape_{uuid.uuid4().hex}", f"/root/orchestrion_escape_{uuid.uuid4().hex}"]
    code = (
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('escaped')\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print('BLOCKED', path, type(exc).__name__)\n"
    )
    result = await run_sandboxed(code, timeout_s=3, isolation=isolation)
    assert result.exit_code == 0, result.stderr
    assert f"BLOCKED {targets[1]}" in result.stdout  # read-only outside the working directory
    if result.isolation == "audit-hook":
        assert result.stdout.count("BLOCKED") == 2
    for target in targets:  # /tmp is the sandbox's own throw-away tmpfs: the host's stays untouched
        assert not os.path.exists(target)


@pytest.mark.parametrize("isolation", ["auto", "audit-hook"])
async def test_no_network_not_even_loopback(
    http_server: tuple[int, list[str]], isolation: python_exec.Isolation
) -> None:
    port, hits = http_server
    url = f"http://127.0.0.1:{port}/from-test"
    with urllib.request.urlopen(url, timeout=3) as response:  # the server is really reachable
        assert response.read() == b"secret-payload"
    code = (
        "import urllib.request\n"
        "try:\n"
        f"    print('GOT', urllib.request.urlopen('http://127.0.0.1:{port}/from-sandbox', timeout=1).read())\n"
        "except Exception as exc:\n"
        "    print('BLOCKED', type(exc).__name__, exc)\n"
    )
    result = await run_sandboxed(code, timeout_s=3, isolation=isolation)
    assert "BLOCKED" in result.stdout, result.stdout + result.stderr
    assert "secret-payload" not in result.stdout
    assert hits == ["/from-test"]


async def test_fork_bomb_is_stopped_and_leaves_nothing_behind() -> None:
    code = (
        "import os, time\n"
        "n = 0\n"
        "for _ in range(300):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as exc:\n"
        "        print('fork refused after', n, type(exc).__name__)\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "time.sleep(60)\n"
    )
    start = time.monotonic()
    result = await run_sandboxed(code, timeout_s=2, max_procs=16)
    assert time.monotonic() - start < 2 + 5
    assert result.timed_out and result.killed_signal == 9
    assert "fork refused after" in result.stdout or "PermissionError" in result.stderr
    if result.isolation != "audit-hook":
        assert int(result.stdout.split()[3]) < 16  # RLIMIT_NPROC binds under the sandbox uid
    await assert_nothing_left(result)
    after = await run_sandboxed("print('still fine')", timeout_s=3)  # the machine still works
    assert after.stdout == "still fine\n"


async def test_parallel_runs_overlap_and_stay_apart() -> None:
    code = "import os, time\nopen('mine.txt', 'w').write('x')\ntime.sleep(0.6)\nprint(sorted(os.listdir('.')))"
    start = time.monotonic()
    results = await asyncio.gather(*(run_sandboxed(code, timeout_s=3) for _ in range(4)))
    assert time.monotonic() - start < 4 * 0.6  # serial runs could not finish this soon
    assert all(r.exit_code == 0 and r.stdout == "['main.py', 'mine.txt']\n" for r in results), results
    assert len({r.workdir for r in results}) == 4
    if results[0].uid is not None:
        assert len({r.uid for r in results}) == 4


async def test_detached_grandchild_dies_with_the_run() -> None:
    code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('parent done')\n"
    result = await run_sandboxed(code, timeout_s=3)
    if result.isolation == "audit-hook":
        pytest.skip("the audit-hook isolation cannot fork")
    assert result.stdout == "parent done\n"
    await assert_nothing_left(result)


async def test_memory_hog_fails_with_memory_error(registry: ToolRegistry) -> None:
    code = "block = bytearray(2 * 1024**3)\nprint('allocated')"
    result = await registry.call("python", {"code": code, "timeout_s": 3})
    assert result.status is ToolStatus.EXEC_ERROR
    assert "MemoryError" in (result.error or "")
    assert "allocated" not in result.output


async def test_endless_loop_times_out_quickly(registry: ToolRegistry) -> None:
    start = time.monotonic()
    result = await registry.call("python", {"code": "print('spinning')\nwhile True:\n    pass", "timeout_s": 1})
    assert time.monotonic() - start < 1 + 4
    assert result.status is ToolStatus.TIMEOUT
    assert result.output == "spinning\n"  # what was printed before the kill still comes back


@pytest.mark.parametrize("isolation", ["auto", "audit-hook"])
async def test_timed_out_process_group_is_killed(isolation: python_exec.Isolation) -> None:
    start = time.monotonic()
    result = await run_sandboxed("while True:\n    pass", timeout_s=1, isolation=isolation)
    assert time.monotonic() - start < 1 + 4
    assert result.timed_out and result.killed_signal == 9
    await assert_nothing_left(result)


async def test_cancelled_call_kills_the_child_and_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(**kwargs: str) -> str:
        seen.append(real_mkdtemp(**kwargs))
        return seen[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    task = asyncio.ensure_future(run_sandboxed("import time\ntime.sleep(60)", timeout_s=3))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    fake = SandboxResult("", "", 0, False, None, uid=None, pid=-1, workdir=os.path.realpath(seen[0]))
    await assert_nothing_left(fake)


async def test_errors_and_exit_codes_become_exec_error(registry: ToolRegistry) -> None:
    crash = await registry.call("python", {"code": "print('before')\nraise ValueError('boom')", "timeout_s": 3})
    assert crash.status is ToolStatus.EXEC_ERROR
    assert crash.output == "before\n"
    assert "ValueError: boom" in (crash.error or "")
    exited = await registry.call("python", {"code": "import sys\nsys.exit(3)", "timeout_s": 3})
    assert exited.status is ToolStatus.EXEC_ERROR and exited.data["exit_code"] == 3
    assert exited.error == "exited with code 3"


async def test_output_is_capped_per_stream() -> None:
    result = await run_sandboxed("print('x' * 200_000)", timeout_s=3)
    assert result.exit_code == 0
    assert len(result.stdout) < python_exec.OUTPUT_LIMIT + 100
    assert result.stdout.endswith("bytes]") and "truncated" in result.stdout


async def test_falls_back_down_the_list_when_a_backend_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sandbox, "works", {})
    monkeypatch.setattr(_sandbox, "_bwrap_argv", lambda *a: ["/nonexistent/bwrap"])  # the probe really fails
    result = await run_sandboxed("print('fallback works')", timeout_s=3)
    assert result.isolation == "namespaces" and result.stdout == "fallback works\n"
    assert _sandbox.works["bwrap"] is False
    with pytest.raises(SandboxUnavailableError, match="isolation 'bwrap' does not work on this host"):
        await run_sandboxed("print(1)", timeout_s=3, isolation="bwrap")
    monkeypatch.setattr(_sandbox, "works", {"bwrap": False, "namespaces": False})
    weak = await ToolRegistry([PythonTool()]).call("python", {"code": "print('weak')", "timeout_s": 3})
    assert weak.output == "weak\n" and weak.data["isolation"] == "audit-hook"
    assert "no namespace isolation on this host" in weak.data["isolation_warning"]


@pytest.mark.parametrize(
    "args",
    [{"code": "print(1)", "timeout_s": 0}, {"code": "print(1)", "timeout_s": 500}, {"timeout_s": 2}, {"code": 5}],
)
async def test_invalid_args_are_reported_not_run(registry: ToolRegistry, args: dict[str, object]) -> None:
    result = await registry.call("python", args)
    assert result.status is ToolStatus.INVALID_ARGS
    assert result.error and result.error.startswith("python:")


# Notebook-cell semantics: small models end with a bare expression and no print.

BOTH = pytest.mark.parametrize("isolation", ["auto", "audit-hook"])  # auto is namespaces when root


@BOTH
@pytest.mark.parametrize(
    ("code", "shown"),
    [
        ("sum([3, 4])", "7\n"),
        ("221*1004", "221884\n"),
        ("x = 'forty-two'\nx", "forty-two\n"),  # a str as is, not its repr
        ("values = [1, 2]\n{'n': len(values)}", "{'n': 2}\n"),
        ("if True:\n    y = 5\ny * 2", "10\n"),
    ],
)
async def test_final_expression_value_is_shown(isolation: python_exec.Isolation, code: str, shown: str) -> None:
    tool = PythonTool(isolation=isolation)
    result = await ToolRegistry([tool]).call("python", {"code": code, "timeout_s": 3})
    assert result.status is ToolStatus.OK, result.error
    assert result.output == shown
    assert "empty" not in result.data
    assert result.feedback() == f"status=OK {shown.strip()}"


@BOTH
async def test_printed_output_is_not_duplicated_by_the_final_value(isolation: python_exec.Isolation) -> None:
    code = "import sys\ndef f():\n    print('from f')\n    return 99\nprint('first')\nf()"
    result = await run_sandboxed(code, timeout_s=3, isolation=isolation)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "first\nfrom f\n"
    raw = await run_sandboxed("import sys\nsys.stdout.buffer.write(b'raw\\n')\n7", timeout_s=3, isolation=isolation)
    assert raw.stdout == "raw\n"


@BOTH
@pytest.mark.parametrize("code", ["None", "x = 3", "", "print(end='')\n[].clear()", "print()"])
async def test_nothing_printed_is_marked_empty(isolation: python_exec.Isolation, code: str) -> None:
    result = await ToolRegistry([PythonTool(isolation=isolation)]).call("python", {"code": code, "timeout_s": 3})
    assert result.status is ToolStatus.OK, result.error
    assert result.data["empty"] is True
    assert result.output == python_exec.EMPTY_OUTPUT
    assert result.feedback() == "status=OK (no output: the program printed nothing; print the result)"


@BOTH
async def test_final_expression_that_raises_names_its_line(isolation: python_exec.Isolation) -> None:
    code = "a = 1\nb = 0\n\n# the answer\na / b"
    result = await ToolRegistry([PythonTool(isolation=isolation)]).call("python", {"code": code, "timeout_s": 3})
    assert result.status is ToolStatus.EXEC_ERROR
    error = result.error or ""
    assert error.startswith("Traceback (most recent call last):\n  File ")
    assert 'main.py", line 5, in <module>\n    a / b' in error
    assert "ZeroDivisionError: division by zero" in error
    assert "<string>" not in error and "runpy" not in error  # the runner's own frames are not shown
    assert result.output == ""


@BOTH
async def test_errors_keep_the_users_line_numbers(isolation: python_exec.Isolation) -> None:
    code = "def f(n):\n    return 10 // n\n\nprint('start')\nf(0)\nprint('never')"
    result = await run_sandboxed(code, timeout_s=3, isolation=isolation)
    assert result.exit_code == 1 and result.stdout == "start\n"
    assert 'line 5, in <module>\n    f(0)\n' in result.stderr
    assert 'line 2, in f\n    return 10 // n\n' in result.stderr


@BOTH
@pytest.mark.parametrize(
    ("code", "message"),
    [("print('ok')\nprint(", "'(' was never closed"), ("print('ok')\nreturn 5", "'return' outside function")],
)
async def test_syntax_errors_run_nothing(isolation: python_exec.Isolation, code: str, message: str) -> None:
    result = await ToolRegistry([PythonTool(isolation=isolation)]).call("python", {"code": code, "timeout_s": 3})
    assert result.status is ToolStatus.EXEC_ERROR
    assert result.output == ""  # compiled whole before anything runs
    assert f"SyntaxError: {message}" in (result.error or "")
    assert 'main.py", line 2' in (result.error or "")
    assert "<string>" not in (result.error or "")  # as plain python reports it: no runner frames


@BOTH
async def test_code_runs_as_a_clean_main_module(isolation: python_exec.Isolation) -> None:
    code = (
        "import pickle, sys\n"
        "class Point:\n"
        "    pass\n"
        "names = sorted(n for n in dir() if not n.startswith('__'))\n"
        "assert pickle.loads(pickle.dumps(Point())).__class__ is Point\n"
        "print(__name__, sys.argv == [__file__], names)\n"
    )
    result = await run_sandboxed(code, timeout_s=3, isolation=isolation)
    assert result.stdout == "__main__ True ['Point', 'pickle', 'sys']\n", result.stderr
    exited = await run_sandboxed("import sys\nsys.exit(3)\n4", timeout_s=3, isolation=isolation)
    assert exited.exit_code == 3 and exited.stdout == ""


@pytest.mark.parametrize("isolation", ["bwrap", "namespaces"])
async def test_each_namespace_isolation_shows_final_values_too(isolation: python_exec.Isolation) -> None:
    if isolation == "bwrap" and not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    result = await ToolRegistry([PythonTool(isolation=isolation)]).call("python", {"code": "6 * 7", "timeout_s": 3})
    assert result.data["isolation"] == isolation
    assert result.output == "42\n"
