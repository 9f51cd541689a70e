"""The store contract implemented once in portable SQL, over a small backend adapter.

SQLite and PostgreSQL differ only in how a connection is opened, how a write transaction
takes its lock, and the DDL in `migrations`. Every decision that matters (unique operation
keys, the claim, immutability, legal transitions) is made by the database: a conditional
update or insert, never a Python check before a write.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from toolgate.clock import iso, parse_iso, utcnow
from toolgate.errors import ConfigurationError, StoreError
from toolgate.store.base import Store, Tx
from toolgate.store.migrations import MIGRATIONS, Migration


class SqlStore(
    Store,
    abc.ABC,
):
    """`Store` over a SQL database; subclasses provide connections, locking and the clock.

    Each part of the contract is a mixin over the same transactions: proposals and decisions
    (`ProposalRows`), the operation lifecycle and dead letters (`OperationRows`), the audit chain
    (`AuditRows`), rate counters (`CounterRows`) and identities (`IdentityRows`)."""

    _initializer: Callable[[Store], None] | None = None
    _initialized: bool = False
    _init_lock = threading.RLock()

    def set_initializer(self, initializer: Callable[[Store], None]) -> None:
        """Run ``initializer(store)`` once, before the first unit of work (lazy setup for servers)."""
        self._initializer = initializer
        self._initialized = False

    def _ensure_ready(self) -> None:
        if self._initializer is None or self._initialized:
            return
        with self._init_lock:
            if self._initialized:
                return
            self._initialized = True
            try:
                self._initializer(self)
            except BaseException:
                self._initialized = False
                raise

    # ---- backend hooks ---------------------------------------------------------------

    @abc.abstractmethod
    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        """A unit of work; ``write=True`` takes the write lock up front."""

    @abc.abstractmethod
    def _run_script(self, tx: Tx, migration: Migration) -> None:
        """Execute one migration's SQL for this backend."""

    @abc.abstractmethod
    def _lock_migrations(self, tx: Tx) -> None:
        """Serialize concurrent migration runs across processes."""

    def now(self) -> datetime:
        with self.transaction(write=False) as tx:
            return parse_iso(self._tx_now(tx))

    # ---- schema ----------------------------------------------------------------------

    def setup(self) -> None:
        self.migrate("toolgate", MIGRATIONS)

    def require_schema(self) -> None:
        try:
            with self.transaction(write=False) as tx:
                row = tx.one(
                    "SELECT COALESCE(MAX(version), 0) AS v FROM toolgate_schema WHERE component = ?",
                    ("toolgate",),
                )
        except StoreError as exc:
            raise ConfigurationError(f"{self.url} holds no toolgate store") from exc
        version = int(row["v"]) if row else 0
        if version != len(MIGRATIONS):
            raise ConfigurationError(
                f"{self.url} is at schema version {version}, this toolgate needs {len(MIGRATIONS)}; "
                "run a command that writes (e.g. toolgate worker recover) to upgrade it first"
            )

    def migrate(self, component: str, migrations: Sequence[Migration]) -> int:
        with self.transaction() as tx:
            self._lock_migrations(tx)
            tx.execute(
                "CREATE TABLE IF NOT EXISTS toolgate_schema ("
                " component TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,"
                " applied_at TEXT NOT NULL, PRIMARY KEY (component, version))"
            )
            row = tx.one(
                "SELECT COALESCE(MAX(version), 0) AS v FROM toolgate_schema WHERE component = ?",
                (component,),
            )
            current = int(row["v"]) if row else 0
            if current > len(migrations):
                raise ConfigurationError(
                    f"database schema of {component!r} is at version {current}, newer than this "
                    f"toolgate ({len(migrations)}); refusing to run against it"
                )
            for version, migration in enumerate(migrations, start=1):
                if version <= current:
                    continue
                self._run_script(tx, migration)
                tx.execute(
                    "INSERT INTO toolgate_schema (component, version, name, applied_at) VALUES (?, ?, ?, ?)",
                    (component, version, migration.name, iso(utcnow())),
                )
            return len(migrations) - current


__all__ = ["SqlStore"]
