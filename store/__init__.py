"""Durable state with consequences: proposals, approvals, operations with atomic claims, audit log."""

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
