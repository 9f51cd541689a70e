"""Service records: the narrow capability a system of record's code holds instead of the `Store`.

A handler (and the demo service or downstream fake it closes over) reaches its own tables through
a `ServiceRecords`: ``transaction(write=...)`` yields an object with the store's ``execute`` /
``one`` shape, on a connection of its own that the *database engine* confines to the tables the
service declares in its `RecordsScope`. Nothing reachable from it can write proposals, approvals,
operations or the audit log, nor read them:

- SQLite: a separate ``sqlite3`` connection to the same file whose ``set_authorizer`` callback
  lets the engine compile only reads of the declared tables and writes of the owned ones;
  every other table (the gateway's, another service's, ``sqlite_schema``), ``ATTACH``, ``PRAGMA``,
  transaction control and every schema change is denied while the statement is compiled.
- PostgreSQL: a separate connection logged in as a per-service, per-database LOGIN role that
  trusted setup (`provision_service_records`, with the store's own connection) grants privileges
  on exactly the declared tables.

A refused statement raises `toolgate.errors.CapabilityDenied` (``"records"``, the table or
``"statement"``), never the driver's error; the gateway audits it as ``handler.capability_denied``.

What this does not do: Python code in the gateway's process can still import the store, open
files or reach the connection's private attributes. The boundary holds for what goes through the
capability, and (on PostgreSQL) for anything done with the role's credentials.
"""

from __future__ import annotations

import abc
import re
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from toolgate.errors import CapabilityDenied, ConfigurationError
from toolgate.store.base import Store, Tx

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class RecordsScope:
    """What one system of record may touch: ``tables`` it owns (read and write) and ``reads``,
    tables of another service it may only read. Names are lower-case SQL identifiers."""

    name: str
    """The service's name (its database role derives from it)."""
    tables: frozenset[str]
    reads: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        names = (self.name, *self.tables, *self.reads)
        if not self.name or not all(_NAME.match(n) for n in names):
            raise ConfigurationError(f"records scope {self.name!r}: names must be lower-case SQL identifiers")
        if self.tables & self.reads:
            raise ConfigurationError(
                f"records scope {self.name!r}: a table is either owned or read, not both"
            )

    @property
    def readable(self) -> frozenset[str]:
        """Every table a statement may read."""
        return self.tables | self.reads


def records_denied(scope: RecordsScope, target: str, what: str) -> CapabilityDenied:
    """The refusal of one statement (``target``: the table, or ``statement``)."""
    return CapabilityDenied(
        "records", target, f"the records capability of {scope.name} does not allow {what} ({target})"
    )


class ServiceRecords(abc.ABC):
    """A capability over one service's tables (see the module docstring)."""

    scope: RecordsScope
    read_only: bool

    @abc.abstractmethod
    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        """A unit of work on the service's tables; ``write=False`` refuses every write."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close idle connections (a unit of work still running closes its own when it ends)."""


class UnboundRecords(ServiceRecords):
    """Records of a service built without a store (to list its tools): every use is refused."""

    def __init__(self, scope: RecordsScope) -> None:
        self.scope = scope
        self.read_only = True

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        raise ConfigurationError(f"{self.scope.name} was built without a store: it has no records")
        yield  # pragma: no cover

    def close(self) -> None:
        """Nothing is open."""


_OPEN: weakref.WeakKeyDictionary[Store, dict[RecordsScope, ServiceRecords]] = weakref.WeakKeyDictionary()
_OPEN_LOCK = threading.Lock()


def open_service_records(store: Store, scope: RecordsScope) -> ServiceRecords:
    """The capability over ``scope`` in ``store``'s database (trusted code: it reads the store's
    location and, on PostgreSQL, its key; the capability keeps neither the store nor the key).
    One per store and scope is kept, so services built many times share their connections.
    Connects lazily: nothing is opened until the first unit of work."""
    try:
        with _OPEN_LOCK:
            found = _OPEN.get(store, {}).get(scope)
    except TypeError:  # a store that cannot be a weak key: a capability of its own each time
        found = None
    if found is not None:
        return found
    from toolgate.store._records_postgres import PostgresRecords
    from toolgate.store._records_sqlite import SqliteRecords
    from toolgate.store.postgres import PostgresStore
    from toolgate.store.sqlite import SQLiteStore

    records: ServiceRecords
    if isinstance(store, SQLiteStore):
        records = SqliteRecords.of(store, scope)
    elif isinstance(store, PostgresStore):
        records = PostgresRecords.of(store, scope)
    else:
        raise ConfigurationError(f"no records capability for a {type(store).__name__}")
    try:
        with _OPEN_LOCK:
            return _OPEN.setdefault(store, {}).setdefault(scope, records)
    except TypeError:
        return records


def provision_service_records(store: Store, scope: RecordsScope) -> None:
    """Trusted setup, after the scope's tables exist: on PostgreSQL create (or update) the
    service's login role and grant it exactly the declared tables; nothing to do on SQLite."""
    from toolgate.store._records_postgres import provision_role
    from toolgate.store.postgres import PostgresStore

    if isinstance(store, PostgresStore) and not store.read_only:
        provision_role(store, scope)


__all__ = [
    "RecordsScope",
    "ServiceRecords",
    "UnboundRecords",
    "open_service_records",
    "provision_service_records",
    "records_denied",
]
