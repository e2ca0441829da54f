"""Schema versions: today's files are adopted, older ones upgraded with a backup, newer ones refused."""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from orchestrion import TraceError, TraceStore
from orchestrion.trace import _schema

FIXTURE = Path(__file__).parent / "fixtures" / "v1_traces.db"  # written by the schema before versions existed


def _version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _copy(tmp_path: Path) -> Path:
    db = tmp_path / "old" / "traces.db"
    db.parent.mkdir()
    shutil.copyfile(FIXTURE, db)
    return db


def test_a_file_from_before_versions_opens_and_reads_back(tmp_path: Path) -> None:
    db = _copy(tmp_path)
    assert _version(db) == 0
    store = TraceStore(db)
    try:
        assert _version(db) == _schema.current_version() == 1
        (run,) = store.runs_matching("run-v1")
        assert run.kind == "eval" and run.config_value() == {"strategy": "para"}
        (ep,) = store.episodes(run_id=run.id)
        assert ep.finished == 1 and ep.status == "ok" and ep.answer == "Answer: 221844"
        assert store.episode(ep.id[:8]) == ep
        assert [e.id for e in store.counted_episodes(run.id)] == [ep.id]
        spans = store.spans(ep.id)
        assert spans[0].kind == "episode" and {"decision", "tool"} <= {s.kind for s in spans}
        decisions = store.decisions(ep.id, span_attrs=True)
        assert [d.seq for d in decisions] == [1, 2] and all(d.valid for d in decisions)
        assert json.loads(decisions[0].messages)[0]["role"] in ("system", "user")
        assert store.decision_counts(run.id) == {ep.id: (0, 2)}
        assert store.span_label_counts(run.id, ("tool", "agent"), "tool") == {ep.id: {"slow": 1}}
    finally:
        store.close()
    assert not list(db.parent.glob("*.bak-*"))  # adopting today's tables needs no backup


def test_a_newer_version_is_refused_in_one_line(tmp_path: Path) -> None:
    db = _copy(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(TraceError) as refused:
        TraceStore(db)
    message = str(refused.value)
    assert "\n" not in message and str(db) in message and "99" in message
    assert f"({_schema.current_version()})" in message and "upgrade orchestrion" in message
    assert _version(db) == 99


def _add_note_column(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE episodes ADD COLUMN note TEXT")
    conn.execute("UPDATE episodes SET note = 'migrated'")


def test_an_older_version_is_upgraded_in_place_after_a_backup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _copy(tmp_path)
    TraceStore(db).close()  # now version 1
    monkeypatch.setattr(_schema, "MIGRATIONS", [*_schema.MIGRATIONS, _add_note_column])
    store = TraceStore(db)
    try:
        assert _version(db) == 2
        assert store.query("SELECT note FROM episodes") == [{"note": "migrated"}]
    finally:
        store.close()
    backup = db.with_name("traces.db.bak-v1")
    assert _version(backup) == 1 and stat.S_IMODE(backup.stat().st_mode) == 0o600
    with sqlite3.connect(backup) as conn:
        assert "note" not in {r[1] for r in conn.execute("PRAGMA table_info(episodes)")}
        assert conn.execute("SELECT COUNT(*) FROM spans").fetchone()[0] > 0


def test_a_failing_migration_leaves_the_file_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _copy(tmp_path)
    TraceStore(db).close()

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE episodes ADD COLUMN note TEXT")
        raise sqlite3.OperationalError("boom")

    monkeypatch.setattr(_schema, "MIGRATIONS", [*_schema.MIGRATIONS, broken])
    with pytest.raises(TraceError, match="boom"):
        TraceStore(db)
    assert _version(db) == 1
    with sqlite3.connect(db) as conn:
        assert "note" not in {r[1] for r in conn.execute("PRAGMA table_info(episodes)")}


def test_a_new_file_is_current_and_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "a" / "b" / "traces.db"
    store = TraceStore(db)
    store.create_run("r", "eval", {})
    store.flush()
    store.close()
    assert _version(db) == _schema.current_version()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    for folder in (db.parent, db.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for extra in db.parent.glob("traces.db-*"):  # WAL files follow the database's mode
        assert stat.S_IMODE(extra.stat().st_mode) == 0o600
