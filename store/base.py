"""The store: one database (SQLite embedded, PostgreSQL), reached through one aggregate per record kind.

The store is where effects and their evidence live. `Store` itself is only the connection
layer a backend provides (units of work, the store's clock, the audit chain's lock, the
schema and its migrations); each kind of record is an aggregate over it, one module holding
its Python API and its SQL for both dialects side by side:

- ``store.proposals`` (`toolgate.store.proposals`), ``store.approvals`` (reviewers' decisions),
  ``store.operations`` (the lifecycle with its atomic claim, and dead letters),
  ``store.snapshots`` (the rows a decision or a claim judges, read together in one statement),
- ``store.audit`` (the hash-chained audit log; others link their events into their own transaction),
- ``store.identities``, ``store.delegations`` (sealed credentials),
- ``store.counters`` (rate limits), ``store.leases`` (resources), ``store.slots`` (admission),
  ``store.breakers`` (circuit breakers), ``store.waits`` (durable waits), ``store.changes``
  (notices that another process changed a lease or a breaker).

Every decision that matters (unique operation keys, the claim, immutability, legal transitions)
is made by the database: a conditional update or insert, never a Python check before a write.
The same contract test suite runs against both backends (``tests/test_store_contract.py``).
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import cached_property
from typing import Any

from toolgate.clock import iso, parse_iso, utcnow
from toolgate.errors import ConfigurationError, StoreError
from toolgate.store.approvals import Approvals
from toolgate.store.audit_log import AuditLog
from toolgate.store.breakers import BreakerStates
from toolgate.store.changes import Changes
from toolgate.store.counters import Counters
from toolgate.store.delegations import SealedDelegations
from toolgate.store.identities import Identities
from toolgate.store.keys import Keyring
from toolgate.store.leases import ResourceLeases
from toolgate.store.migrations import MIGRATIONS, Migration
from toolgate.store.operations import Operations
from toolgate.store.proposals import Proposals
from toolgate.store.slots import AdmissionSlots
from toolgate.store.snapshots import Snapshots
from toolgate.store.tx import LinkHead, Relink, Tx, WhenWritten, Written
from toolgate.store.waits import DurableWaits

CLOCK_REUSE_S = 5.0
"""How long a reading of the store's clock serves `Store.calibrated_now` (a few seconds: the
process's monotonic clock drifts by microseconds over them, and a step of the server's clock is
seen within them)."""


class Store(abc.ABC):
    """Durable state with consequences. Every method is safe to call from many threads and processes.

    A backend (`toolgate.store.sqlite.SQLiteStore`, `toolgate.store.postgres.PostgresStore`)
    provides connections, locking and the clock; the aggregates are built on first use and
    share its transactions."""

    url: str
    """Where the store lives (SQLite path or PostgreSQL URL without password)."""
    keys: Keyring
    """The store's secret and its purpose keys: the audit chain, approval and identity MACs,
    token hashes and state seals. Every process sharing one database must hold the same secret."""
    read_only: bool = False
    """True for stores opened only to read (verification commands): every write fails."""
    dialect: str = "sql"
    """The SQL dialect the aggregates speak to it: ``"sqlite"`` or ``"postgres"``."""

    _initializer: Callable[[Store], None] | None = None
    _initialized: bool = False
    _init_lock = threading.RLock()

    # ---- the aggregates --------------------------------------------------------------

    @cached_property
    def audit(self) -> AuditLog:
        """The hash-chained audit log."""
        return AuditLog(self)

    @cached_property
    def proposals(self) -> Proposals:
        """Proposals, each inserted with its operation."""
        return Proposals(self, self.audit)

    @cached_property
    def approvals(self) -> Approvals:
        """Reviewers' decisions, and the operation change a completing one settles."""
        return Approvals(self, self.audit)

    @cached_property
    def operations(self) -> Operations:
        """Operations with their atomic claim, and dead letters."""
        return Operations(self, self.audit)

    @cached_property
    def snapshots(self) -> Snapshots:
        """One-statement reads of the rows a guard judges together (a decision, a claim)."""
        return Snapshots(self)

    @cached_property
    def counters(self) -> Counters:
        """Rate-limit counters."""
        return Counters(self)

    @cached_property
    def identities(self) -> Identities:
        """Who may act, MAC-bound."""
        return Identities(self, self.audit)

    @cached_property
    def leases(self) -> ResourceLeases:
        """Resource leases: one holder per resource."""
        return ResourceLeases(self)

    @cached_property
    def slots(self) -> AdmissionSlots:
        """Admission slots: a cluster-wide cap on work in flight per scope."""
        return AdmissionSlots(self)

    @cached_property
    def delegations(self) -> SealedDelegations:
        """Sealed user credentials kept for one approved write."""
        return SealedDelegations(self)

    @cached_property
    def breakers(self) -> BreakerStates:
        """Circuit-breaker state shared by every process."""
        return BreakerStates(self)

    @cached_property
    def changes(self) -> Changes:
        """Notices that another process gave up a resource lease or changed a breaker (a backend
        without them, SQLite, is never `Changes.live`: callers poll)."""
        return Changes()

    @cached_property
    def waits(self) -> DurableWaits:
        """Durable waits for the jobs writes started."""
        return DurableWaits(self)

    # ---- the connection layer a backend provides -------------------------------------

    @abc.abstractmethod
    def transaction(self, *, write: bool = True) -> AbstractContextManager[Tx]:
        """A unit of work; ``write=True`` takes the write lock up front (also used by systems of
        record that share the database, and by aggregates, which pass it on to each other)."""

    @abc.abstractmethod
    def _tx_now(self, tx: Tx) -> str:
        """The database's current time as `iso` text, read inside ``tx``."""

    @abc.abstractmethod
    def _chain_head(self, tx: Tx) -> tuple[str, str]:
        """Take the audit chain's lock (held until ``tx`` ends) and read, under it, the store's
        time and the hash of the chain's last event: ``(now, last_hash)``, the genesis hash for an
        empty chain. Called as the last step of a transaction, so the lock covers only linking the
        new events and the commit, never the state change's own round trips."""

    def _link_head(self, tx: Tx, events: int, values: Sequence[tuple[str, Sequence[Any]]] = ()) -> LinkHead:
        """`_chain_head` for linking ``events`` events, after the reads ``values`` (one statement
        for all of them); no sequence numbers reserved: the database numbers the events on insert.
        A backend with round trips to save overrides it."""
        read = select_values(tx, values)[0] if values else []
        now, last_hash = self._chain_head(tx)
        return LinkHead(now, last_hash, [], read)

    def _link_behind(
        self,
        tx: Tx,
        statements: Sequence[tuple[str, Sequence[Any]]],
        groups: Sequence[tuple[int, Written]],
        values: Sequence[tuple[str, Sequence[Any]]] = (),
    ) -> tuple[list[list[dict[str, Any]]], LinkHead | None]:
        """`Database._link_behind` one step after the other: the statements (`Tx.many`), then,
        when the first group's statement returned its row, `_link_head` for the groups whose
        statements did. A backend with round trips to save overrides it."""
        answers = tx.many(statements)
        if not groups or not answers[groups[0][1].statement]:
            return answers, None
        events = sum(count for count, written in groups if answers[written.statement])
        return answers, self._link_head(tx, events, values)

    def _head_first(self, tx: Tx, values: Sequence[tuple[str, Sequence[Any]]] = ()) -> LinkHead | None:
        """`Database._head_first`: None, this backend links behind the statements (`_link_behind`)."""
        return None

    def _all_written(self, tx: Tx, first: Written, rows: Sequence[Written]) -> str:
        """`Database._all_written`: never asked here (nothing is linked ahead, see `_wrote`)."""
        raise StoreError(f"{type(self).__name__} reads no chain head first: link behind the statements")

    def _wrote(self, tx: Tx, row: Written) -> str:
        """`Database._wrote`: never asked here, since this backend links nothing ahead of its
        statements (`_head_first` reads no head). A caller that asks anyway broke that contract."""
        raise StoreError(f"{type(self).__name__} reads no chain head first: link behind the statements")

    def _link_ahead(
        self,
        tx: Tx,
        statements: Sequence[tuple[str, Sequence[Any]]],
        rereads: Sequence[tuple[str, Sequence[Any]]],
        written: Written,
    ) -> list[list[dict[str, Any]]]:
        """`Database._link_ahead`: never asked here, since this backend's `_head_first` reads no
        head (`AuditLog.link_ahead` then links behind the statements). A caller that asks anyway
        broke that contract: refused as a store error, never run half-way."""
        raise StoreError(f"{type(self).__name__} reads no chain head first: link behind the statements")

    def _head_guess(self, tx: Tx) -> LinkHead | None:
        """`Database._head_guess`: None, every head this backend reads is read under its lock."""
        return None

    def _link_tail(
        self,
        tx: Tx,
        insert: WhenWritten,
        last_hash: str,
        keyed: Sequence[str],
        relink: Relink,
        *,
        at: str = "",
    ) -> None:
        """`Database._link_tail`: never asked here, since every head this backend reads is read
        under its lock (``LinkHead.locked``), so no tail waits for the COMMIT. A caller that asks
        anyway broke that contract: refused as a store error, nothing sent."""
        raise StoreError(f"{type(self).__name__} reads every chain head under the lock: no tail to send")

    @abc.abstractmethod
    def _run_script(self, tx: Tx, migration: Migration) -> None:
        """Execute one migration's SQL for this backend."""

    @abc.abstractmethod
    def _lock_migrations(self, tx: Tx) -> None:
        """Serialize concurrent migration runs across processes."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections."""

    def now(self) -> datetime:
        """The store's clock (PostgreSQL's ``clock_timestamp()``; on SQLite, the host clock).

        Expiry, leases, rate-limit windows and recorded times are judged by this clock, never by a
        worker's own, so a process with a skewed clock cannot stretch an approval or a lease."""
        with self.transaction(write=False) as tx:
            return parse_iso(self._tx_now(tx))

    def _clock_sql(self) -> str | None:
        """SQL for the store's time that a read statement returns beside its rows, so a step that
        needs a row and the time pays one round trip for both (`Operations.get_at`, the claim's
        guard snapshot); None where the time costs no round trip (SQLite: the host's clock) or a
        clock is put in front of the server's (a test's): then the caller asks `now`."""
        return None

    def _script_clock(self, plus_s: float = 0.0) -> str | None:
        """`Database._script_clock`: None, the caller reads the time (`_tx_now`)."""
        return None

    def _clock_heard(self, now: str) -> datetime:
        """The store's time a statement read by `_clock_sql` (``iso`` text), as a datetime."""
        return parse_iso(now)

    def calibrated_now(self) -> datetime:
        """The store's clock for a judgment no write transaction makes again (the model node's
        task deadline and deprecation window, dispatch's deadline and its policy screening),
        where the backend can tell it without a round trip: PostgreSQL's last reading of its
        clock (by any unit of work of this store) plus the process's monotonic time since, read
        anew when older than `CLOCK_REUSE_S`. Never the process's wall clock, so a skewed worker
        judges by the store's time all the same. Expiry at decide and claim, leases and rate
        windows are never judged with it: the writing transaction's server judges them. Here
        (SQLite: the host's clock is the store's): `now`."""
        return self.now()

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

    # ---- schema ----------------------------------------------------------------------

    def setup(self) -> None:
        """Create or upgrade the schema (explicit; never done at import)."""
        self.migrate("toolgate", MIGRATIONS)

    def require_schema(self) -> None:
        """Refuse (`ConfigurationError`) unless the store exists at this toolgate's schema version."""
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
        """Apply the missing migrations of ``component``; returns how many ran."""
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

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def select_values(tx: Tx, values: Sequence[tuple[str, Sequence[Any]]], *columns: str) -> tuple[list[Any], dict[str, Any]]:
    """The reads ``values`` (each a scalar subquery and its parameters) and any further
    ``columns`` in one statement: the reads in order, and the whole row."""
    row = tx.one(
        "SELECT " + ", ".join([*(f"({sql}) AS v{n}" for n, (sql, _) in enumerate(values)), *columns]),
        tuple(param for _, params in values for param in params),
    )
    assert row is not None  # a SELECT of scalar subqueries always returns its one row
    return [row[f"v{n}"] for n in range(len(values))], row


def iter_statements(script: str) -> Iterator[str]:
    """Split a SQLite migration script into statements (trigger bodies keep ``; END`` on one line)."""
    for statement in script.split(";\n"):
        if statement.strip():
            yield statement.strip()


__all__ = ["CLOCK_REUSE_S", "Store", "Tx", "iter_statements", "select_values"]
