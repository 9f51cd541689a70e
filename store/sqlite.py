"""The embedded default backend: one SQLite file under the data directory.

Each unit of work borrows an idle connection from the store's small pool (opening one, with its
PRAGMAs, costs more than the transaction it serves) and gives it back; one that failed is closed,
and a forked child never uses its parent's. WAL mode plus ``BEGIN IMMEDIATE`` for writes makes
each write transaction take the database's single writer lock up front, so conditional updates
are atomic across processes too.

Every process using an SQLite file runs on the same host, so the store's clock is the host's
clock, read in one place (`SQLiteStore.now`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from toolgate.clock import iso, utcnow
from toolgate.errors import StoreError
from toolgate.store.audit_records import GENESIS_HASH
from toolgate.store.base import Store, Tx, iter_statements, select_values
from toolgate.store.handler_access import refuse_store
from toolgate.store.keys import Keyring
from toolgate.store.migrations import Migration
from toolgate.store.tx import LinkHead

_LAST_HASH = "SELECT hash FROM audit_events ORDER BY seq DESC LIMIT 1"
"""The hash of the audit chain's last event (no row: the chain is empty)."""


class _SqliteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cursor = self._conn.execute(sql, tuple(params))
        rows = cursor.fetchall() if cursor.description else []
        return [dict(r) for r in rows]

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        """An embedded database has no round trip to save: the statement runs now."""
        self._conn.execute(sql, tuple(params))

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = self.execute(sql, params)
        return rows[0] if rows else None

    def many(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[dict[str, Any]]]:
        """An embedded database has no round trip to save: one after the other."""
        return [self.execute(sql, params) for sql, params in statements]


_pause = time.sleep
"""How a connection waits before asking for WAL again (a test replaces it to act in between)."""


def _write_ahead(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Put the file in WAL mode (it stays so: the first process to ask sets it for every other).

    While another connection of a file still in rollback-journal mode holds its write lock (a
    process starting beside this one, writing first), SQLite refuses the change at once with
    "database is locked", without waiting out the busy timeout as it does for a statement: asked
    again, with a growing pause, until ``timeout_s``; once another process has set WAL, asking
    again is a no-op."""
    deadline = time.monotonic() + timeout_s
    pause = 0.002
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        _pause(pause)
        pause = min(pause * 2, 0.1)


class SQLiteStore(Store):
    """`Store` on a SQLite file."""

    dialect = "sqlite"

    def __init__(
        self, path: str | Path, *, key: bytes, read_only: bool = False, busy_timeout_ms: int = 30_000
    ) -> None:
        # absolute from here on: a connection is opened whenever a unit of work finds none idle,
        # and loaded code may have changed the process's directory by then (``os.chdir`` in a
        # handler); a relative path (the default ``.toolgate``) would open a new, empty database there
        self.path = Path(path).absolute()
        self.url = f"sqlite:///{self.path}"
        self.keys = Keyring(key)
        self.read_only = read_only
        self._busy_timeout_ms = busy_timeout_ms
        self._wal_ready = False
        self._idle: list[sqlite3.Connection] = []
        self._idle_pid = os.getpid()
        self._idle_lock = threading.Lock()

    MAX_IDLE = 8
    """Idle connections kept for reuse (more concurrent units of work open their own)."""

    def _checkout(self) -> sqlite3.Connection:
        with self._idle_lock:
            if self._idle_pid != os.getpid():  # a forked child: the parent's connections are not ours
                self._idle, self._idle_pid = [], os.getpid()
            if self._idle:
                return self._idle.pop()
        return self._connect()

    def _checkin(self, conn: sqlite3.Connection, *, reusable: bool) -> None:
        with self._idle_lock:
            if reusable and self._idle_pid == os.getpid() and len(self._idle) < self.MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            # mode=ro: SQLite itself refuses every write, and a missing file is an error, not a new store
            conn = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro",
                uri=True,
                timeout=self._busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=self._busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False
            )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        conn.execute("PRAGMA foreign_keys = ON")
        if not self._wal_ready and not self.read_only:
            _write_ahead(conn, self._busy_timeout_ms / 1000)
            self._wal_ready = True
        return conn

    def now(self) -> datetime:
        """The host clock (every process on an SQLite file shares it)."""
        return utcnow()

    def _tx_now(self, tx: Tx) -> str:
        return iso(utcnow())

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        refuse_store("transaction")  # never inside a handler call (`toolgate.store.handler_access`)
        if write and self.read_only:
            raise StoreError(f"the store {self.path} was opened read-only")
        self._ensure_ready()
        try:
            conn = self._checkout()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite store {self.path}: {exc}") from exc
        reusable = False
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield _SqliteTx(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            reusable = True
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store error: {exc}") from exc
        finally:
            # only a connection whose transaction committed goes back: anything else may hold state
            self._checkin(conn, reusable=reusable and not conn.in_transaction)

    def _chain_head(self, tx: Tx) -> tuple[str, str]:
        """BEGIN IMMEDIATE already holds SQLite's single writer lock: no other lock to take."""
        last = tx.one(_LAST_HASH)
        return iso(utcnow()), last["hash"] if last else GENESIS_HASH

    def _link_head(self, tx: Tx, events: int, values: Sequence[tuple[str, Sequence[Any]]] = ()) -> LinkHead:
        """`Database._link_head` with the reads ``values`` and the chain's last hash in one
        statement: BEGIN IMMEDIATE already holds SQLite's single writer lock, so the head read
        beside them is the locked one `_chain_head` reads (a statement fewer per linking step)."""
        if not values:
            return super()._link_head(tx, events, values)
        read, row = select_values(tx, values, f"({_LAST_HASH}) AS last_hash")
        last_hash = row["last_hash"]
        return LinkHead(iso(utcnow()), last_hash if last_hash is not None else GENESIS_HASH, [], read)

    def _lock_migrations(self, tx: Tx) -> None:
        """BEGIN IMMEDIATE already holds SQLite's single writer lock."""

    def _run_script(self, tx: Tx, migration: Migration) -> None:
        for statement in iter_statements(migration.sqlite):
            tx.execute(statement)

    def close(self) -> None:
        """Close the idle connections. A unit of work still running gives its connection back
        when it ends, so close a store once nothing uses it."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


__all__ = ["SQLiteStore"]
