"""bench/_fragment.py: a bench's printed tables, written to a results fragment that names how it was made."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.bench import BENCH, load_bench

fragment = load_bench("_fragment")


def test_the_fragment_holds_the_header_and_what_was_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(BENCH.parent)
    monkeypatch.setattr(sys, "argv", ["bench/local_pool.py", "--limit", "2", "--fragment", "x y.md"])
    path = tmp_path / "frag.md"
    with fragment.tee_fragment(path):
        print("| a | b |\n|---|---|\n| 1 | 2 |")
    assert "| 1 | 2 |" in capsys.readouterr().out  # still printed
    text = path.read_text(encoding="utf-8")
    assert "- command: `" in text and "bench/local_pool.py --limit 2 --fragment 'x y.md'`" in text
    assert re.search(r"- commit: `([0-9a-f]{4,}( \+ uncommitted changes)?|unknown)`", text)
    assert re.search(r"- date: \d{4}-\d\d-\d\d \d\d:\d\d UTC", text)
    assert re.search(r"- machine: \d+ CPUs", text)
    assert text.endswith("| a | b |\n|---|---|\n| 1 | 2 |\n")


def test_a_failed_run_leaves_the_fragment_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "frag.md"
    path.write_text("the last good run\n")
    with pytest.raises(RuntimeError), fragment.tee_fragment(path):
        print("| half a table |")
        raise RuntimeError("the bench failed")
    assert path.read_text() == "the last good run\n"
    assert sys.stdout is not None and not hasattr(sys.stdout, "seen")


def test_a_run_that_printed_nothing_leaves_the_fragment_as_it_was(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "frag.md"
    path.write_text("the last good run\n")
    with fragment.tee_fragment(path):
        print("\n")
    assert path.read_text() == "the last good run\n"
    assert f"nothing was printed: {path} left as it was" in capsys.readouterr().err


def test_no_path_writes_nothing(tmp_path: Path) -> None:
    with fragment.tee_fragment(None):
        print("x")
    assert list(tmp_path.iterdir()) == []
