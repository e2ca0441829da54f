"""The whole-call limit machinery on its own: the accounted fallback sums a process tree's memory,
and a cgroup, where this host allows one, is made with the limits and removed without a trace."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrion.tools import _limits

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

TREE = (  # three children of 40 MB each, under one parent, all alive for a few seconds
    "import os, sys, time\n"
    "for _ in range(3):\n"
    "    if os.fork() == 0:\n"
    "        x = bytearray(40 * 1024 * 1024)\n"
    "        time.sleep(5)\n"
    "        os._exit(0)\n"
    "print('up', flush=True)\n"
    "time.sleep(5)\n"
)


def test_accounted_fallback_sums_the_whole_process_tree() -> None:
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        deadline = time.monotonic() + 10
        while _limits.resident_mb(_limits._tree(proc.pid)) < 110:  # the children are still filling their pages
            assert time.monotonic() < deadline, _limits.resident_mb(_limits._tree(proc.pid))
            time.sleep(0.05)
        assert len(_limits._tree(proc.pid)) == 4 and sorted(_limits._tree(proc.pid)) == sorted(
            _limits._scan_tree(proc.pid))  # the children files and the full scan agree
        roomy = _limits.CallLimits(memory_mb=512, max_procs=8, disk_mb=8)
        assert not _limits.over_limit(roomy, proc.pid) and roomy.peak_mb >= 110
        tight = _limits.CallLimits(memory_mb=100, max_procs=8, disk_mb=8)  # each child alone is under it
        assert _limits.over_limit(tight, proc.pid)
        assert tight.breach is not None and "memory limit of 100 MB" in tight.breach
    finally:
        proc.kill()
        proc.wait()


def test_a_cgroup_is_made_with_the_limits_and_removed() -> None:
    made = _limits.create(64, 8, 8)
    if made.mode == "accounted":
        _limits.release(made)
        pytest.skip("no cgroup to make here (v2 with memory+pids delegated to us, or v1 as root)")
    try:
        assert made.dirs and all(d.is_dir() for d in made.dirs)
        memory = made.dirs[0] / ("memory.max" if made.mode == "cgroup-v2" else "memory.limit_in_bytes")
        assert int(memory.read_text()) == 64 * 1024 * 1024
        pids = next(d / "pids.max" for d in made.dirs if (d / "pids.max").exists())
        assert pids.read_text().strip() == "8"
        assert made.record("tmpfs")["enforced_by"] == made.mode
    finally:
        _limits.release(made)
    assert not any(Path(d).exists() for d in made.dirs)


async def test_a_cgroup_the_launcher_cannot_enter_falls_back_to_accounted(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    from orchestrion.tools.python_exec import run_sandboxed

    def unjoinable(memory_mb: int, max_procs: int, disk_mb: int) -> _limits.CallLimits:
        made = _limits.CallLimits(memory_mb, max_procs, disk_mb)
        if not _limits.cgroups_refused:  # as a cgroup whose cgroup.procs cannot be written would be
            made.mode, made.dirs = "cgroup-v2", [tmp_path / "no-such-cgroup"]
        return made

    monkeypatch.setattr(_limits, "create", unjoinable)
    monkeypatch.setattr(_limits, "cgroups_refused", False)
    result = await run_sandboxed("print('ran')", timeout_s=5)
    assert result.stdout == "ran\n" and result.limits["enforced_by"] == "accounted", result.stderr
    assert _limits.cgroups_refused
