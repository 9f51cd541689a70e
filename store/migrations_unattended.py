"""The store's schema steps for least privilege and unattended operation (issue 15): audit
tenants, resource leases, escalation, and what comes after them.

Kept apart from `toolgate.store.migrations` so that list of shipped steps stays readable. A new step
is appended at the END of `UNATTENDED_STEPS`; a shipped step is never edited.
"""

from __future__ import annotations

from toolgate.store.migration import Migration

_AUDIT_TENANT = """
ALTER TABLE audit_events ADD COLUMN tenant_id TEXT;
CREATE INDEX audit_tenant_idx ON audit_events (tenant_id)"""

_RESOURCE_LEASES = """
CREATE TABLE resource_leases (
    resource_key TEXT PRIMARY KEY, holder TEXT NOT NULL, acquired_at TEXT NOT NULL, expires_at TEXT NOT NULL
)"""

_ESCALATION = """ALTER TABLE proposals ADD COLUMN escalation_rule_id TEXT;
ALTER TABLE proposals ADD COLUMN escalation_reason TEXT"""

_SEALED_DELEGATIONS = """
CREATE TABLE sealed_delegations (
    operation_key TEXT PRIMARY KEY, sealed TEXT NOT NULL, expires_at TEXT NOT NULL, created_at TEXT NOT NULL
)"""

_BREAKER_STATES = """
CREATE TABLE breaker_states (
    name TEXT PRIMARY KEY, state TEXT NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
    failures INTEGER NOT NULL, open_until TEXT NOT NULL, probe_owner TEXT, probe_until TEXT NOT NULL,
    times_opened INTEGER NOT NULL
)"""

_JOB_WAITS = """
CREATE TABLE job_waits (
    operation_key TEXT PRIMARY KEY, thread_id TEXT NOT NULL, tenant_id TEXT NOT NULL, user_id TEXT NOT NULL,
    call_id TEXT NOT NULL, tool TEXT NOT NULL, status_tool TEXT NOT NULL, job_ref TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('waiting', 'ready', 'resumed')),
    outcome TEXT NOT NULL CHECK (outcome IN ('', 'done', 'expired')),
    checks INTEGER NOT NULL, last_status TEXT NOT NULL, result TEXT, every_s DOUBLE PRECISION NOT NULL,
    next_check_at TEXT NOT NULL, expires_at TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    mac TEXT NOT NULL
);
CREATE INDEX job_waits_due_idx ON job_waits (state, next_check_at)"""

_WAIT_REFUSED_COLUMNS = """operation_key, thread_id, tenant_id, user_id, call_id, tool, status_tool, job_ref,
    state, outcome, checks, last_status, result, every_s, next_check_at, expires_at, created_at, updated_at, mac"""

_WAIT_REFUSED_SQLITE = f"""
CREATE TABLE job_waits_next (
    operation_key TEXT PRIMARY KEY, thread_id TEXT NOT NULL, tenant_id TEXT NOT NULL, user_id TEXT NOT NULL,
    call_id TEXT NOT NULL, tool TEXT NOT NULL, status_tool TEXT NOT NULL, job_ref TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('waiting', 'ready', 'resumed')),
    outcome TEXT NOT NULL CHECK (outcome IN ('', 'done', 'expired', 'refused')),
    checks INTEGER NOT NULL, last_status TEXT NOT NULL, result TEXT, every_s DOUBLE PRECISION NOT NULL,
    next_check_at TEXT NOT NULL, expires_at TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    mac TEXT NOT NULL
);
INSERT INTO job_waits_next ({_WAIT_REFUSED_COLUMNS}) SELECT {_WAIT_REFUSED_COLUMNS} FROM job_waits;
DROP TABLE job_waits;
ALTER TABLE job_waits_next RENAME TO job_waits;
CREATE INDEX job_waits_due_idx ON job_waits (state, next_check_at)"""

_WAIT_REFUSED_POSTGRES = """
ALTER TABLE job_waits DROP CONSTRAINT job_waits_outcome_check;
ALTER TABLE job_waits ADD CONSTRAINT job_waits_outcome_check
    CHECK (outcome IN ('', 'done', 'expired', 'refused'))"""

_ADMISSION_SLOTS = """
CREATE TABLE admission_slots (
    scope TEXT NOT NULL, slot INTEGER NOT NULL, holder TEXT NOT NULL, expires_at TEXT NOT NULL,
    PRIMARY KEY (scope, slot)
)"""

_PROPOSAL_MAC = "ALTER TABLE proposals ADD COLUMN mac TEXT"

_CAPTURED_CASES = """
CREATE TABLE captured_cases (
    capture_id TEXT PRIMARY KEY, case_id TEXT NOT NULL UNIQUE, tenant_id TEXT NOT NULL,
    source_kind TEXT NOT NULL CHECK (source_kind IN ('thread', 'operation', 'proposal')),
    source_id TEXT NOT NULL, thread_id TEXT NOT NULL, task INTEGER NOT NULL, release TEXT NOT NULL,
    body TEXT NOT NULL, digest TEXT NOT NULL, authors TEXT NOT NULL, captured_by TEXT NOT NULL,
    supersedes TEXT,
    status TEXT NOT NULL CHECK (status IN ('pending_review', 'reviewed', 'rejected', 'superseded')),
    reviewed_by TEXT, reviewed_at TEXT, review_reason TEXT, version INTEGER NOT NULL,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL, mac TEXT NOT NULL
);
CREATE UNIQUE INDEX captured_cases_active_idx ON captured_cases (thread_id, task)
    WHERE status IN ('pending_review', 'reviewed');
CREATE INDEX captured_cases_tenant_idx ON captured_cases (tenant_id, status)"""

_CAPTURED_CASES_SQLITE = f"""{_CAPTURED_CASES};
CREATE TRIGGER captured_cases_no_delete BEFORE DELETE ON captured_cases
BEGIN SELECT RAISE(ABORT, 'captured cases are superseded or rejected, never deleted'); END"""

_CAPTURED_CASES_POSTGRES = f"""{_CAPTURED_CASES};
CREATE TRIGGER captured_cases_no_delete BEFORE DELETE ON captured_cases
    FOR EACH ROW EXECUTE FUNCTION toolgate_refuse()"""

_RECORD_VERSIONS = """
CREATE TABLE record_versions (
    kind TEXT NOT NULL, record_key TEXT NOT NULL, seq BIGINT NOT NULL, version INTEGER NOT NULL,
    PRIMARY KEY (kind, record_key, seq)
);
ALTER TABLE identities ADD COLUMN version INTEGER NOT NULL DEFAULT 0"""

_RECORD_VERSIONS_SQLITE = f"""{_RECORD_VERSIONS};
CREATE TRIGGER record_versions_no_update BEFORE UPDATE ON record_versions
BEGIN SELECT RAISE(ABORT, 'record_versions is append-only'); END;
CREATE TRIGGER record_versions_no_delete BEFORE DELETE ON record_versions
BEGIN SELECT RAISE(ABORT, 'record_versions is append-only'); END"""

_RECORD_VERSIONS_POSTGRES = f"""{_RECORD_VERSIONS};
CREATE TRIGGER record_versions_append_only BEFORE UPDATE OR DELETE ON record_versions
    FOR EACH ROW EXECUTE FUNCTION toolgate_refuse();
CREATE TRIGGER record_versions_no_truncate BEFORE TRUNCATE ON record_versions
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate_refuse()"""

_REQUESTER_TEXT = """ALTER TABLE proposals ADD COLUMN requester_text TEXT;
CREATE INDEX proposals_tool_tenant_idx ON proposals (tool, tenant_id, created_at)"""

_REVIEW_LISTING = """
CREATE INDEX operations_listing_idx ON operations (status, created_at, operation_key);
CREATE INDEX operations_created_idx ON operations (created_at, operation_key)"""

_LEASE_WAITERS = """
CREATE TABLE lease_waiters (
    resource_key TEXT NOT NULL, holder TEXT NOT NULL, since TEXT NOT NULL, until TEXT NOT NULL,
    PRIMARY KEY (resource_key, holder)
)"""

_RATE_WINDOW_ENDS_SQLITE = """ALTER TABLE rate_counters ADD COLUMN window_ends TEXT;
UPDATE rate_counters SET window_ends = strftime('%Y-%m-%dT%H:%M:%f', window_start, '+1 day') || '000Z';
CREATE INDEX rate_counters_ends_idx ON rate_counters (window_ends)"""
"""Rows written before carry no window length: they are taken to end a day (the longest window
a tool spec or policy document may name) after they started."""

_RATE_WINDOW_ENDS_POSTGRES = """ALTER TABLE rate_counters ADD COLUMN window_ends TEXT;
UPDATE rate_counters SET window_ends = to_char(
    (window_start::timestamptz + interval '1 day') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
CREATE INDEX rate_counters_ends_idx ON rate_counters (window_ends)"""

_SUPERSEDES = """CREATE INDEX proposals_supersedes_idx ON proposals (supersedes, created_at)
    WHERE supersedes IS NOT NULL"""
"""A reviewer's edit is found by the proposal it replaces: each guard snapshot (a decision, a claim)
and the console's view look it up, which without this index scans every proposal (partial: the
proposals that replace none, nearly all, cost their insert nothing)."""

_LIVE_OPERATIONS = "CREATE INDEX operations_live_idx ON operations (tool, tenant_id, status)"
"""A tool's operations in a tenant by status: the live proposals a reviewer is warned about
(`Proposals.beside`, `Proposals.for_tool` with statuses) are found among the live operations,
not by walking every proposal the tool ever had."""

_CHANGE_NOTICES_POSTGRES = (
    _LEASE_WAITERS
    + """;
CREATE FUNCTION toolgate_lease_given_up() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now_text TEXT := to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
    next_holder TEXT;
BEGIN
    SELECT holder INTO next_holder FROM lease_waiters
        WHERE resource_key = OLD.resource_key AND until > now_text ORDER BY since, holder LIMIT 1;
    PERFORM pg_notify('toolgate_changes', 'lease:' || OLD.resource_key || '>' || COALESCE(next_holder, ''));
    RETURN NULL;
END $$;
CREATE TRIGGER resource_leases_given_up AFTER DELETE ON resource_leases
    FOR EACH ROW EXECUTE FUNCTION toolgate_lease_given_up();
CREATE FUNCTION toolgate_breaker_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('toolgate_changes', 'breaker:' || COALESCE(NEW.name, OLD.name));
    RETURN NULL;
END $$;
CREATE TRIGGER breaker_states_changed AFTER INSERT OR UPDATE OR DELETE ON breaker_states
    FOR EACH ROW EXECUTE FUNCTION toolgate_breaker_changed()"""
)
"""A given-up lease is announced to the oldest live waiter for it (``lease:<key>><holder>``; no
holder after ``>`` when none waits), a changed breaker to everyone (`toolgate.store.changes`)."""

_SCRIPT_CHECKS_POSTGRES = """
CREATE FUNCTION toolgate_raise(code TEXT, message TEXT, detail TEXT) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail; END $$"""
"""What a script's check calls to fail it with a code of the store's own (`toolgate.store.postgres`:
the chain's head moved, a row not written): a statement that selects it only when the check
fails, planned like any other, where a ``DO`` block was compiled anew each time (three checks per
delivery; the head's check alone in a loop: 65 us of the server's CPU as a block, 20 as a statement)."""

UNATTENDED_STEPS: tuple[Migration, ...] = (
    Migration(
        name="audit events carry their tenant (null for process-level events and those before it)",
        sqlite=_AUDIT_TENANT,
        postgres=_AUDIT_TENANT,
    ),
    Migration(
        name="resource leases: one writer at a time per declared resource, across processes",
        sqlite=_RESOURCE_LEASES,
        postgres=_RESOURCE_LEASES,
    ),
    Migration(name="proposals: escalation rule and reason", sqlite=_ESCALATION, postgres=_ESCALATION),
    Migration(
        name="sealed delegations: a write's requesting user's credentials, sealed, until it is terminal",
        sqlite=_SEALED_DELEGATIONS,
        postgres=_SEALED_DELEGATIONS,
    ),
    Migration(
        name="circuit breakers: state shared by every process, judged by the store's clock",
        sqlite=_BREAKER_STATES,
        postgres=_BREAKER_STATES,
    ),
    Migration(
        name="durable waits: a thread suspended on a job the worker checks, MAC'd, by the store's clock",
        sqlite=_JOB_WAITS,
        postgres=_JOB_WAITS,
    ),
    Migration(
        name="durable waits: a wait may end refused (its status check had no sealed user credentials)",
        sqlite=_WAIT_REFUSED_SQLITE,
        postgres=_WAIT_REFUSED_POSTGRES,
    ),
    Migration(
        name="admission slots: a cluster-wide cap per tenant on work in flight, by the store's clock",
        sqlite=_ADMISSION_SLOTS,
        postgres=_ADMISSION_SLOTS,
    ),
    Migration(
        name="proposals carry a MAC under the store's secret (older rows have none: never authentic)",
        sqlite=_PROPOSAL_MAC,
        postgres=_PROPOSAL_MAC,
    ),
    Migration(
        name="captured eval cases: incidents as redacted, MAC-bound dataset cases waiting for review",
        sqlite=_CAPTURED_CASES_SQLITE,
        postgres=_CAPTURED_CASES_POSTGRES,
    ),
    Migration(
        name="row versions bound into the audit chain (an index of record.versioned events);"
        " identities carry a version (0: written before it, until their next change)",
        sqlite=_RECORD_VERSIONS_SQLITE,
        postgres=_RECORD_VERSIONS_POSTGRES,
    ),
    Migration(
        name="proposals keep the requester's words (redacted; MAC, not digest); found by tool and tenant",
        sqlite=_REQUESTER_TEXT,
        postgres=_REQUESTER_TEXT,
    ),
    Migration(
        name="reviewer listings page by (status, created_at, operation_key): a page's cost is independent"
        " of how many proposals are pending",
        sqlite=_REVIEW_LISTING,
        postgres=_REVIEW_LISTING,
    ),
    Migration(
        name="change notices: PostgreSQL notifies the oldest waiter when a resource lease is given up,"
        " and everyone when a circuit breaker changes, so waiting and cached processes need not poll",
        sqlite=_LEASE_WAITERS,
        postgres=_CHANGE_NOTICES_POSTGRES,
    ),
    Migration(
        name="rate counters carry their window's end, so any process can forget ended windows without"
        " knowing the limits that wrote them (rows written before: ended a day after their start)",
        sqlite=_RATE_WINDOW_ENDS_SQLITE,
        postgres=_RATE_WINDOW_ENDS_POSTGRES,
    ),
    Migration(
        name="proposals are found by the proposal they supersede: a decision's and a claim's guard snapshots"
        " read a reviewer's edit by index, not by scanning every proposal",
        sqlite=_SUPERSEDES,
        postgres=_SUPERSEDES,
    ),
    Migration(
        name="operations are found by tool, tenant and status: the live proposals beside one under review"
        " are read from the live operations, not by walking the tool's whole history",
        sqlite=_LIVE_OPERATIONS,
        postgres=_LIVE_OPERATIONS,
    ),
    Migration(
        name="PostgreSQL scripts check what they need (the audit chain's head, every row written) with"
        " one compiled function that raises, not an anonymous block compiled at every check",
        sqlite="",
        postgres=_SCRIPT_CHECKS_POSTGRES,
    ),
)
"""Appended to `toolgate.store.migrations.MIGRATIONS`, in this order."""

__all__ = ["UNATTENDED_STEPS"]
