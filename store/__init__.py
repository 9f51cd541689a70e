"""Durable state with consequences: proposals, approvals, operations with atomic claims, audit log.

The names below are imported on first use (`toolgate.lazy_exports`): ``import toolgate.store.keys``
(the settings' secret length, a read-only CLI command) must not import both database drivers.
"""

from typing import TYPE_CHECKING

from toolgate.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from toolgate.store.audit_records import AuditEvent, AuditEventIn
    from toolgate.store.base import Store, Tx
    from toolgate.store.factory import is_postgres_url, open_checkpointer, open_store
    from toolgate.store.identity_records import IdentityRecord
    from toolgate.store.keys import Keyring
    from toolgate.store.migrations import ALLOWED_TRANSITIONS, MIGRATIONS, Migration
    from toolgate.store.postgres import PostgresStore
    from toolgate.store.records import (
        TERMINAL_STATUSES,
        ApprovalRecord,
        DeadLetter,
        OperationRecord,
        OperationStatus,
        ProposalRecord,
    )
    from toolgate.store.sqlite import SQLiteStore

_EXPORTS = {
    "ALLOWED_TRANSITIONS": "toolgate.store.migrations",
    "ApprovalRecord": "toolgate.store.records",
    "AuditEvent": "toolgate.store.audit_records",
    "AuditEventIn": "toolgate.store.audit_records",
    "DeadLetter": "toolgate.store.records",
    "IdentityRecord": "toolgate.store.identity_records",
    "Keyring": "toolgate.store.keys",
    "MIGRATIONS": "toolgate.store.migrations",
    "Migration": "toolgate.store.migrations",
    "OperationRecord": "toolgate.store.records",
    "OperationStatus": "toolgate.store.records",
    "PostgresStore": "toolgate.store.postgres",
    "ProposalRecord": "toolgate.store.records",
    "SQLiteStore": "toolgate.store.sqlite",
    "Store": "toolgate.store.base",
    "TERMINAL_STATUSES": "toolgate.store.records",
    "Tx": "toolgate.store.base",
    "is_postgres_url": "toolgate.store.factory",
    "open_checkpointer": "toolgate.store.factory",
    "open_store": "toolgate.store.factory",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "ALLOWED_TRANSITIONS",
    "MIGRATIONS",
    "TERMINAL_STATUSES",
    "ApprovalRecord",
    "AuditEvent",
    "AuditEventIn",
    "DeadLetter",
    "IdentityRecord",
    "Keyring",
    "Migration",
    "OperationRecord",
    "OperationStatus",
    "PostgresStore",
    "ProposalRecord",
    "SQLiteStore",
    "Store",
    "Tx",
    "is_postgres_url",
    "open_checkpointer",
    "open_store",
]
