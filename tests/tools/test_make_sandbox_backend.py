"""`make sandbox-backend` (run by `make test`): installs bubblewrap as root with apt, waiting for
another apt's lock and refreshing the lists when the package is not found, and says which
isolation the tests will use. Run against stand-ins for `id`, `apt-get` and `bwrap` on PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _fake_bin(tmp_path: Path, *, installs_after_update: bool) -> Path:
    """``id -u`` says 0; ``apt-get`` logs its arguments, and its ``install`` puts a ``bwrap`` on PATH
    only once ``update`` ran (or never)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "id").write_text("#!/bin/sh\necho 0\n")
    succeed = f'[ -e "{tmp_path}/updated" ]' if installs_after_update else "false"
    (bin_dir / "apt-get").write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{tmp_path}/apt.log"\n'
        f'case "$*" in *" update"*) touch "{tmp_path}/updated"; exit 0;; esac\n'
        f'if {succeed}; then printf "#!/bin/sh\\necho bubblewrap 9.9\\n" > "{bin_dir}/bwrap"; '
        f'chmod +x "{bin_dir}/bwrap"; exit 0; fi\n'
        'echo "E: Unable to locate package bubblewrap"; exit 100\n'
    )
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    return bin_dir


def _make(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    """The target with PATH = the stand-ins plus the few tools it uses, so a real bwrap is not found."""
    for tool in ("tail", "touch", "chmod"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    make = shutil.which("make")
    assert make is not None
    return subprocess.run([make, "-s", "--no-print-directory", "sandbox-backend"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PATH": str(bin_dir)})


def test_installs_after_refreshing_the_lists_and_waits_for_the_lock(tmp_path: Path) -> None:
    res = _make(_fake_bin(tmp_path, installs_after_update=True))
    assert res.returncode == 0, res.stderr
    calls = (tmp_path / "apt.log").read_text().splitlines()
    assert [c.split()[-1] for c in calls] == ["bubblewrap", "update", "bubblewrap"]  # install, refresh, install
    assert all("DPkg::Lock::Timeout=120" in c for c in calls)  # a held lock is waited for, not a failure
    assert res.stdout.strip() == "sandbox: bubblewrap 9.9 found: the python sandbox uses bwrap isolation"


def test_says_so_when_bubblewrap_cannot_be_installed(tmp_path: Path) -> None:
    res = _make(_fake_bin(tmp_path, installs_after_update=False))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "note: apt-get could not install bubblewrap: E: Unable to locate package bubblewrap"
    assert lines[1].startswith("note: bubblewrap not installed; the python sandbox uses its namespace fallback")
