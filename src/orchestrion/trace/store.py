"""The SQLite trace store with a background writer.

Writes never block the event loop: callers enqueue statements and a single
writer thread applies them in batched transactions. ``flush()`` waits until
everything enqueued so far is committed; an episode counts as finished only
once its closing update has been committed (``episodes.finished = 1``).
Reads use their own short-lived connections (WAL mode lets them run beside
the writer).

A batch that fails with an ``sqlite3.OperationalError`` (a full disk, an I/O error, a lock
held too long) is held and tried again every ``RETRY_S`` seconds, ahead of what comes after it,
until it commits: the store recovers on its own once writes succeed again. While it fails,
:attr:`TraceStore.failing` says why, flushes raise, and submits are still taken up to
``MAX_HELD`` statements. Any other error (a bad statement) stops the writer for good.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeGuard

from .._errors import TraceError
from ._queries import TraceQueries
from ._schema import check_ours, create_file, db_path_problem, make_dirs, prepare
from .bus import TraceBus, TraceEvent

_Marker = threading.Event | tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]
_STOP = object()
RETRY_S = 1.0  # while writes fail: how often the held batch is tried again
MAX_HELD = 100_000  # statements held while writes fail; past that, submit raises


def default_db_path() -> Path:
    """``$ORCHESTRION_DB`` or ``~/.orchestrion/traces.db``."""
    env = os.environ.get("ORCHESTRION_DB")
    return Path(env) if env else Path.home() / ".orchestrion" / "traces.db"


def check_trace_file(path: Path) -> None:
    """What a reading command checks before it opens ``path``: that it is a trace database. An empty
    file, or an SQLite file without the trace tables, is a one-line :class:`TraceError` and is left
    as it was (opening it as a store would write the schema into it). Garbage raises
    ``sqlite3.DatabaseError``, which the CLI reports as a damaged file."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TraceError(f"trace store {path}: cannot read it ({exc.strerror or exc})") from None
    if size == 0:
        raise TraceError(f"trace store {path}: the file is empty, not a trace database; check --db "
                         "(or ORCHESTRION_DB), or run an episode first to create one")
    conn = sqlite3.connect(path, timeout=30)  # plain reads: nothing is written, not even the journal mode
    try:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'episodes'").fetchone()
    finally:
        conn.close()
    if found is None:
        raise TraceError(f"trace store {path}: an SQLite file without trace tables, not a trace database; "
                         "check --db (or ORCHESTRION_DB)")


def open_for_reading(path: Path) -> TraceStore:
    """The trace store at ``path`` for a reading command, which never creates one, nor writes a
    schema into an empty or foreign file: either is a one-line :class:`TraceError`."""
    problem = db_path_problem(path)
    if problem is not None:
        raise TraceError(f"trace store {path}: {problem}; a trace database is a regular file")
    if not path.is_file():
        raise TraceError(f"trace store {path}: no trace database there; check --db (or ORCHESTRION_DB), "
                         "or run an episode first to create one")
    check_trace_file(path)
    return TraceStore(path)


class TraceStore(TraceQueries):
    """A trace database file plus the thread that writes to it.

    Its typed methods (:class:`~orchestrion.trace._queries.TraceQueries`) are the interface;
    ``submit``/``query`` take raw SQL for the trace package itself and for tests.
    """

    def __init__(self, path: str | Path | None = None, *, batch_max: int = 1000, linger_s: float = 0.02) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self._batch_max = batch_max
        self._linger_s = linger_s
        problem = db_path_problem(self.path)
        if problem is not None:
            raise TraceError(f"trace store {self.path}: {problem}; a trace database is a regular file or a new path")
        try:
            make_dirs(self.path.parent)
            create_file(self.path)
            check_ours(self.path)  # before WAL mode or a table is written into someone else's database
            conn = self._connect()
            try:
                conn.isolation_level = None
                prepare(self.path, conn)
            finally:
                conn.close()
        except (OSError, sqlite3.Error) as exc:
            raise TraceError(
                f"trace store {self.path}: cannot open ({exc}); set ORCHESTRION_DB or --db to a writable file"
            ) from None
        self._pending: list[object] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._error: BaseException | None = None  # a failure the writer cannot recover from
        self._failure: sqlite3.OperationalError | None = None  # the last batch failed; it is being retried
        self._held = 0  # statements waiting for the retry
        self.transactions = 0
        self.bus = TraceBus()
        self._thread = threading.Thread(target=self._writer, name="orchestrion-trace-writer", daemon=True)
        self._thread.start()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    # -- writing ----------------------------------------------------------------
    @property
    def failing(self) -> str | None:
        """Why writes fail right now (None while they succeed)."""
        found = self._error or self._failure
        return None if found is None else str(found)

    def _check_writable(self) -> None:
        if self._error is not None:
            raise TraceError(f"trace store {self.path}: writer failed: {self._error}")
        if self._failure is not None and self._held + len(self._pending) >= MAX_HELD:
            raise TraceError(f"trace store {self.path}: writes are failing ({self._failure}) and "
                             f"{MAX_HELD} statements wait already")

    def submit(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Enqueue one statement; it is committed by the writer thread soon after."""
        self._check_writable()
        self._put((sql, params))

    def submit_all(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Enqueue several statements that are committed in one transaction (all or none)."""
        self._check_writable()
        if not statements:
            return
        # The writer takes the whole pending list at once under this lock, so
        # statements appended together always land in the same batch.
        with self._lock:
            first = not self._pending
            self._pending.extend(statements)
        if first:
            self._wake.set()

    def publish(self, event: TraceEvent) -> None:
        """Announce ``event`` on :attr:`bus` once everything enqueued before it is committed."""
        if self.bus.active:
            self._put(_Publish(event))

    def _put(self, item: object) -> None:
        # A plain list under a lock: cheaper than queue.Queue, and the writer is only
        # woken when the list goes from empty to non-empty.
        with self._lock:
            self._pending.append(item)
            first = len(self._pending) == 1
        if first:
            self._wake.set()

    def flush(self, timeout_s: float = 30.0) -> None:
        """Block until every statement enqueued before this call is committed."""
        done = threading.Event()
        self._put(done)
        if not done.wait(timeout_s):
            raise TraceError(f"trace store {self.path}: flush timed out after {timeout_s:g}s")
        self._raise_if_failed()

    async def aflush(self) -> None:
        """Like :meth:`flush`, without blocking the event loop."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._put((loop, fut))
        await fut
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        self._check_writable()
        if self._failure is not None:
            raise TraceError(f"trace store {self.path}: writes are failing ({self._failure}); "
                             f"{self._held} statements are held and tried again every {RETRY_S:g}s")

    def close(self) -> None:
        if self._thread.is_alive():
            self._put(_STOP)
            self._thread.join(timeout=30)

    def _writer(self) -> None:
        conn = self._connect()
        held: list[object] = []  # statements (and announcements) of the batch that failed, tried again first
        stop = False
        while not stop:
            self._wake.wait(RETRY_S if held else None)
            time.sleep(self._linger_s)  # let a burst accumulate into one transaction
            with self._lock:
                batch, self._pending = self._pending, []
                self._wake.clear()
            stop = any(entry is _STOP for entry in batch)
            markers: list[_Marker] = [e for e in batch if _is_marker(e)]
            entries = [*held, *(e for e in batch if e is not _STOP and not _is_marker(e))]
            try:
                with conn:
                    _apply(conn, entries)
                self.transactions += 1
                held, self._failure = [], None
            except sqlite3.OperationalError as exc:  # a full disk, say: the batch is kept and tried again
                held, self._failure = entries, exc
            except sqlite3.Error as exc:
                held, self._error = [], exc
            self._held = sum(not isinstance(e, _Publish) for e in held)
            published = [e.event for e in entries if isinstance(e, _Publish)]
            if published and not held and self._error is None:
                self.bus.publish(published)
            for marker in markers:
                if isinstance(marker, threading.Event):
                    marker.set()
                else:
                    loop, fut = marker
                    loop.call_soon_threadsafe(_resolve, fut)
        conn.close()

    # -- reading ----------------------------------------------------------------
    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        conn.row_factory = sqlite3.Row
        try:
            yield conn
        finally:
            conn.close()

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.read() as conn:
            return [dict(r) for r in conn.execute(sql, params).fetchall()]

    # -- moving episodes between stores (e.g. from a Ray worker to the driver) ----------
    def export_episode_rows(self, episode_id: str) -> dict[str, list[dict[str, Any]]]:
        """Every row of one episode, by table: ``episodes``, ``spans``, ``events``, ``decisions``.

        A raw table copy for :meth:`import_rows`, so the rows stay plain dicts of every column the
        table has (read with the typed methods, not these, to use an episode)."""
        return {
            "episodes": self.query("SELECT * FROM episodes WHERE id = ?", (episode_id,)),
            "spans": self.query("SELECT * FROM spans WHERE episode_id = ? ORDER BY rowid", (episode_id,)),
            "events": self.query("SELECT * FROM events WHERE episode_id = ? ORDER BY id", (episode_id,)),
            "decisions": self.query("SELECT * FROM decisions WHERE episode_id = ? ORDER BY rowid", (episode_id,)),
        }

    def import_rows(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        """Insert rows from :meth:`export_episode_rows` (of another store) in one transaction.

        The rows are plain dicts, column name to value, as a raw table copy (not the typed rows).

        Events get fresh ids here; every other id is kept. The episode row goes last.
        An episode that is already in this store is refused (nothing is written).
        """
        tables = ("spans", "events", "decisions", "episodes")
        ids = [r["id"] for r in rows.get("episodes", [])]
        with self.read() as conn:
            known = {t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} for t in tables}
            present = [i for i in ids if conn.execute("SELECT 1 FROM episodes WHERE id = ?", (i,)).fetchone()]
        if present:
            raise TraceError(f"import into {self.path}: episode {present[0]} is already there; not imported twice")
        statements: list[tuple[str, Sequence[Any]]] = []
        for table in tables:
            for row in rows.get(table, []):
                unknown = set(row) - known[table]
                cols = [c for c in row if not (table == "events" and c == "id")]
                if unknown:
                    raise TraceError(
                        f"import into {self.path}: table {table} has no column(s) {', '.join(sorted(unknown))}"
                    )
                sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
                statements.append((sql, [row[c] for c in cols]))
        self.submit_all(statements)


class _Publish:
    __slots__ = ("event",)

    def __init__(self, event: TraceEvent) -> None:
        self.event = event


def _is_marker(entry: object) -> TypeGuard[_Marker]:
    """A flush waiting for what came before it: a thread's Event, or a loop's future."""
    return isinstance(entry, threading.Event) or (
        isinstance(entry, tuple) and isinstance(entry[0], asyncio.AbstractEventLoop))


def _apply(conn: sqlite3.Connection, entries: list[object]) -> None:
    """The statements among ``entries``, in order, consecutive identical ones as one executemany."""
    group_sql: str | None = None
    group: list[Sequence[Any]] = []
    for entry in entries:
        if isinstance(entry, _Publish):
            continue
        sql: str = entry[0]  # type: ignore[index]
        params: Sequence[Any] = entry[1]  # type: ignore[index]
        if sql != group_sql:
            _run(conn, group_sql, group)
            group_sql, group = sql, []
        group.append(params)
    _run(conn, group_sql, group)


def _run(conn: sqlite3.Connection, sql: str | None, rows: list[Sequence[Any]]) -> None:
    """Run consecutive identical statements as one executemany (order is kept)."""
    if sql is None or not rows:
        return
    if len(rows) == 1:
        conn.execute(sql, rows[0])
    else:
        conn.executemany(sql, rows)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
