"""Service records: the narrow capability a system of record's code holds instead of the `Store`.

A handler (and the demo service or downstream fake it closes over) reaches its own tables through
a `ServiceRecords`: ``transaction(write=...)`` yields an object with the store's ``execute`` /
``one`` shape, on a connection of its own that the *database engine* confines to the tables the
service declares in its `RecordsScope` (`toolgate.store.records_scope`). Nothing reachable from it
can write proposals, approvals, operations or the audit log, nor read them:

- SQLite: a separate ``sqlite3`` connection to the same file whose ``set_authorizer`` callback
  lets the engine compile only reads of the declared tables and writes of the owned ones;
  every other table (the gateway's, another service's, ``sqlite_schema``), ``ATTACH``, ``PRAGMA``,
  transaction control and every schema change is denied while the statement is compiled.
- PostgreSQL: a separate connection logged in as a per-service, per-database LOGIN role that
  trusted setup (`provision_service_records`, with the store's own connection) grants privileges
  on exactly the declared tables. The role may write its own tables, so the capability sends
  each statement alone and only reads and writes of tables: no transaction control, no session
  state (`toolgate.store._records_postgres`), and a read's READ ONLY cannot be undone.

A refused statement raises `toolgate.errors.CapabilityDenied` (``"records"``, the table or
``"statement"``), never the driver's error; the gateway audits it as ``handler.capability_denied``.
Inside the call of a handler that may not write (a read tool's, a status check), every unit of
work is read-only, whatever it asked for (`toolgate.store.handler_access`).

What this does not do: Python code in the gateway's process can still import the store, open
files or reach the connection's private attributes. The boundary holds for what goes through the
capability, and (on PostgreSQL) for anything done with the role's credentials.
"""

from __future__ import annotations

import threading
import weakref

from toolgate.errors import ConfigurationError
from toolgate.store._records_postgres import PostgresRecords, provision_role
from toolgate.store._records_sqlite import SqliteRecords
from toolgate.store.base import Store
from toolgate.store.handler_access import refuse_store
from toolgate.store.postgres import PostgresStore
from toolgate.store.records_scope import RecordsScope, ServiceRecords
from toolgate.store.sqlite import SQLiteStore

_OPEN: weakref.WeakKeyDictionary[Store, dict[RecordsScope, ServiceRecords]] = weakref.WeakKeyDictionary()
_OPEN_LOCK = threading.Lock()


def open_service_records(store: Store, scope: RecordsScope) -> ServiceRecords:
    """The capability over ``scope`` in ``store``'s database (trusted code: it reads the store's
    location and, on PostgreSQL, its key; the capability keeps neither the store nor the key).
    One per store and scope is kept, so services built many times share their connections.
    Connects lazily: nothing is opened until the first unit of work. Refused inside a handler
    call (`toolgate.store.handler_access`): capabilities are wired before any call."""
    refuse_store("open_service_records")
    try:
        with _OPEN_LOCK:
            found = _OPEN.get(store, {}).get(scope)
    except TypeError:  # a store that cannot be a weak key: a capability of its own each time
        found = None
    if found is not None:
        return found
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
    refuse_store("provision_service_records")
    if isinstance(store, PostgresStore) and not store.read_only:
        provision_role(store, scope)


__all__ = ["open_service_records", "provision_service_records"]
