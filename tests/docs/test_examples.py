"""Every shell example in the handbook runs as written, in a folder laid out as a real checkout.

Each ``orchestrion ...`` line of a ``bash`` block runs as a subprocess against the loopback pool of
tests/test_readme.py (ORCHESTRION_POOL), so ``run`` lines are cheap. A block preceded by
``<!-- docs-test: skip (reason) -->`` is not run (servers, downloads, long jobs); the reason is
required. docs/results/ holds the benches' own pages and is not read here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tests.test_readme import (
    bash_commands,
    fake_pool,  # noqa: F401 - the loopback pool fixture
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
ORCHESTRION = Path(sys.executable).parent / "orchestrion"
SKIP = re.compile(r"<!-- docs-test: skip \((.+)\) -->")


def bash_blocks() -> list[tuple[str, int, str, str | None]]:
    """(page, line, code, skip reason) for every bash block of the handbook."""
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        if "results" in page.relative_to(DOCS).parts:
            continue
        lines = page.read_text(encoding="utf-8").splitlines()
        n = 0
        while n < len(lines):
            if lines[n].strip() == "```bash":
                start = n
                body = []
                n += 1
                while lines[n].strip() != "```":
                    body.append(lines[n])
                    n += 1
                reason = SKIP.fullmatch(lines[start - 1].strip()) if start else None
                out.append((str(page.relative_to(ROOT)), start + 1, "\n".join(body),
                            reason.group(1) if reason else None))
            n += 1
    return out


def test_every_block_is_run_or_skipped_with_a_reason() -> None:
    blocks = bash_blocks()
    assert len(blocks) >= 15
    assert sum(reason is None for *_, reason in blocks) >= 10


def test_every_skip_marker_sits_right_above_a_bash_block() -> None:
    """A marker with text between it and its block skips nothing: the block would run after all."""
    orphans = []
    for page in sorted(DOCS.rglob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        orphans += [f"{page.relative_to(ROOT)}:{n + 1}" for n, line in enumerate(lines)
                    if SKIP.fullmatch(line.strip()) and (n + 1 >= len(lines) or lines[n + 1].strip() != "```bash")]
    assert orphans == []


def test_shell_examples_run_as_written(tmp_path: Path, fake_pool: Path) -> None:  # noqa: F811
    work = tmp_path / "checkout"
    shutil.copytree(DOCS, work / "docs", ignore=shutil.ignore_patterns("*.png", "__pycache__"))
    env = {**os.environ, "ORCHESTRION_POOL": str(fake_pool), "ORCHESTRION_DB": str(tmp_path / "traces.db"),
           "COLUMNS": "200"}
    ran = 0
    for page, line, code, reason in bash_blocks():
        if reason is not None:
            continue
        for offset, raw in bash_commands(code):  # a line ending in a backslash goes on on the next
            words = shlex.split(raw, comments=True)
            if not words:
                continue
            where = f"{page} block at line {line + offset}: {raw.strip()}"
            assert words[0] == "orchestrion", f"{where}: not an orchestrion command; mark the block skipped"
            res = subprocess.run([str(ORCHESTRION), *words[1:]], cwd=work, capture_output=True, text=True,
                                 timeout=120, env=env)
            assert res.returncode == 0, f"{where}\nexit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
            assert "Traceback" not in res.stderr, f"{where}\n{res.stderr}"
            ran += 1
    assert ran >= 15


def test_a_continued_line_is_one_command() -> None:
    code = "orchestrion eval --dataset x \\\n    --limit 2\norchestrion trace list"
    assert bash_commands(code) == [(0, "orchestrion eval --dataset x --limit 2"), (2, "orchestrion trace list")]
