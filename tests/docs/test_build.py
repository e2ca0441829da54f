"""`mkdocs build --strict` succeeds offline: no broken link, nav entry or API reference."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"


@pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs is not installed (the dev extra)")
def test_strict_build(tmp_path: Path) -> None:
    if not (ROOT / "docs" / "results" / "index.md").exists():
        pytest.skip("docs/results/index.md is written by the benches' results pages")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "NO_COLOR": "1"}
    res = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "WARNING" not in res.stderr, res.stderr[-3000:]
    assert (tmp_path / "site" / "strategies" / "para" / "index.html").is_file()
