"""`make test-fast` is the quick loop: no torch and no BIG-bench download on its way, and the tests
that need either skip, saying what is missing, instead of failing to collect (issue 36)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# what a checkout without the train extra lacks: importing any of these fails as if not installed
ABSENT = '''
import importlib.abc, importlib.util, sys
BLOCKED = {"torch", "transformers", "trl", "peft", "accelerate", "gguf", "safetensors", "datasets"}
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Absent())
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: None if name.split(".")[0] in BLOCKED else real(name, package)
'''


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_target_installs_neither_torch_nor_the_benchmark_data(tmp_path: Path) -> None:
    # -B: every stamp out of date, so the whole chain of recipes is printed (-n: and nothing runs)
    res = subprocess.run(["make", "-n", "-B", "test-fast", f"VENV={tmp_path / 'venv'}"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "pytest -m 'not integration'" in res.stdout
    assert "torch" not in res.stdout and "download.pytorch.org" not in res.stdout
    assert "datasets fetch" not in res.stdout and ",train" not in res.stdout


def test_without_torch_or_bigbench_the_tests_that_need_them_skip(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(ABSENT)
    cache = tmp_path / "cache"  # an empty user cache: no BIG-bench task files in it
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "ORCHESTRION_CACHE": str(cache)}
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0  # the stand-in works: torch is out of reach
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "not integration",
         "tests/train/test_grpo.py", "tests/train/test_losses.py", "tests/train/test_grpo_closes.py",
         "tests/train/test_export.py", "tests/eval/test_split.py", "tests/test_layering.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    tail = res.stdout[-3000:]
    assert res.returncode == 0, tail
    assert "error" not in tail.splitlines()[-1], tail
    assert "SKIPPED" in tail and "the train extra is not installed" in tail
    assert "BIG-bench's task files are not fetched" in tail
