"""`orchestrion report` writes each file whole into its folder (a temporary folder beside it, then
renamed in), owner-only, keeps what else is in the folder, and never creates a trace database."""

from __future__ import annotations

import stat
from pathlib import Path

from orchestrion import TraceStore

from .test_report import cli, run_scripted_eval


def test_report_files_are_whole_owner_only_and_leave_other_files_alone(store: TraceStore, tmp_path: Path) -> None:
    run_id = run_scripted_eval(store, tmp_path)
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    res = cli("report", run_id, "--out", str(folder), "--db", str(store.path), db=tmp_path / "other.db", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["accuracy_cost.png", "accuracy_wall.png", "notes.txt", "report.md", "usage.png"]
    assert (folder / "notes.txt").read_text() == "mine"
    assert all(stat.S_IMODE((folder / n).stat().st_mode) == 0o600 for n in names if n != "notes.txt")
    assert f"{folder}/report.md" in res.stdout  # the printed paths are the final ones
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no temporary folder left
    assert not (tmp_path / "other.db").exists()
