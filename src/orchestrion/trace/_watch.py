"""Commits that *other processes* make to a trace file, seen without writing to it.

The event bus (``_bus``) covers writers in this process; a viewer watching a file that another
process writes asks SQLite's ``PRAGMA data_version`` (it changes when another connection commits)
on one read-only connection, and only then reads which episodes moved.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path


class FileWatch:
    """Commits of other connections to the trace file, seen through ``PRAGMA data_version``."""

    def __init__(self, path: Path | None) -> None:
        self.conn: sqlite3.Connection | None = None
        self.since = time.time()
        if path is None:
            return
        try:  # read-only: a missing file stays missing
            self.conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
            self.version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            self.close()

    def changed(self) -> set[str] | None:
        """Episodes running or finished since the last look, if another connection committed; else None."""
        if self.conn is None:
            return None
        try:
            version = self.conn.execute("PRAGMA data_version").fetchone()[0]
            if version == self.version:
                return None
            self.version, since, self.since = version, self.since, time.time()
            rows = self.conn.execute("SELECT id FROM episodes WHERE finished = 0 OR ended >= ?", (since - 1.0,))
            return {r[0] for r in rows}
        except sqlite3.Error:
            return None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
