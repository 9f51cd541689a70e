"""Append-only schema migrations. A migration's position in its list is its version.

Never edit or reorder an entry that has shipped: add a new one. Each entry carries the SQL for
both backends; `Store.migrate` applies the missing ones in order inside one transaction per
component, under a lock, and records them in ``toolgate_schema``. Steps from issue 15 on live in
`toolgate.store.migrations_unattended`; new steps are appended there.
"""

from __future__ import annotations

from typing import get_args

from toolgate.store.migration import Migration
from toolgate.store.migrations_unattended import UNATTENDED_STEPS
from toolgate.store.records import OperationStatus

OPERATION_STATUSES: tuple[str, ...] = get_args(OperationStatus)
"""Every operation status, in the order of `toolgate.store.records.OperationStatus` (read from it,
so the two cannot drift). The first migration's ``CHECK`` lists them: a new status also needs a
new migration that widens that check on databases created before it."""

ALLOWED_TRANSITIONS = (
    ("pending_approval", "approved"),
    ("pending_approval", "rejected"),
    ("pending_approval", "expired"),
    ("approved", "executing"),
    ("approved", "expired"),
    ("executing", "succeeded"),
    ("executing", "failed"),
    ("executing", "unknown"),
    ("unknown", "succeeded"),
    ("unknown", "failed"),
    ("unknown", "approved"),
    ("unknown", "dead_lettered"),
    ("dead_lettered", "succeeded"),
    ("dead_lettered", "failed"),
)
"""The operation state machine; the database refuses any other status change."""

FINAL_STATUSES: frozenset[str] = frozenset(OPERATION_STATUSES) - {a for a, _ in ALLOWED_TRANSITIONS}
"""The statuses the database lets no operation leave (``succeeded``, ``failed``, ``rejected``,
``expired``): a row read in one of them reads the same ever after."""


_STATUS_LIST = ", ".join(f"'{s}'" for s in OPERATION_STATUSES)
_TRANSITION_LIST = ", ".join(f"'{a}>{b}'" for a, b in ALLOWED_TRANSITIONS)

_COMMON_TABLES = f"""
CREATE TABLE proposals (
    proposal_id TEXT PRIMARY KEY,
    operation_key TEXT NOT NULL UNIQUE,
    thread_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    tool_version TEXT NOT NULL,
    handler_revision TEXT NOT NULL,
    release TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    requester_id TEXT NOT NULL,
    arguments TEXT NOT NULL,
    arguments_sha256 TEXT NOT NULL,
    digest TEXT NOT NULL,
    risk TEXT NOT NULL,
    effect TEXT NOT NULL,
    rollback TEXT NOT NULL,
    approval_class TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
CREATE TABLE operations (
    operation_key TEXT PRIMARY KEY,
    proposal_id TEXT REFERENCES proposals(proposal_id),
    tool TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ({_STATUS_LIST})),
    owner TEXT,
    lease_expires_at TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    error TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX operations_status_idx ON operations (status);
CREATE TABLE approvals (
    approval_id TEXT PRIMARY KEY,
    proposal_id TEXT NOT NULL REFERENCES proposals(proposal_id),
    reviewer_id TEXT NOT NULL,
    reviewer_roles TEXT NOT NULL,
    decision TEXT NOT NULL CHECK (decision IN ('approve', 'reject')),
    digest TEXT NOT NULL,
    reason TEXT NOT NULL,
    decided_at TEXT NOT NULL,
    UNIQUE (proposal_id, reviewer_id)
)"""

_AUDIT_COLUMNS = """
    event_id TEXT NOT NULL UNIQUE,
    occurred_at TEXT NOT NULL,
    event TEXT NOT NULL,
    result TEXT NOT NULL,
    code TEXT,
    request_id TEXT,
    response_id TEXT,
    call_id TEXT,
    proposal_id TEXT,
    operation_key TEXT,
    thread_id TEXT,
    tool TEXT,
    tool_release TEXT,
    handler_revision TEXT,
    actor_id TEXT,
    trace_id TEXT,
    detail TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
"""

_AUDIT_INDEXES = """
CREATE INDEX audit_operation_idx ON audit_events (operation_key);
CREATE INDEX audit_proposal_idx ON audit_events (proposal_id);
CREATE INDEX audit_call_idx ON audit_events (call_id)"""

_SQLITE_V1 = f"""{_COMMON_TABLES};
CREATE TABLE audit_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,{_AUDIT_COLUMNS});
{_AUDIT_INDEXES};
CREATE TRIGGER proposals_no_update BEFORE UPDATE ON proposals
BEGIN SELECT RAISE(ABORT, 'proposals are immutable'); END;
CREATE TRIGGER proposals_no_delete BEFORE DELETE ON proposals
BEGIN SELECT RAISE(ABORT, 'proposals are immutable'); END;
CREATE TRIGGER approvals_no_update BEFORE UPDATE ON approvals
BEGIN SELECT RAISE(ABORT, 'approval records are immutable'); END;
CREATE TRIGGER approvals_no_delete BEFORE DELETE ON approvals
BEGIN SELECT RAISE(ABORT, 'approval records are immutable'); END;
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit_events
BEGIN SELECT RAISE(ABORT, 'audit_events is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit_events
BEGIN SELECT RAISE(ABORT, 'audit_events is append-only'); END;
CREATE TRIGGER operations_transition BEFORE UPDATE OF status ON operations
WHEN OLD.status <> NEW.status AND (OLD.status || '>' || NEW.status) NOT IN ({_TRANSITION_LIST})
BEGIN SELECT RAISE(ABORT, 'invalid operation transition'); END;
CREATE TRIGGER operations_no_delete BEFORE DELETE ON operations
BEGIN SELECT RAISE(ABORT, 'operations are never deleted'); END"""

_POSTGRES_V1 = f"""{_COMMON_TABLES};
CREATE TABLE audit_events (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,{_AUDIT_COLUMNS});
{_AUDIT_INDEXES};
CREATE FUNCTION toolgate_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION '% is immutable (% refused)', TG_TABLE_NAME, TG_OP; END $$;
CREATE TRIGGER proposals_immutable BEFORE UPDATE OR DELETE ON proposals
    FOR EACH ROW EXECUTE FUNCTION toolgate_refuse();
CREATE TRIGGER approvals_immutable BEFORE UPDATE OR DELETE ON approvals
    FOR EACH ROW EXECUTE FUNCTION toolgate_refuse();
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION toolgate_refuse();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate_refuse();
CREATE TRIGGER operations_no_delete BEFORE DELETE ON operations
    FOR EACH ROW EXECUTE FUNCTION toolgate_refuse();
CREATE FUNCTION toolgate_check_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> NEW.status AND (OLD.status || '>' || NEW.status) NOT IN ({_TRANSITION_LIST}) THEN
        RAISE EXCEPTION 'invalid operation transition % -> %', OLD.status, NEW.status;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER operations_transition BEFORE UPDATE ON operations
    FOR EACH ROW EXECUTE FUNCTION toolgate_check_transition()"""

_RATE_COUNTERS = """
CREATE TABLE rate_counters (
    bucket TEXT NOT NULL,
    window_start TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (bucket, window_start)
)"""

_DEAD_LETTERS = """
CREATE TABLE dead_letters (
    operation_key TEXT PRIMARY KEY REFERENCES operations(operation_key),
    created_at TEXT NOT NULL,
    reason TEXT NOT NULL,
    context TEXT NOT NULL,
    resolved_at TEXT,
    resolved_by TEXT,
    resolution TEXT,
    note TEXT
);
ALTER TABLE proposals ADD COLUMN supersedes TEXT"""

_AUDIT_PAYLOADS = """
ALTER TABLE audit_events ADD COLUMN detail_sha256 TEXT;
CREATE TABLE audit_payloads (
    event_id TEXT PRIMARY KEY,
    occurred_at TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX audit_payloads_time_idx ON audit_payloads (occurred_at)"""

_PROPOSAL_TRACE = "ALTER TABLE proposals ADD COLUMN trace_id TEXT"

_EVIDENCE_COLUMNS = """
ALTER TABLE approvals ADD COLUMN reviewer_tenant_id TEXT;
ALTER TABLE approvals ADD COLUMN mac TEXT;
ALTER TABLE proposals ADD COLUMN editors TEXT;
CREATE TABLE identities (
    user_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    roles TEXT NOT NULL,
    scopes TEXT NOT NULL,
    display_name TEXT NOT NULL,
    token_hash TEXT UNIQUE,
    status TEXT NOT NULL CHECK (status IN ('active', 'revoked')),
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    mac TEXT NOT NULL
);
CREATE INDEX identities_tenant_idx ON identities (tenant_id)"""

_IDENTITIES_SQLITE = f"""{_EVIDENCE_COLUMNS};
CREATE TRIGGER identities_no_delete BEFORE DELETE ON identities
BEGIN SELECT RAISE(ABORT, 'identities are revoked, never deleted'); END"""

_IDENTITIES_POSTGRES = f"""{_EVIDENCE_COLUMNS};
CREATE TRIGGER identities_no_delete BEFORE DELETE ON identities
    FOR EACH ROW EXECUTE FUNCTION toolgate_refuse()"""

_STAFF_REVIEWERS = """
ALTER TABLE identities ADD COLUMN review_tenants TEXT NOT NULL DEFAULT '[]';
CREATE INDEX proposals_same_effect_idx ON proposals (thread_id, tool, arguments_sha256)"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        name="proposals, operations, approvals, audit log; immutability and transition triggers",
        sqlite=_SQLITE_V1,
        postgres=_POSTGRES_V1,
    ),
    Migration(name="fixed-window rate limit counters", sqlite=_RATE_COUNTERS, postgres=_RATE_COUNTERS),
    Migration(
        name="dead letters; proposal edits supersede their original",
        sqlite=_DEAD_LETTERS,
        postgres=_DEAD_LETTERS,
    ),
    Migration(
        name="audit payloads apart from the chain, so retention can delete them",
        sqlite=_AUDIT_PAYLOADS,
        postgres=_AUDIT_PAYLOADS,
    ),
    Migration(
        name="proposals remember the trace they were made in (not part of their digest)",
        sqlite=_PROPOSAL_TRACE,
        postgres=_PROPOSAL_TRACE,
    ),
    Migration(
        name="identities in the store; approvals carry the reviewer's tenant and a MAC; proposals their editors",
        sqlite=_IDENTITIES_SQLITE,
        postgres=_IDENTITIES_POSTGRES,
    ),
    Migration(
        name="staff reviewers: identities may review for further tenants; identical writes are found by content",
        sqlite=_STAFF_REVIEWERS,
        postgres=_STAFF_REVIEWERS,
    ),
    *UNATTENDED_STEPS,
)
"""The store's own schema, component ``toolgate``."""

__all__ = ["ALLOWED_TRANSITIONS", "FINAL_STATUSES", "MIGRATIONS", "OPERATION_STATUSES", "Migration"]
