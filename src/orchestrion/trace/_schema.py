"""The trace database schema, versioned with ``PRAGMA user_version``.

``MIGRATIONS[i]`` brings a database from version ``i`` to ``i + 1``; the code's
version is ``len(MIGRATIONS)``. The next schema change is one more function
appended to the list. Opening a file (:func:`prepare`):

- version 0 with today's tables (written before versions existed) is version 1;
- an empty file gets every migration;
- an older version is copied to ``NAME.bak-v{old}`` next to it, then upgraded in place;
- a newer version than the code knows is refused;
- a path that is not a regular file (``/dev/null``, a FIFO) and an SQLite database that holds
  other things but not the trace tables are refused before anything is written to them.

Database files and new folders are created owner-only (0o600 / 0o700).
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

from .._errors import TraceError

# Version 1: the schema as it was when versions were introduced. Never edit it: add a migration.
SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, created REAL, kind TEXT, config TEXT, status TEXT
);
CREATE TABLE IF NOT EXISTS episodes (
    id TEXT PRIMARY KEY, run_id TEXT, task_id TEXT, epoch INTEGER DEFAULT 0, strategy TEXT,
    task TEXT, status TEXT, answer TEXT, error TEXT, started REAL, ended REAL,
    input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0, cost_usd REAL,
    cost_units REAL DEFAULT 0, finished INTEGER DEFAULT 0, meta TEXT
);
CREATE INDEX IF NOT EXISTS episodes_run ON episodes(run_id, task_id, epoch);
CREATE TABLE IF NOT EXISTS spans (
    id TEXT PRIMARY KEY, episode_id TEXT, parent_id TEXT, kind TEXT, name TEXT,
    started REAL, ended REAL, status TEXT, input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0, cost_usd REAL, cost_units REAL DEFAULT 0, attrs TEXT
);
CREATE INDEX IF NOT EXISTS spans_episode ON spans(episode_id);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, episode_id TEXT, span_id TEXT, ts REAL,
    kind TEXT, data TEXT
);
CREATE INDEX IF NOT EXISTS events_episode ON events(episode_id);
CREATE TABLE IF NOT EXISTS decisions (
    id TEXT PRIMARY KEY, episode_id TEXT, span_id TEXT, seq INTEGER, attempt INTEGER,
    model TEXT, schema_name TEXT, messages TEXT, prompt_token_ids TEXT, output TEXT,
    token_ids TEXT, logprobs TEXT, action TEXT, error TEXT, valid INTEGER, ts REAL
);
CREATE INDEX IF NOT EXISTS decisions_episode ON decisions(episode_id);
"""

Migration = Callable[[sqlite3.Connection], None]


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def _v1(conn: sqlite3.Connection) -> None:
    """runs, episodes, spans, events, decisions."""
    for statement in _statements(SCHEMA_V1):
        conn.execute(statement)


MIGRATIONS: list[Migration] = [_v1]


def current_version() -> int:
    """The schema version this code writes."""
    return len(MIGRATIONS)


def backup_path(path: Path, version: int) -> Path:
    return path.with_name(f"{path.name}.bak-v{version}")


def make_dirs(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each owner-only (existing ones are left alone)."""
    missing: list[Path] = []
    node = folder
    while not node.exists():
        missing.append(node)
        if node.parent == node:
            break
        node = node.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass


def create_file(path: Path) -> None:
    """Create an empty owner-only file unless it exists (SQLite gives its -wal/-shm files the same mode)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass


def db_path_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a trace database file (None when it can): it exists and is not a
    regular file. A device such as ``/dev/null``, a FIFO or a directory is refused before SQLite
    opens it (SQLite would write a ``-journal`` file beside it, or block on the FIFO)."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None  # a new path (opening it says why when a folder on the way is a file)
    except OSError as exc:
        return f"cannot be checked ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
             (stat.S_ISFIFO, "a pipe (FIFO)"), (stat.S_ISSOCK, "a socket"))
    what = next((name for test, name in kinds if test(mode)), "a special file")
    return f"is {what}, not a regular file"


def check_ours(path: Path) -> None:
    """Refuse an SQLite database that holds something and lacks the trace tables (someone else's
    file): opening it as a store would switch it to WAL and add the trace tables beside its own.
    It is read with a plain connection, which writes nothing; an empty or new file passes."""
    conn = sqlite3.connect(path, timeout=30)
    try:
        names = [str(r[0]) for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name")]
    finally:
        conn.close()
    if names and "episodes" not in names:
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise TraceError(f"trace store {path}: an SQLite database of something else (it holds {shown}), not an "
                         "Orchestrion trace database; it is left as it was")


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _has_tables(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'episodes'").fetchone() is not None


def _refuse_newer(path: Path, version: int) -> None:
    if version > current_version():
        raise TraceError(f"trace store {path}: schema version {version} is newer than this orchestrion supports "
                         f"({current_version()}); upgrade orchestrion to open it")


def prepare(path: Path, conn: sqlite3.Connection) -> None:
    """Bring the database behind ``conn`` (autocommit: ``isolation_level=None``) to the current version."""
    target = current_version()
    seen = _version(conn)
    _refuse_newer(path, seen)
    if seen == target:
        return
    if 0 < seen < target:
        _backup(path, conn, seen)
    conn.execute("BEGIN IMMEDIATE")  # one writer migrates; the others then see the new version
    try:
        version = _version(conn)
        _refuse_newer(path, version)
        if version == 0 and _has_tables(conn):
            _v1(conn)  # a file from before versions: today's tables (IF NOT EXISTS fills any gap)
            version = 1
        for step in range(version, target):
            MIGRATIONS[step](conn)
        conn.execute(f"PRAGMA user_version = {target:d}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _backup(path: Path, conn: sqlite3.Connection, version: int) -> None:
    """A consistent copy of the database (WAL included), owner-only, before it is upgraded."""
    dest = backup_path(path, version)
    create_file(dest)
    with sqlite3.connect(dest) as copy:
        conn.backup(copy)
    copy.close()
