"""`ServiceRecords` on SQLite: a connection of its own, confined by SQLite's authorizer.

The authorizer is called by the engine while it compiles each statement, once per table and
column the statement would read or write and per action (``ATTACH``, ``PRAGMA``, ``CREATE``...).
It allows reads of the scope's tables, writes of the tables it owns inside a write unit of work,
inserts into its ``read_appends`` tables inside the write unit of work of a read call
(`toolgate.store.handler_access`), and nothing else. Prepared statements are never cached (``cached_statements=0``), so every
statement is compiled, and so authorized, in the unit of work that runs it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from toolgate.errors import CapabilityDenied, StoreError
from toolgate.store.base import Tx
from toolgate.store.handler_access import UnitOfWork, unit_of_work
from toolgate.store.records_expiry import OpenUnit
from toolgate.store.records_scope import RecordsScope, ServiceRecords, records_denied
from toolgate.store.sqlite import SQLiteStore

_WRITES = {sqlite3.SQLITE_INSERT: "insert", sqlite3.SQLITE_UPDATE: "update", sqlite3.SQLITE_DELETE: "delete"}
_ALWAYS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
"""Compiling a SELECT, calling a built-in function (no extension can be loaded), a recursive CTE."""
_MAIN = (None, "main")
"""The database a table of the file lives in (``None``: SQLite did not say, e.g. ``COUNT(*)``)."""


class _Guard:
    """The authorizer of one connection, with the state of the unit of work it serves."""

    def __init__(self, scope: RecordsScope) -> None:
        self.scope = scope
        self.writes: dict[str, frozenset[str]] = {}
        """Per write action (``insert``, ``update``, ``delete``), the tables the unit of work may
        write (empty outside a write unit of work)."""
        self.control = False
        """True only while this module itself runs BEGIN, COMMIT or ROLLBACK."""
        self.refused: tuple[str, str] | None = None
        """The first refusal of the statement being compiled: (target, what)."""

    def _refusal(self, action: int, table: str | None, write: str | None) -> tuple[str, str]:
        if table and (action == sqlite3.SQLITE_READ or write):
            if write and table.startswith("sqlite_"):
                return "statement", "a schema change"
            if write and table in self.scope.tables:
                return table, f"{write} outside a write transaction"
            return table, write or "read"
        return "statement", f"this kind of statement (SQLite action {action})"

    def __call__(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, _src: str | None
    ) -> int:
        if self.control and action == sqlite3.SQLITE_TRANSACTION:
            return sqlite3.SQLITE_OK
        if action in _ALWAYS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ and db in _MAIN and arg1 in self.scope.readable:
            return sqlite3.SQLITE_OK
        write = _WRITES.get(action)
        if write and db in _MAIN and arg1 in self.writes.get(write, ()):
            return sqlite3.SQLITE_OK
        if self.refused is None:  # the first refusal of a statement names what it reached for
            self.refused = self._refusal(action, arg1, write)
        return sqlite3.SQLITE_DENY


def _close_all(idle: list[tuple[sqlite3.Connection, _Guard]]) -> None:
    for conn, _ in list(idle):
        conn.close()


class _GuardedTx:
    def __init__(self, conn: sqlite3.Connection, guard: _Guard, unit: OpenUnit | None) -> None:
        self._conn = conn
        self._guard = guard
        self._unit = unit

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        self._guard.refused = None
        try:
            with self._unit.statement() if self._unit is not None else nullcontext():
                cursor = self._conn.execute(sql, tuple(params))
                rows = cursor.fetchall() if cursor.description else []
        except sqlite3.DatabaseError:
            refused = self._guard.refused
            if refused is None:
                raise
            raise records_denied(self._guard.scope, *refused) from None
        return [dict(r) for r in rows]

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = self.execute(sql, params)
        return rows[0] if rows else None

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        """A service's own statements are few: this one simply runs now."""
        self.execute(sql, params)

    def many(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[dict[str, Any]]]:
        """A service's own statements are few: one after the other."""
        return [self.execute(sql, params) for sql, params in statements]


class SqliteRecords(ServiceRecords):
    """A service's records in an SQLite file (the store's file, through other connections)."""

    MAX_IDLE = 4

    def __init__(
        self, path: Path, scope: RecordsScope, *, read_only: bool = False, busy_timeout_ms: int = 30_000
    ) -> None:
        self.path = path
        self.scope = scope
        self.read_only = read_only
        self._busy_timeout_ms = busy_timeout_ms
        self._idle: list[tuple[sqlite3.Connection, _Guard]] = []
        self._idle_pid = os.getpid()
        self._lock = threading.Lock()
        weakref.finalize(self, _close_all, self._idle)  # idle connections close with the capability

    @classmethod
    def of(cls, store: SQLiteStore, scope: RecordsScope) -> SqliteRecords:
        """The records of ``scope`` in ``store``'s file (the store itself is not kept)."""
        return cls(store.path, scope, read_only=store.read_only, busy_timeout_ms=store._busy_timeout_ms)

    def _connect(self) -> tuple[sqlite3.Connection, _Guard]:
        target: str | Path = f"{self.path.resolve().as_uri()}?mode=ro" if self.read_only else self.path
        conn = sqlite3.connect(
            target,
            uri=self.read_only,
            timeout=self._busy_timeout_ms / 1000,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=0,
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        conn.execute("PRAGMA foreign_keys = ON")
        guard = _Guard(self.scope)
        conn.set_authorizer(guard)  # from here on the engine asks the guard about every statement
        return conn, guard

    def _checkout(self) -> tuple[sqlite3.Connection, _Guard]:
        with self._lock:
            if self._idle_pid != os.getpid():  # a forked child: the parent's connections are not ours
                self._idle.clear()
                self._idle_pid = os.getpid()
            if self._idle:
                return self._idle.pop()
        return self._connect()

    def _checkin(self, held: tuple[sqlite3.Connection, _Guard], *, reusable: bool) -> None:
        with self._lock:
            if reusable and self._idle_pid == os.getpid() and len(self._idle) < self.MAX_IDLE:
                self._idle.append(held)
                return
        held[0].close()

    @staticmethod
    def _control(conn: sqlite3.Connection, guard: _Guard, statement: str, unit: OpenUnit | None = None) -> None:
        with unit.statement() if unit is not None else nullcontext():
            guard.control = True
            try:
                conn.execute(statement)
            finally:
                guard.control = False

    def _writes(self, kind: UnitOfWork) -> dict[str, frozenset[str]]:
        if kind == "write":
            return dict.fromkeys(_WRITES.values(), self.scope.tables)
        if kind == "append" and self.scope.read_appends:
            return {"insert": self.scope.read_appends}
        return {}

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        # inside a read tool's call: read-only (or appends only), its writes refused by the authorizer
        writes = self._writes(unit_of_work(write))
        write = bool(writes)
        if write and self.read_only:
            raise StoreError(f"the records of {self.scope.name} were opened read-only")
        try:
            held = self._checkout()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the records of {self.scope.name}: {exc}") from exc
        conn, guard = held
        # inside a handler call: ended (rolled back, the file's write lock freed) once open longer
        # than the call's timeout (`toolgate.store.records_expiry`)
        unit = OpenUnit.of_call(self.scope, stop=conn.interrupt, close=conn.close)
        reusable = False
        try:
            guard.writes = writes
            self._control(conn, guard, "BEGIN IMMEDIATE" if write else "BEGIN", unit)
            try:
                yield _GuardedTx(conn, guard, unit)
            except BaseException:
                with contextlib.suppress(CapabilityDenied):  # ended: its connection's close rolled back
                    self._control(conn, guard, "ROLLBACK", unit)
                raise
            self._control(conn, guard, "COMMIT", unit)
            reusable = True
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite error in the records of {self.scope.name}: {exc}") from exc
        finally:
            guard.writes = {}
            if unit is None or unit.finish():  # else ended: closed, never reused
                self._checkin(held, reusable=reusable and not conn.in_transaction)

    def close(self) -> None:
        with self._lock:
            idle = list(self._idle)
            self._idle.clear()
        for conn, _ in idle:
            conn.close()


__all__ = ["SqliteRecords"]
