"""bench/local_pool.py stopped by Ctrl-C: a clean stop like `orchestrion eval`'s (issue 36 row 21)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.bench import load_bench

local_pool = load_bench("local_pool")


def test_ctrl_c_during_a_run_is_one_line_and_exit_130(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cleaned: list[str] = []

    async def a_run_in_progress() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C: asyncio.run cancels the main task
            await asyncio.sleep(30)
        finally:
            cleaned.append("finally ran")  # the run's own clean-up (store closed, run marked interrupted)

    # a shell's background job starts with SIGINT ignored; a terminal's Ctrl-C is what is tested
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    monkeypatch.setattr(local_pool, "main", a_run_in_progress)
    monkeypatch.setattr("sys.argv", ["bench/local_pool.py", "--tasks", "object_counting", "--limit", "2"])
    try:
        assert local_pool.run_main() == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    err = capsys.readouterr().err
    assert "Traceback" not in err and cleaned == ["finally ran"]
    assert err.splitlines() == [
        "interrupted; finished episodes are kept.",
        "resume with the same command: python bench/local_pool.py --tasks object_counting --limit 2",
    ]


def test_a_bad_dataset_spec_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.argv", ["bench/local_pool.py", "--tasks", "bigbench-mix:x", "--history", "",
                                     "--train", "1", "--limit", "1", "--out", str(tmp_path)])
    assert local_pool.run_main() == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == ("error: 'bigbench-mix:x': K must be a whole number of parts, 2 or more, "
                                    "e.g. bigbench-mix:3")
