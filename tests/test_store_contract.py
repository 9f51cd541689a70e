"""One contract, run against both backends (SQLite and a real PostgreSQL server).

Every public method of `Store` has a test here that runs on both backends (``CONTRACT`` at the end
lists them; `test_every_public_store_method_has_a_contract_test` fails for a method without one).
Each asserts what the method returns and the rows it leaves, and each state-changing method is
also shown refusing: the exact exception or return value, no row changed, no audit event added.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import itertools
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from support import TEST_KEY, shift_store_clock

from toolgate.canonical import digest
from toolgate.clock import iso, parse_iso, utcnow
from toolgate.errors import (
    ApprovalError,
    ConfigurationError,
    IdentityError,
    InvalidTransitionError,
    StoreError,
)
from toolgate.store import (
    MIGRATIONS,
    ApprovalRecord,
    AuditEvent,
    AuditEventIn,
    IdentityRecord,
    Migration,
    OperationRecord,
    PostgresStore,
    ProposalRecord,
    SQLiteStore,
    Store,
)
from toolgate.store import counters as counters_module
from toolgate.store.audit_records import GENESIS_HASH, KeyedEventIn, audit_hash, audit_row_content
from toolgate.store.chain import verify_chain
from toolgate.store.leases import ResourcesBusy
from toolgate.store.proposals import PAGE_MAX, InvalidCursor, ProposalPage, cursor_of
from toolgate.store.records import Settlement
from toolgate.store.slots import SlotRow
from toolgate.store.snapshots import GuardSnapshot
from toolgate.store.tx import Written
from toolgate.store.waits import WaitIn

TABLES = (
    "toolgate_schema",
    "proposals",
    "operations",
    "approvals",
    "audit_events",
    "audit_payloads",
    "dead_letters",
    "rate_counters",
    "identities",
    "resource_leases",
    "lease_waiters",
    "sealed_delegations",
    "breaker_states",
    "job_waits",
    "admission_slots",
    "captured_cases",
)
"""Every table the store keeps: a refusal must leave all of them as they were."""


# ---- helpers -----------------------------------------------------------------------------


def make_proposal(n: int = 1, **overrides: object) -> ProposalRecord:
    now = utcnow()
    base = ProposalRecord(
        proposal_id=f"prop_test{n}",
        operation_key=f"op_test{n}",
        thread_id="t1",
        call_id=f"call_{n}",
        tool="issue_refund",
        tool_version="1.0.0",
        handler_revision="issue-refund/1.0.0",
        release="ops-tools/1.0.0",
        tenant_id="acme",
        requester_id="cust-ada",
        arguments={"order_id": "O-5512", "amount_cents": 100},
        arguments_sha256="",
        digest="",
        risk="danger",
        effect="moves money",
        rollback="none",
        approval_class="finance",
        created_at=iso(now),
        expires_at=iso(now + timedelta(minutes=15)),
    )
    base = dataclasses.replace(base, **overrides)  # type: ignore[arg-type]
    base = dataclasses.replace(base, arguments_sha256=digest(base.arguments))
    return dataclasses.replace(base, digest=digest(base.content()))


def make_approval(
    proposal: ProposalRecord, reviewer: str = "fiona", decision: str = "approve", **overrides: object
) -> ApprovalRecord:
    record = ApprovalRecord(
        approval_id=f"apr_{proposal.proposal_id}_{reviewer}",
        proposal_id=proposal.proposal_id,
        reviewer_id=reviewer,
        reviewer_tenant_id="acme",
        reviewer_roles=("finance",),
        decision=decision,
        digest=proposal.digest,
        reason="" if decision == "approve" else "not this one",
        decided_at=iso(utcnow()),
    )
    return dataclasses.replace(record, **overrides)


def make_identity(user_id: str = "ada", tenant_id: str = "acme", **overrides: object) -> IdentityRecord:
    record = IdentityRecord(
        user_id=user_id,
        tenant_id=tenant_id,
        roles=("customer",),
        scopes=("orders:read",),
        display_name=user_id.title(),
    )
    return dataclasses.replace(record, **overrides)


def event(name: str = "contract.event", **fields: Any) -> AuditEventIn:
    return AuditEventIn(event=name, result="recorded", **fields)


def named(store: Store, name: str) -> list[AuditEvent]:
    """Stored events called ``name``, in chain order."""
    return [e for e in store.audit.events() if e.event == name]


def snapshot(store: Store) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table (rows sorted, so the comparison ignores scan order)."""
    with store.transaction(write=False) as tx:
        return {table: sorted(tx.execute(f"SELECT * FROM {table}"), key=repr) for table in TABLES}


def approve_row(store: Store, key: str = "op_test1") -> None:
    store.operations.transition(key, "pending_approval", "approved")


def executing(store: Store, n: int = 1, owner: str = "w1", lease_s: float = 30.0) -> OperationRecord:
    """Proposal ``n``, approved and claimed by ``owner``."""
    store.proposals.create(make_proposal(n))
    approve_row(store, f"op_test{n}")
    claimed = store.operations.claim(f"op_test{n}", owner, lease_s)
    assert claimed is not None
    return claimed


def unknown_outcome(store: Store, n: int = 1, lease_s: float = 30.0) -> OperationRecord:
    """Proposal ``n``, claimed by ``w1`` for ``lease_s``, its outcome then ``unknown``."""
    executing(store, n, lease_s=lease_s)
    return store.operations.transition(f"op_test{n}", "executing", "unknown", owner="w1", error={"kind": "timeout"})


def table_exists(store: Store, table: str) -> bool:
    try:
        with store.transaction(write=False) as tx:
            tx.execute(f"SELECT 1 FROM {table}")
    except StoreError:
        return False
    return True


def schema_versions(store: Store, component: str) -> list[tuple[int, str]]:
    with store.transaction(write=False) as tx:
        rows = tx.execute(
            "SELECT version, name FROM toolgate_schema WHERE component = ? ORDER BY version", (component,)
        )
    return [(int(r["version"]), r["name"]) for r in rows]


def _links_to(link: Path, target: str) -> bool:
    try:
        return os.readlink(link) == target
    except OSError:  # closed between listing and reading
        return False


def open_connections(store: Store, request: pytest.FixtureRequest) -> int:
    """Connections to ``store``'s database held by this process (SQLite: open descriptors of the
    file; PostgreSQL: the server's sessions on the database, seen from its maintenance database)."""
    if isinstance(store, SQLiteStore):
        target = str(store.path.resolve())
        fds = Path("/proc/self/fd")
        return sum(_links_to(fds / fd, target) for fd in os.listdir(fds))
    import psycopg

    dbname = urlsplit(store.url).path.lstrip("/")
    with psycopg.connect(request.getfixturevalue("pg_admin_url"), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (dbname,)).fetchone()
    assert row is not None
    return int(row[0])


def settled_connections(store: Store, request: pytest.FixtureRequest, timeout_s: float = 10.0) -> int:
    """`open_connections` once it reaches 0 (a server session ends just after its client closes it),
    or its value at the deadline."""
    deadline = time.monotonic() + timeout_s
    while (held := open_connections(store, request)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return held


@pytest.fixture
def reopen(store: Store, request: pytest.FixtureRequest) -> Iterator[Callable[..., Store]]:
    """Open another `Store` on ``store``'s database (as another process would), closed afterwards."""
    url = request.getfixturevalue("pg_migrated_url") if isinstance(store, PostgresStore) else None
    opened: list[Store] = []

    def open_again(*, key: bytes = TEST_KEY, read_only: bool = False) -> Store:
        if isinstance(store, SQLiteStore):
            other: Store = SQLiteStore(store.path, key=key, read_only=read_only)
        else:
            assert url is not None
            other = PostgresStore(url, key=key, read_only=read_only)
        opened.append(other)
        return other

    yield open_again
    for other in opened:
        other.close()


@pytest.fixture
def no_toolgate(store: Store, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A read-only store of ``store``'s backend on a database toolgate never set up (SQLite: a
    file that does not exist; PostgreSQL: the server's maintenance database). It writes nothing."""
    if isinstance(store, SQLiteStore):
        other: Store = SQLiteStore(tmp_path / "never-set-up.sqlite", key=TEST_KEY, read_only=True)
    else:
        other = PostgresStore(request.getfixturevalue("pg_admin_url"), key=TEST_KEY, read_only=True)
    yield other
    other.close()


# ---- clock, transactions, schema, connections -----------------------------------------------


def test_now_is_the_store_clock_and_recorded_times_come_from_it(store: Store) -> None:
    before = utcnow()
    first = store.now()
    second = store.now()
    after = utcnow()
    assert first.utcoffset() == timedelta(0) and second.utcoffset() == timedelta(0)
    assert first <= second
    # the PostgreSQL server runs on this host: its clock and this process's agree closely
    assert before - timedelta(seconds=5) <= first <= after + timedelta(seconds=5)
    start = store.now()
    _, op, _ = store.proposals.create(make_proposal())
    end = store.now()
    assert start <= parse_iso(op.created_at) == parse_iso(op.updated_at) <= end


def test_calibrated_now_is_the_store_clock_and_follows_a_clock_put_in_front_of_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = store.now()
    seen = store.calibrated_now()
    again = store.calibrated_now()
    after = store.now()
    assert seen.utcoffset() == timedelta(0)
    # the last reading plus the monotonic time since: between the readings around it (the margin:
    # the monotonic clock and the server's may tick apart by microseconds)
    assert before <= seen <= again <= after + timedelta(milliseconds=50)
    shift_store_clock(monkeypatch, store, timedelta(hours=2))  # a test's or a case's clock
    moved = store.calibrated_now()
    assert after + timedelta(hours=2) <= moved <= store.now() + timedelta(milliseconds=50)


def test_a_transaction_commits_on_success_and_rolls_back_on_any_error(store: Store) -> None:
    with store.transaction() as tx:
        inserted = tx.execute(
            "INSERT INTO rate_counters (bucket, window_start, count) VALUES (?, ?, ?)", ("a", "w", 7)
        )
        assert inserted == []  # a statement that returns no rows
        returned = tx.execute(
            "UPDATE rate_counters SET count = count + 1 WHERE bucket = ? RETURNING count", ("a",)
        )
        assert returned == [{"count": 8}]
        assert tx.one("SELECT count FROM rate_counters WHERE bucket = ?", ("missing",)) is None
    with store.transaction(write=False) as tx:
        assert tx.one("SELECT bucket, count FROM rate_counters WHERE bucket = ?", ("a",)) == {
            "bucket": "a",
            "count": 8,
        }

    class Boom(Exception):
        pass

    with pytest.raises(Boom), store.transaction() as tx:  # the caller's own error passes through unchanged
        tx.execute("INSERT INTO rate_counters (bucket, window_start, count) VALUES (?, ?, ?)", ("b", "w", 1))
        raise Boom
    with pytest.raises(StoreError), store.transaction() as tx:  # a driver error becomes a StoreError
        tx.execute("INSERT INTO rate_counters (bucket, window_start, count) VALUES (?, ?, ?)", ("c", "w", 1))
        tx.execute("INSERT INTO no_such_table (x) VALUES (?)", (1,))
    with store.transaction(write=False) as tx:
        assert [r["bucket"] for r in tx.execute("SELECT bucket FROM rate_counters")] == ["a"]


def test_many_returns_each_statements_rows_in_order_and_a_failing_one_applies_nothing(store: Store) -> None:
    with store.transaction() as tx:
        tx.execute("INSERT INTO rate_counters (bucket, window_start, count) VALUES (?, ?, ?)", ("m1", "w", 1))
        tx.execute("INSERT INTO rate_counters (bucket, window_start, count) VALUES (?, ?, ?)", ("m2", "w", 2))
        assert tx.many([]) == []
    reads: list[tuple[str, tuple[object, ...]]] = [
        ("SELECT count FROM rate_counters WHERE bucket = ?", ("m2",)),
        ("SELECT bucket FROM rate_counters WHERE bucket = ?", ("missing",)),
        ("SELECT bucket, count FROM rate_counters WHERE bucket IN (?, ?) ORDER BY bucket", ("m1", "m2")),
    ]
    expected = [[{"count": 2}], [], [{"bucket": "m1", "count": 1}, {"bucket": "m2", "count": 2}]]
    with store.transaction(write=False) as tx:
        assert tx.many(reads) == expected
    with store.transaction() as tx:  # in a write, after a statement sent to travel with them
        tx.send("UPDATE rate_counters SET count = count + 10 WHERE bucket = ?", ("m1",))
        assert tx.many(reads[2:]) == [[{"bucket": "m1", "count": 11}, {"bucket": "m2", "count": 2}]]
    failing: list[tuple[str, tuple[object, ...]]] = [
        ("UPDATE rate_counters SET count = 100 WHERE bucket = ?", ("m2",)),
        ("INSERT INTO rate_counters (bucket, window_start, count) VALUES (?, ?, ?)", ("m3", "w", 3)),
        ("INSERT INTO no_such_table (x) VALUES (?)", (1,)),
        ("UPDATE rate_counters SET count = 200 WHERE bucket = ?", ("m1",)),
    ]
    for write in (True, False):
        with pytest.raises(StoreError), store.transaction(write=write) as tx:
            tx.many(failing)
    with store.transaction(write=False) as tx:  # nothing of either attempt stayed
        assert tx.many(reads[2:]) == [[{"bucket": "m1", "count": 11}, {"bucket": "m2", "count": 2}]]
        assert tx.execute("SELECT bucket FROM rate_counters WHERE bucket = ?", ("m3",)) == []


def test_a_read_only_store_reads_and_refuses_every_write(store: Store, reopen: Callable[..., Store]) -> None:
    proposal, _, _ = store.proposals.create(make_proposal(1))
    executing(store, 2)
    unknown_outcome(store, 3, lease_s=0)
    store.identities.add(make_identity("ada", token_hash=store.identities.token_hash("tok-ada")))
    store.audit.append(event())
    assert store.leases.acquire(["k1"], "h1", 30)
    assert store.slots.take("model:acme", "h1", 1, 30) == 0
    reader = reopen(read_only=True)
    assert reader.read_only and not store.read_only
    before = snapshot(store)
    writes: dict[str, Callable[[Store], object]] = {
        "transaction": lambda s: ExitStack().enter_context(s.transaction()),
        "setup": lambda s: s.setup(),
        "migrate": lambda s: s.migrate(
            "contract_extra", [Migration("t", "CREATE TABLE t (x INTEGER)", "CREATE TABLE t (x INTEGER)")]
        ),
        "proposals.create": lambda s: s.proposals.create(make_proposal(4)),
        "proposals.create_at": lambda s: s.proposals.create_at(lambda _: (make_proposal(4), [])),
        "approvals.record": lambda s: s.approvals.record(make_approval(proposal)),
        "approvals.record_and_settle": lambda s: s.approvals.record_and_settle(
            make_approval(proposal),
            settle=Settlement(operation_key="op_test1", from_status="pending_approval", to_status="approved"),
        ),
        "operations.transition": lambda s: s.operations.transition("op_test1", "pending_approval", "approved"),
        "operations.claim": lambda s: s.operations.claim("op_test1", "w9", 30),
        "operations.renew_lease": lambda s: s.operations.renew_lease("op_test2", "w1", 60),
        "operations.dead_letter": lambda s: s.operations.dead_letter("op_test3", "no outcome", {}),
        "operations.resolve_dead_letter": lambda s: s.operations.resolve_dead_letter(
            "op_test3", resolution="r", resolved_by="p", note=""
        ),
        "counters.increment": lambda s: s.counters.increment("bucket", 60),
        "counters.count_hits": lambda s: s.counters.count_hits([("bucket", 60, 5)]),
        "counters.forget_ended": lambda s: s.counters.forget_ended("bucket", 60),
        "counters.take_shares": lambda s: s.counters.take_shares([("bucket", 60, 50, 5)]),
        "counters.give_back": lambda s: s.counters.give_back([("bucket", 0.0, 1)]),
        "leases.acquire": lambda s: s.leases.acquire(["k1"], "h9", 30),
        "leases.renew": lambda s: s.leases.renew(["k1"], "h1", 30),
        "leases.release": lambda s: s.leases.release(["k1"], "h1"),
        "leases.queue": lambda s: s.leases.queue(["k1"], "h9", 30),
        "leases.leave_queue": lambda s: s.leases.leave_queue("h9"),
        "identities.add": lambda s: s.identities.add(make_identity("bob")),
        "identities.change": lambda s: s.identities.change("ada", status="revoked"),
        "audit.append": lambda s: s.audit.append(event()),
        "audit.append_many": lambda s: s.audit.append_many([event(), event()]),
        "audit.append_ahead": lambda s: s.audit.append_ahead([event()]),
        "audit.purge_payloads": lambda s: s.audit.purge_payloads(iso(utcnow() + timedelta(days=1))),
        "waits.open": lambda s: s.waits.open(wait_in(9)),
        "waits.record_check": lambda s: s.waits.record_check(
            "op_wait1", checks_seen=0, job_status="x", result=None, done=True
        ),
        "waits.resume": lambda s: s.waits.resume("op_wait1"),
        "slots.take": lambda s: s.slots.take("model:beta", "h9", 1, 30),
        "slots.release": lambda s: s.slots.release("model:acme", 0, "h1"),
    }
    unrefused = []
    for name, write in writes.items():
        try:
            write(reader)
        except StoreError as exc:
            assert "read-only" in str(exc), (name, exc)
        else:
            unrefused.append(name)
    assert unrefused == []
    assert snapshot(store) == before
    # everything that only reads still works
    reader.require_schema()
    assert reader.proposals.get("prop_test1") == proposal
    assert [o.operation_key for o in reader.operations.list("executing")] == ["op_test2"]
    assert [e.event for e in reader.audit.events()] == ["record.versioned", "contract.event"]  # ada's, then ours
    assert [r.holder for r in reader.slots.held("model:acme")] == ["h1"]


def test_setup_is_idempotent_and_refuses_a_newer_schema(store: Store) -> None:
    # the fixture ran setup() on an empty database: every migration, in order, once
    assert schema_versions(store, "toolgate") == [(i, m.name) for i, m in enumerate(MIGRATIONS, start=1)]
    for table in TABLES:
        assert table_exists(store, table), table
    store.setup()
    assert store.migrate("toolgate", MIGRATIONS) == 0
    assert schema_versions(store, "toolgate") == [(i, m.name) for i, m in enumerate(MIGRATIONS, start=1)]

    with store.transaction() as tx:  # a newer toolgate has migrated this database
        tx.execute(
            "INSERT INTO toolgate_schema (component, version, name, applied_at) VALUES (?, ?, ?, ?)",
            ("toolgate", len(MIGRATIONS) + 1, "from the future", iso(utcnow())),
        )
    before = snapshot(store)
    with pytest.raises(ConfigurationError, match="newer than this toolgate"):
        store.setup()
    assert snapshot(store) == before


def test_require_schema_accepts_only_this_toolgates_schema_version_and_writes_nothing(
    store: Store, reopen: Callable[..., Store], no_toolgate: Store
) -> None:
    store.require_schema()
    reopen(read_only=True).require_schema()  # verification commands check with a read-only store
    with pytest.raises(ConfigurationError, match="holds no toolgate store"):
        no_toolgate.require_schema()
    with pytest.raises(ConfigurationError, match="holds no toolgate store"):
        no_toolgate.require_schema()  # still nothing there: the check created nothing
    last = len(MIGRATIONS)
    with store.transaction() as tx:  # an older toolgate's database: the last migration has not run
        tx.execute("DELETE FROM toolgate_schema WHERE component = ? AND version = ?", ("toolgate", last))
    before = snapshot(store)
    with pytest.raises(ConfigurationError, match=f"at schema version {last - 1}, this toolgate needs {last}"):
        store.require_schema()
    assert snapshot(store) == before
    with store.transaction() as tx:  # a newer toolgate's database
        tx.execute(
            "INSERT INTO toolgate_schema (component, version, name, applied_at) VALUES (?, ?, ?, ?), (?, ?, ?, ?)",
            (
                "toolgate",
                last,
                MIGRATIONS[-1].name,
                iso(utcnow()),
                "toolgate",
                last + 1,
                "future",
                iso(utcnow()),
            ),
        )
    with pytest.raises(ConfigurationError, match=f"at schema version {last + 1}"):
        store.require_schema()


def _table_migration(name: str, table: str) -> Migration:
    return Migration(
        name=name, sqlite=f"CREATE TABLE {table} (x INTEGER)", postgres=f"CREATE TABLE {table} (x INTEGER)"
    )


def test_migrate_applies_only_the_missing_steps_of_a_component_all_or_nothing(store: Store) -> None:
    first, second = _table_migration("a", "contract_a"), _table_migration("b", "contract_b")
    assert store.migrate("contract_extra", [first]) == 1
    assert store.migrate("contract_extra", [first]) == 0
    assert store.migrate("contract_extra", [first, second]) == 1
    assert schema_versions(store, "contract_extra") == [(1, "a"), (2, "b")]
    assert table_exists(store, "contract_a") and table_exists(store, "contract_b")
    assert schema_versions(store, "toolgate") == [(i, m.name) for i, m in enumerate(MIGRATIONS, start=1)]

    before = snapshot(store)
    with pytest.raises(ConfigurationError, match="newer than this toolgate"):
        store.migrate("contract_extra", [first])  # this code knows fewer steps than the database ran
    broken = Migration(
        name="c then a failing statement",
        sqlite="CREATE TABLE contract_c (x INTEGER);\nCREATE TABLE contract_a (x INTEGER)",
        postgres="CREATE TABLE contract_c (x INTEGER); CREATE TABLE contract_a (x INTEGER)",
    )
    with pytest.raises(StoreError):
        store.migrate("contract_extra", [first, second, _table_migration("d", "contract_d"), broken])
    assert not table_exists(store, "contract_c") and not table_exists(store, "contract_d")  # one transaction
    assert snapshot(store) == before


def test_close_releases_every_connection_and_a_store_closes_as_a_context_manager(
    store: Store, reopen: Callable[..., Store], request: pytest.FixtureRequest
) -> None:
    store.proposals.create(make_proposal())
    assert open_connections(store, request) >= 1  # the store keeps a connection for the next unit of work
    store.close()
    assert settled_connections(store, request) == 0
    store.close()  # closing twice is harmless
    other = reopen()
    with other as entered:
        assert entered is other
        assert entered.proposals.get("prop_test1") is not None
        assert open_connections(other, request) >= 1
    assert settled_connections(other, request) == 0


# ---- proposals and decisions ---------------------------------------------------------------


def test_create_proposal_is_idempotent_by_operation_key(store: Store) -> None:
    first, op, created = store.proposals.create(make_proposal())
    again, op2, created2 = store.proposals.create(make_proposal())
    assert created and not created2
    assert first == again and op.status == op2.status == "pending_approval"
    assert len(store.proposals.list()) == 1


def test_a_proposal_whose_operation_key_another_operation_holds_is_refused_and_nothing_is_stored(
    store: Store,
) -> None:
    """An operation row under the key without this proposal (written with database access
    alone): the create fails with a `StoreError` naming the key, on both backends (on PostgreSQL
    the proposal's one script ends in its COMMIT, so it is the key's own constraint that says so),
    and leaves no proposal, no event and the other row as it was."""
    now = iso(utcnow())
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO operations (operation_key, tool, tenant_id, status, attempts, created_at, updated_at)"
            " VALUES ('op_test1', 'issue_refund', 'acme', 'pending_approval', 0, ?, ?)",
            (now, now),
        )
    events = len(store.audit.events())
    with pytest.raises(StoreError, match="op_test1"):
        store.proposals.create(make_proposal(1), audit=[event("proposal.created")])
    assert store.proposals.get("prop_test1") is None and store.proposals.list() == []
    assert len(store.audit.events()) == events
    held = store.operations.get("op_test1")
    assert held is not None and held.proposal_id is None and held.status == "pending_approval"


def test_create_proposal_stores_its_operation_and_audit_together_and_a_repeat_appends_nothing(
    store: Store,
) -> None:
    proposal = make_proposal()
    stored, op, created = store.proposals.create(
        proposal, audit=[event("proposal.created", proposal_id="prop_test1")]
    )
    assert created and stored == proposal
    assert (op.operation_key, op.proposal_id, op.tool, op.tenant_id) == (
        "op_test1",
        "prop_test1",
        "issue_refund",
        "acme",
    )
    assert (op.status, op.owner, op.lease_expires_at, op.attempts, op.result, op.error) == (
        "pending_approval",
        None,
        None,
        0,
        None,
        None,
    )
    assert [e.proposal_id for e in named(store, "proposal.created")] == ["prop_test1"]
    before = snapshot(store)
    # another proposal for the same operation (a re-run node, a second process): the first one stands
    rival = make_proposal(1, proposal_id="prop_rival", arguments={"order_id": "O-1", "amount_cents": 1})
    again, op_again, created_again = store.proposals.create(rival, audit=[event("proposal.created")])
    assert not created_again and again == proposal and op_again == op
    assert store.proposals.get("prop_rival") is None
    assert snapshot(store) == before


def test_get_proposal_returns_exactly_what_was_stored(store: Store) -> None:
    original = make_proposal(1)
    edited = make_proposal(
        2,
        arguments={
            "order_id": "O-5512",
            "amount_cents": 90,
            "note": "ünïcode ✓",
            "lines": [{"sku": "A", "qty": 2}],
        },
        supersedes="prop_test1",
        trace_id="trace-1",
        editors=("fiona", "rita"),
        approval_class="two_person(finance,support)",
        escalation_rule_id="refund.large_needs_two_reviewers",
        escalation_reason="Refunds over $500 need two reviewers ✓",
    )
    store.proposals.create(original)
    store.proposals.create(edited)
    assert store.proposals.get("prop_test1") == original
    assert store.proposals.get("prop_test2") == edited
    assert store.proposals.get("prop_missing") is None


def test_list_proposals_pairs_each_with_its_operation_oldest_first(store: Store) -> None:
    start = utcnow()
    for n, minutes in ((1, 2), (2, 0), (3, 1)):  # inserted out of time order
        store.proposals.create(make_proposal(n, created_at=iso(start + timedelta(minutes=minutes))))
    approve_row(store, "op_test3")
    listed = store.proposals.list()
    assert [(p.proposal_id, o.operation_key, o.status) for p, o in listed] == [
        ("prop_test2", "op_test2", "pending_approval"),
        ("prop_test3", "op_test3", "approved"),
        ("prop_test1", "op_test1", "pending_approval"),
    ]
    assert [p.proposal_id for p, _ in store.proposals.list("pending_approval")] == [
        "prop_test2",
        "prop_test1",
    ]
    assert [p.proposal_id for p, _ in store.proposals.list("approved")] == ["prop_test3"]
    assert store.proposals.list("succeeded") == []


def test_page_lists_proposals_in_keyset_pages_in_the_order_their_operations_were_made(store: Store) -> None:
    for n in range(1, 6):
        store.proposals.create(make_proposal(n))
    approve_row(store, "op_test3")
    first = store.proposals.page("pending_approval", limit=2)
    assert [(p.proposal_id, o.operation_key, o.status, p.authentic) for p, o in first.rows] == [
        ("prop_test1", "op_test1", "pending_approval", True),
        ("prop_test2", "op_test2", "pending_approval", True),
    ]
    assert first.next_after is not None
    second = store.proposals.page("pending_approval", after=first.next_after, limit=2)
    assert [p.proposal_id for p, _ in second.rows] == ["prop_test4", "prop_test5"]
    assert second.next_after is None  # exactly two were left: this page is the last
    every = store.proposals.page(limit=10)
    assert [(p.proposal_id, o.status) for p, o in every.rows] == [
        ("prop_test1", "pending_approval"),
        ("prop_test2", "pending_approval"),
        ("prop_test3", "approved"),
        ("prop_test4", "pending_approval"),
        ("prop_test5", "pending_approval"),
    ]
    assert every.next_after is None
    assert [p.proposal_id for p, _ in store.proposals.page("approved").rows] == ["prop_test3"]
    assert store.proposals.page("succeeded") == ProposalPage(rows=[], next_after=None)
    # a limit out of range is clamped; the default page holds PAGE_SIZE
    assert [p.proposal_id for p, _ in store.proposals.page(limit=0).rows] == ["prop_test1"]
    assert len(store.proposals.page(limit=PAGE_MAX + 1).rows) == 5
    # a position no page handed out is refused, never read as "from the start"
    for bogus in ("nope", "W10", cursor_of({"created_at": 1, "operation_key": "k"})[:-2] + "!!"):
        with pytest.raises(InvalidCursor):
            store.proposals.page(after=bogus)


def test_a_page_reads_a_bounded_number_of_rows_whatever_is_pending(store: Store) -> None:
    for n in range(1, 31):
        store.proposals.create(make_proposal(n, operation_key=f"op_page{n:02d}"))
    with store.transaction(write=False) as tx:
        counted = tx.one("SELECT COUNT(*) AS n FROM operations WHERE status = 'pending_approval'")
    assert counted is not None and int(counted["n"]) == 30
    seen: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        page = store.proposals.page("pending_approval", after=after, limit=7)
        assert len(page.rows) <= 7
        seen += [o.operation_key for _, o in page.rows]
        pages += 1
        if page.next_after is None:
            break
        after = page.next_after
    assert seen == [f"op_page{n:02d}" for n in range(1, 31)]  # every row once, in order
    assert pages == 5


def test_same_effect_finds_the_other_proposals_of_the_thread_for_the_same_tool_and_arguments(
    store: Store,
) -> None:
    first, _, _ = store.proposals.create(make_proposal(1))
    second, second_op, _ = store.proposals.create(make_proposal(2))  # same thread, tool and arguments
    store.proposals.create(make_proposal(3, thread_id="t2"))
    store.proposals.create(make_proposal(4, arguments={"order_id": "O-5512", "amount_cents": 101}))
    store.proposals.create(make_proposal(5, tool="other_tool"))
    assert store.proposals.same_effect(first) == [(second, second_op)]
    assert [p.proposal_id for p, _ in store.proposals.same_effect(second)] == ["prop_test1"]
    assert store.proposals.same_effect(make_proposal(6, thread_id="t3")) == []


def test_for_tool_lists_the_newest_of_a_tool_in_a_tenant_and_with_statuses_only_those(store: Store) -> None:
    """The approval pause counts live proposals only: the database picks them, so a live one older
    than the newest ``limit`` of every status is still found and finished ones are not read."""
    start = utcnow()
    for n in range(1, 6):
        store.proposals.create(make_proposal(n, created_at=iso(start + timedelta(seconds=n))))
    store.proposals.create(make_proposal(6, tool="other_tool", created_at=iso(start + timedelta(seconds=6))))
    store.proposals.create(make_proposal(7, tenant_id="globex", created_at=iso(start + timedelta(seconds=7))))
    for n in (3, 4, 5):  # the three newest are finished
        store.operations.transition(f"op_test{n}", "pending_approval", "rejected")
    store.operations.transition("op_test2", "pending_approval", "approved")

    def ids(found: list[tuple[ProposalRecord, Any]]) -> list[str]:
        return [p.proposal_id for p, _ in found]

    assert ids(store.proposals.for_tool("issue_refund", "acme", 2)) == ["prop_test5", "prop_test4"]
    live = store.proposals.for_tool("issue_refund", "acme", 2, statuses={"pending_approval", "approved"})
    assert ids(live) == ["prop_test2", "prop_test1"]
    assert [op.status for _, op in live] == ["approved", "pending_approval"]
    assert all(p.authentic for p, _ in live)
    assert ids(store.proposals.for_tool("issue_refund", "acme", 1, statuses={"approved"})) == ["prop_test2"]
    assert store.proposals.for_tool("issue_refund", "acme", statuses=set()) == []
    assert ids(store.proposals.for_tool("issue_refund", "globex", statuses={"pending_approval"})) == [
        "prop_test7"
    ]


def _listing_work(store: Store, proposal: ProposalRecord) -> int:
    """The work of the statement that lists the live proposals beside ``proposal`` (the approval
    pause's, `Proposals.beside`): SQLite's virtual machine steps, PostgreSQL's buffers touched
    (after ANALYZE, as a live server's statistics would be)."""
    sent: list[tuple[str, Any]] = []
    real = store.transaction

    @contextlib.contextmanager
    def kept(*, write: bool = True) -> Iterator[Any]:
        with real(write=write) as tx:
            execute = tx.execute

            def keep(sql: str, params: Any = ()) -> Any:
                sent.append((sql, params))
                return execute(sql, params)

            tx.execute = keep  # type: ignore[method-assign]
            yield tx

    store.transaction = kept  # type: ignore[method-assign]
    try:
        found = store.proposals.beside(proposal, live={"pending_approval", "approved"})
    finally:
        del store.transaction
    assert [p.proposal_id for p, _ in found.live] == ["prop_test2"]
    [(sql, params)] = sent
    if isinstance(store, PostgresStore):
        with store.transaction() as tx:
            tx.execute("ANALYZE proposals")
            tx.execute("ANALYZE operations")
        with store.transaction() as tx:
            [row] = tx.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
        plan = row["QUERY PLAN"]
        plan = json.loads(plan) if isinstance(plan, str) else plan
        return int(plan[0]["Plan"]["Shared Hit Blocks"]) + int(plan[0]["Plan"]["Shared Read Blocks"])
    assert isinstance(store, SQLiteStore)
    steps = 0

    def step() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn = sqlite3.connect(store.path)
    try:
        conn.set_progress_handler(step, 1)
        conn.execute(sql, tuple(params)).fetchall()
    finally:
        conn.close()
    return steps


def test_the_live_proposals_beside_one_cost_the_same_however_long_the_tools_history(store: Store) -> None:
    """The approval pause lists the live proposals of the tool in the tenant: found among the live
    operations, its work does not grow with the finished ones (a tool's history grows with every
    write; on SQLite, whose planner has no statistics, walking it made each pause cost more than
    the write: 711 -> 33,713 steps here; PostgreSQL's own plan did not walk it)."""
    for n in (1, 2):
        store.proposals.create(make_proposal(n))
    before = _listing_work(store, make_proposal(1))
    columns = ("proposal_id", "operation_key", "thread_id", "call_id", "tool", "tool_version")
    columns += ("handler_revision", "release", "tenant_id", "requester_id", "arguments_sha256", "digest")
    columns += ("risk", "effect", "rollback", "approval_class", "created_at", "expires_at")
    with store.transaction() as tx:  # 3,000 finished proposals of the tool in the tenant, older
        for n in range(3, 3003):
            finished = make_proposal(n, created_at="2026-01-01T00:00:00.000000Z")
            tx.execute(
                f"INSERT INTO proposals ({', '.join(columns)}, arguments)"
                f" VALUES ({', '.join('?' for _ in columns)}, ?)",
                (*(getattr(finished, c) for c in columns), json.dumps(finished.arguments)),
            )
            tx.execute(
                "INSERT INTO operations (operation_key, proposal_id, tool, tenant_id, status, attempts,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, 'succeeded', 1, ?, ?)",
                (
                    *(getattr(finished, c) for c in ("operation_key", "proposal_id", "tool", "tenant_id")),
                    finished.created_at,
                    finished.created_at,
                ),
            )
    after = _listing_work(store, make_proposal(1))
    assert after - before < 300, (before, after)  # a tenth of a unit of work per finished proposal


def test_beside_reads_every_listing_shown_beside_a_proposal_in_one_statement(store: Store) -> None:
    """What a reviewer is shown beside a proposal (the approval pause, the console's view): its
    tool's newest, its live ones and the identical ones of its thread, each as `for_tool` and
    `same_effect` list them (a row without a MAC marked), never the proposal itself, and only the
    listings asked for, read in one statement (issue 31)."""
    start = utcnow()
    for n in range(1, 6):
        store.proposals.create(make_proposal(n, created_at=iso(start + timedelta(seconds=n))))
    store.proposals.create(make_proposal(6, thread_id="t2", created_at=iso(start + timedelta(seconds=7))))
    _insert_proposal_row(store, make_proposal(7, created_at=iso(start + timedelta(seconds=8))), None)
    store.proposals.create(make_proposal(8, tool="other_tool", created_at=iso(start + timedelta(seconds=9))))
    store.proposals.create(
        make_proposal(9, tenant_id="globex", thread_id="t9", created_at=iso(start + timedelta(seconds=9)))
    )
    for n in (3, 6):
        store.operations.transition(f"op_test{n}", "pending_approval", "rejected")
    approve_row(store, "op_test4")
    target = store.proposals.get("prop_test5")
    assert target is not None
    live = {"pending_approval", "approved"}

    def others(
        found: list[tuple[ProposalRecord, OperationRecord]],
    ) -> list[tuple[ProposalRecord, OperationRecord]]:
        return [(p, o) for p, o in found if p.proposal_id != target.proposal_id]

    def ids(found: list[tuple[ProposalRecord, OperationRecord]]) -> list[tuple[str, str, bool]]:
        return [(p.proposal_id, o.status, p.authentic) for p, o in found]

    sent = _statements(store)
    beside = store.proposals.beside(target, 3, newest=True, live=live, same_effect=True)
    assert len(sent) == 1
    # the newest 3 of the tool in the tenant are 7, 6 and this one; the newest 3 live 7, 5 and 4
    assert ids(beside.newest) == [("prop_test7", "pending_approval", False), ("prop_test6", "rejected", True)]
    assert ids(beside.live) == [("prop_test7", "pending_approval", False), ("prop_test4", "approved", True)]
    assert ids(beside.same_effect) == [
        ("prop_test1", "pending_approval", True),
        ("prop_test2", "pending_approval", True),
        ("prop_test3", "rejected", True),
        ("prop_test4", "approved", True),
        ("prop_test7", "pending_approval", False),
    ]
    assert beside.newest == others(store.proposals.for_tool("issue_refund", "acme", 3))
    assert beside.live == others(store.proposals.for_tool("issue_refund", "acme", 3, statuses=live))
    assert beside.same_effect == store.proposals.same_effect(target)
    # only what is asked for; nothing asked, nothing read
    del sent[:]
    alone = store.proposals.beside(target, live={"approved"})
    assert ids(alone.live) == [("prop_test4", "approved", True)] and alone.newest == alone.same_effect == []
    assert store.proposals.beside(target) == store.proposals.beside(target, newest=False, live=())
    assert store.proposals.beside(target).live == [] and len(sent) == 1
    alone_in_tenant = store.proposals.get("prop_test9")
    assert alone_in_tenant is not None
    empty = store.proposals.beside(alone_in_tenant, newest=True, live=live, same_effect=True)
    assert empty.newest == empty.live == empty.same_effect == []


def test_superseding_is_the_newest_proposal_that_replaces_one(store: Store) -> None:
    start = utcnow()
    store.proposals.create(make_proposal(1, created_at=iso(start)))
    store.proposals.create(
        make_proposal(2, supersedes="prop_test1", created_at=iso(start + timedelta(seconds=1)))
    )
    newest = make_proposal(3, supersedes="prop_test1", created_at=iso(start + timedelta(seconds=2)))
    store.proposals.create(newest)
    assert store.proposals.superseding("prop_test1") == newest
    assert store.proposals.superseding("prop_test3") is None
    assert store.proposals.superseding("prop_missing") is None


def test_database_refuses_to_update_or_delete_a_proposal(store: Store) -> None:
    store.proposals.create(make_proposal())
    with pytest.raises(StoreError, match="immutable"), store.transaction() as tx:
        tx.execute(
            "UPDATE proposals SET arguments = ? WHERE proposal_id = ?",
            ('{"amount_cents":99999}', "prop_test1"),
        )
    with pytest.raises(StoreError, match="immutable"), store.transaction() as tx:
        tx.execute(
            "UPDATE proposals SET approval_class = 'finance', escalation_rule_id = NULL WHERE proposal_id = ?",
            ("prop_test1",),
        )
    with pytest.raises(StoreError, match="immutable"), store.transaction() as tx:
        tx.execute("DELETE FROM proposals WHERE proposal_id = ?", ("prop_test1",))
    stored = store.proposals.get("prop_test1")
    assert stored is not None and stored.arguments["amount_cents"] == 100


def test_one_decision_per_reviewer_and_decisions_are_immutable(store: Store) -> None:
    proposal, _, _ = store.proposals.create(make_proposal())
    record = ApprovalRecord(
        approval_id="apr_1",
        proposal_id=proposal.proposal_id,
        reviewer_id="fiona",
        reviewer_tenant_id="acme",
        reviewer_roles=("finance",),
        decision="approve",
        digest=proposal.digest,
        reason="",
        decided_at=iso(utcnow()),
    )
    assert store.approvals.record(record)
    assert not store.approvals.record(dataclasses.replace(record, approval_id="apr_2", decision="reject"))
    with pytest.raises(StoreError, match="immutable"), store.transaction() as tx:
        tx.execute("UPDATE approvals SET decision = 'reject'")
    decisions = store.approvals.for_proposal(proposal.proposal_id)
    assert [(d.decision, d.authentic) for d in decisions] == [("approve", True)]


def test_record_decision_appends_its_audit_only_when_the_decision_is_new(store: Store) -> None:
    proposal, _, _ = store.proposals.create(make_proposal())
    decision = make_approval(proposal)
    assert store.approvals.record(
        decision, audit=[event("approval.recorded", proposal_id=proposal.proposal_id)]
    )
    assert store.approvals.for_proposal(proposal.proposal_id) == [dataclasses.replace(decision, authentic=True)]
    assert len(named(store, "approval.recorded")) == 1
    before = snapshot(store)
    second_try = make_approval(proposal, decision="reject", approval_id="apr_again")
    assert store.approvals.record(second_try, audit=[event("approval.recorded")]) is False
    assert snapshot(store) == before
    # a decision on a proposal the store does not hold is refused by the database
    ghost = make_approval(make_proposal(9), reviewer="rita")
    with pytest.raises(StoreError):
        store.approvals.record(ghost, audit=[event("approval.recorded")])
    assert snapshot(store) == before


def test_record_and_settle_settles_the_operation_in_the_decisions_transaction(store: Store) -> None:
    proposal, _, _ = store.proposals.create(make_proposal(1))
    settle = Settlement(
        operation_key="op_test1",
        from_status="pending_approval",
        to_status="approved",
        audit=[event("operation.approved", operation_key="op_test1")],
    )
    recorded, settled = store.approvals.record_and_settle(
        make_approval(proposal), audit=[event("approval.recorded", operation_key="op_test1")], settle=settle
    )
    assert recorded and settled is not None and settled.status == "approved"
    assert settled == store.operations.get("op_test1")
    assert [e.event for e in store.audit.events(operation_key="op_test1")] == [
        "approval.recorded",
        "operation.approved",
    ]

    # a second reviewer's decision is recorded; the operation is no longer in from_status: no settlement,
    # and the settlement's events are not appended
    recorded, settled = store.approvals.record_and_settle(
        make_approval(proposal, reviewer="gina"),
        audit=[event("approval.recorded", operation_key="op_test1")],
        settle=settle,
    )
    assert recorded and settled is None
    assert [e.event for e in store.audit.events(operation_key="op_test1")] == [
        "approval.recorded",
        "operation.approved",
        "approval.recorded",
    ]
    assert [d.reviewer_id for d in store.approvals.for_proposal("prop_test1")] == ["fiona", "gina"]

    # the same reviewer again: nothing at all is written
    before = snapshot(store)
    assert store.approvals.record_and_settle(
        make_approval(proposal, approval_id="apr_other"), audit=[event("approval.recorded")], settle=settle
    ) == (False, None)
    assert snapshot(store) == before


def test_record_and_settle_of_a_decision_on_record_already_settles_nothing(store: Store) -> None:
    # the very same record sent again (its id stored already) while the operation still waits:
    # its settlement would find the decision on record, but it was not stored by this call, so
    # nothing at all is written (rolled back on SQLite; never run behind it on PostgreSQL, whose
    # script commits whatever it did)
    proposal, _, _ = store.proposals.create(make_proposal(1))
    decision = make_approval(proposal)
    assert store.approvals.record(decision)
    before = snapshot(store)
    settle = Settlement(
        operation_key="op_test1",
        from_status="pending_approval",
        to_status="approved",
        audit=[event("operation.approved", operation_key="op_test1")],
    )
    assert store.approvals.record_and_settle(
        decision, audit=[event("approval.recorded", operation_key="op_test1")], settle=settle
    ) == (False, None)
    assert snapshot(store) == before
    assert store.operations.get("op_test1").status == "pending_approval"  # type: ignore[union-attr]


def test_record_and_settle_never_approves_past_a_recorded_rejection(store: Store) -> None:
    proposal, _, _ = store.proposals.create(make_proposal(1))
    assert store.approvals.record(make_approval(proposal, reviewer="rita", decision="reject"))
    settle = Settlement(
        operation_key="op_test1",
        from_status="pending_approval",
        to_status="approved",
        audit=[event("operation.approved")],
    )
    recorded, settled = store.approvals.record_and_settle(make_approval(proposal), settle=settle)
    assert recorded and settled is None
    op = store.operations.get("op_test1")
    assert op is not None and op.status == "pending_approval"
    assert named(store, "operation.approved") == []
    reject = Settlement(operation_key="op_test1", from_status="pending_approval", to_status="rejected")
    recorded, settled = store.approvals.record_and_settle(
        make_approval(proposal, reviewer="gina", decision="reject"), settle=reject
    )
    assert recorded and settled is not None and settled.status == "rejected"


def _forge_decision(store: Store, proposal: ProposalRecord, approval_id: str, decided_at: str) -> None:
    """A decision row written with database access alone (no store secret, so no valid MAC)."""
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO approvals (approval_id, proposal_id, reviewer_id, reviewer_tenant_id, reviewer_roles,"
            " decision, digest, reason, decided_at, mac) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                approval_id,
                proposal.proposal_id,
                "mallory",
                "acme",
                '["finance"]',
                "approve",
                proposal.digest,
                "",
                decided_at,
                "0" * 64,
            ),
        )


def test_decisions_for_lists_a_proposals_decisions_in_order_marking_forged_rows(store: Store) -> None:
    start = utcnow()
    proposal, _, _ = store.proposals.create(make_proposal(1))
    other, _, _ = store.proposals.create(make_proposal(2))
    later = make_approval(proposal, reviewer="gina", decided_at=iso(start + timedelta(seconds=2)))
    earlier = make_approval(proposal, reviewer="fiona", decided_at=iso(start))
    assert store.approvals.record(later) and store.approvals.record(earlier)
    assert store.approvals.record(make_approval(other))
    _forge_decision(store, proposal, "apr_forged", iso(start + timedelta(seconds=1)))
    decisions = store.approvals.for_proposal(proposal.proposal_id)
    assert [(d.approval_id, d.authentic) for d in decisions] == [
        (earlier.approval_id, True),
        ("apr_forged", False),
        (later.approval_id, True),
    ]
    assert decisions[0] == dataclasses.replace(earlier, authentic=True)
    assert store.approvals.for_proposal("prop_missing") == []


def test_all_decisions_lists_every_decision_in_the_store_marking_forged_rows(store: Store) -> None:
    start = utcnow()
    first, _, _ = store.proposals.create(make_proposal(1))
    second, _, _ = store.proposals.create(make_proposal(2))
    assert store.approvals.all() == []
    assert store.approvals.record(make_approval(second, decided_at=iso(start)))
    assert store.approvals.record(
        make_approval(first, reviewer="gina", decided_at=iso(start + timedelta(seconds=1)))
    )
    _forge_decision(store, first, "apr_forged", iso(start + timedelta(seconds=2)))
    assert [(d.proposal_id, d.reviewer_id, d.authentic) for d in store.approvals.all()] == [
        ("prop_test2", "fiona", True),
        ("prop_test1", "gina", True),
        ("prop_test1", "mallory", False),
    ]


# ---- operations ------------------------------------------------------------------------------


def test_get_operation_and_list_operations_oldest_first_by_status(store: Store) -> None:
    assert store.operations.get("op_missing") is None
    assert store.operations.list() == []
    for n in (1, 2, 3):
        store.proposals.create(make_proposal(n))
    approve_row(store, "op_test2")
    op = store.operations.get("op_test2")
    assert op is not None and op.status == "approved" and op.proposal_id == "prop_test2"
    assert [o.operation_key for o in store.operations.list()] == ["op_test1", "op_test2", "op_test3"]
    assert store.operations.list()[1] == op
    assert [o.operation_key for o in store.operations.list("pending_approval")] == ["op_test1", "op_test3"]
    assert [o.operation_key for o in store.operations.list("approved")] == ["op_test2"]
    assert store.operations.list("failed") == []


def test_database_refuses_illegal_operation_transitions(store: Store) -> None:
    store.proposals.create(make_proposal())
    with pytest.raises(StoreError, match="invalid operation transition"), store.transaction() as tx:
        tx.execute("UPDATE operations SET status = 'succeeded' WHERE operation_key = ?", ("op_test1",))
    with pytest.raises(InvalidTransitionError):
        store.operations.transition("op_test1", "approved", "executing")
    op = store.operations.get("op_test1")
    assert op is not None and op.status == "pending_approval"


def test_transition_changes_status_result_and_error_with_its_audit(store: Store) -> None:
    store.proposals.create(make_proposal(1))
    approved = store.operations.transition(
        "op_test1",
        "pending_approval",
        "approved",
        audit=[event("operation.approved", operation_key="op_test1")],
    )
    assert approved.status == "approved" and approved == store.operations.get("op_test1")
    assert approved.updated_at >= approved.created_at
    assert [e.event for e in store.audit.events(operation_key="op_test1")] == ["operation.approved"]
    executing(store, 2)
    done = store.operations.transition(
        "op_test2", "executing", "succeeded", owner="w1", result={"refund_id": "R-1", "n": 2}
    )
    assert (done.status, done.result, done.error) == ("succeeded", {"refund_id": "R-1", "n": 2}, None)
    executing(store, 3)
    failed = store.operations.transition("op_test3", "executing", "failed", owner="w1", error={"kind": "server_error"})
    assert (failed.status, failed.result, failed.error) == ("failed", None, {"kind": "server_error"})
    assert store.operations.get("op_test3") == failed


def test_transition_from_the_wrong_status_or_by_another_owner_changes_nothing(store: Store) -> None:
    store.proposals.create(make_proposal(1))
    approve_row(store, "op_test1")
    before = snapshot(store)
    with pytest.raises(InvalidTransitionError) as wrong:
        store.operations.transition("op_test1", "pending_approval", "rejected", audit=[event("operation.rejected")])
    assert (wrong.value.operation_key, wrong.value.expected, wrong.value.actual) == (
        "op_test1",
        "pending_approval",
        "approved",
    )
    with pytest.raises(InvalidTransitionError) as missing:
        store.operations.transition("op_missing", "pending_approval", "approved", audit=[event("operation.approved")])
    assert missing.value.actual is None
    assert snapshot(store) == before

    executing(store, 2, owner="w1")
    before = snapshot(store)
    with pytest.raises(InvalidTransitionError):
        store.operations.transition(
            "op_test2", "executing", "succeeded", owner="w2", result={"x": 1}, audit=[event("x")]
        )
    # a change the state machine forbids is refused by the database itself, also through transition()
    with pytest.raises(StoreError, match="invalid operation transition") as illegal:
        store.operations.transition("op_test2", "executing", "approved", audit=[event("x")])
    assert not isinstance(illegal.value, InvalidTransitionError)
    assert snapshot(store) == before


def test_transition_after_a_lapsed_lease_waits_for_the_lease_to_lapse(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    executing(store, 1, owner="w1", lease_s=30)
    before = snapshot(store)
    with pytest.raises(InvalidTransitionError):
        store.operations.transition(
            "op_test1", "executing", "unknown", lease_lapsed=True, audit=[event("operation.recovered")]
        )
    assert snapshot(store) == before
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=31))
        recovered = store.operations.transition(
            "op_test1", "executing", "unknown", lease_lapsed=True, audit=[event("operation.recovered")]
        )
    assert recovered.status == "unknown" and len(named(store, "operation.recovered")) == 1


def test_claim_only_from_approved_and_only_once(store: Store) -> None:
    store.proposals.create(make_proposal())
    assert store.operations.claim("op_test1", "w1", 30) is None
    approve_row(store)
    claimed = store.operations.claim("op_test1", "w1", 30)
    assert (
        claimed is not None
        and claimed.status == "executing"
        and claimed.owner == "w1"
        and claimed.attempts == 1
    )
    assert store.operations.claim("op_test1", "w2", 30) is None
    with pytest.raises(InvalidTransitionError):
        store.operations.transition("op_test1", "executing", "succeeded", owner="w2", result={"x": 1})
    done = store.operations.transition("op_test1", "executing", "succeeded", owner="w1", result={"x": 1})
    assert done.result == {"x": 1}


def test_claim_sets_the_lease_from_the_store_clock_and_audits_only_the_winner(store: Store) -> None:
    store.proposals.create(make_proposal())
    before = snapshot(store)
    assert store.operations.claim("op_test1", "w1", 30, audit=[event("operation.claimed")]) is None  # not approved yet
    assert snapshot(store) == before
    approve_row(store)
    claimed = store.operations.claim("op_test1", "w1", 30, audit=[event("operation.claimed", operation_key="op_test1")])
    assert claimed is not None and claimed == store.operations.get("op_test1")
    assert claimed.lease_expires_at is not None
    assert parse_iso(claimed.lease_expires_at) - parse_iso(claimed.updated_at) == timedelta(seconds=30)
    before = snapshot(store)
    assert store.operations.claim("op_test1", "w2", 30, audit=[event("operation.claimed")]) is None
    assert snapshot(store) == before
    assert len(named(store, "operation.claimed")) == 1
    # an operation given back (unknown -> approved) is claimed again: attempts count every claim
    store.operations.transition("op_test1", "executing", "unknown", owner="w1")
    store.operations.transition("op_test1", "unknown", "approved")
    again = store.operations.claim("op_test1", "w2", 30)
    assert again is not None and again.owner == "w2" and again.attempts == 2


def test_claim_refuses_an_approval_that_has_expired(store: Store) -> None:
    past = utcnow() - timedelta(minutes=20)
    store.proposals.create(make_proposal(created_at=iso(past), expires_at=iso(past + timedelta(minutes=15))))
    approve_row(store)
    before = snapshot(store)
    assert store.operations.claim("op_test1", "w1", 30, audit=[event("operation.claimed")]) is None
    assert snapshot(store) == before
    op = store.operations.get("op_test1")
    assert op is not None and (op.status, op.attempts, op.owner) == ("approved", 0, None)


def test_twenty_concurrent_claims_have_exactly_one_winner(store: Store) -> None:
    store.proposals.create(make_proposal())
    approve_row(store)
    barrier = threading.Barrier(20)

    def contend(i: int) -> bool:
        barrier.wait()
        return store.operations.claim("op_test1", f"worker-{i}", 30) is not None

    with ThreadPoolExecutor(max_workers=20) as pool:
        wins = list(pool.map(contend, range(20)))
    assert wins.count(True) == 1
    op = store.operations.get("op_test1")
    assert op is not None and op.attempts == 1


def test_renew_lease_extends_only_the_owners_live_claim(store: Store) -> None:
    claimed = executing(store, 1, owner="w1", lease_s=5)
    start = store.now()
    assert store.operations.renew_lease("op_test1", "w1", 120) is True
    end = store.now()
    renewed = store.operations.get("op_test1")
    assert renewed is not None and renewed.lease_expires_at is not None
    assert (
        start + timedelta(seconds=120) <= parse_iso(renewed.lease_expires_at) <= end + timedelta(seconds=120)
    )
    assert (renewed.status, renewed.owner, renewed.attempts) == (claimed.status, "w1", 1)
    store.operations.transition("op_test1", "executing", "unknown", owner="w1")
    assert store.operations.renew_lease("op_test1", "w1", 120) is True  # its handler may still be running

    before = snapshot(store)
    assert store.operations.renew_lease("op_test1", "w2", 600) is False  # not the owner
    assert store.operations.renew_lease("op_missing", "w1", 600) is False
    assert snapshot(store) == before
    store.proposals.create(make_proposal(2))
    approve_row(store, "op_test2")
    before = snapshot(store)
    assert store.operations.renew_lease("op_test2", "w1", 600) is False  # nobody claimed it
    assert snapshot(store) == before


def test_stale_executing_lists_claims_whose_lease_lapsed_beyond_the_grace(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    executing(store, 1, lease_s=30)
    unknown_outcome(store, 2, lease_s=30)
    executing(store, 3, lease_s=300)
    assert store.operations.stale_executing(0) == []
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=40))
        stale = store.operations.stale_executing(0)
        assert [o.operation_key for o in stale] == ["op_test1"]  # not the unknown one, not the live lease
        assert stale[0] == store.operations.get("op_test1")
        assert [o.operation_key for o in store.operations.stale_executing(5)] == ["op_test1"]
        assert store.operations.stale_executing(60) == []  # lapsed 10 s ago: within a 60 s grace


def test_due_operations_lists_approved_ones_longest_approved_first_up_to_the_limit(store: Store) -> None:
    assert store.operations.due(10) == []
    for n in (1, 2, 3, 4):
        store.proposals.create(make_proposal(n))
    for key in ("op_test3", "op_test1", "op_test4"):
        approve_row(store, key)
    assert store.operations.claim("op_test4", "w1", 30) is not None  # claimed: no longer due
    before = snapshot(store)
    due = store.operations.due(10)
    assert [o.operation_key for o in due] == ["op_test3", "op_test1"]  # not pending, not executing
    assert due[0] == store.operations.get("op_test3")
    assert [o.operation_key for o in store.operations.due(1)] == ["op_test3"]
    assert store.operations.due(0) == []
    assert snapshot(store) == before  # a read: nothing claimed, nothing changed


# ---- dead letters --------------------------------------------------------------------------


def test_add_dead_letter_moves_only_an_unknown_operation_whose_lease_lapsed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown_outcome(store, 1, lease_s=30)
    executing(store, 2, lease_s=0)
    before = snapshot(store)
    assert (
        store.operations.dead_letter("op_test1", "no outcome", {"tool": "issue_refund"}) is None
    )  # lease still live
    assert store.operations.dead_letter("op_test2", "no outcome", {}) is None  # still executing
    assert store.operations.dead_letter("op_missing", "no outcome", {}) is None
    assert snapshot(store) == before
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=31))
        moment = store.now()
        letter = store.operations.dead_letter("op_test1", "no outcome", {"tool": "issue_refund", "attempts": [1]})
    assert letter is not None
    assert (letter.operation_key, letter.reason, letter.context) == (
        "op_test1",
        "no outcome",
        {"tool": "issue_refund", "attempts": [1]},
    )
    assert abs(parse_iso(letter.created_at) - moment) < timedelta(seconds=5)  # the store's (shifted) clock
    assert (letter.resolved_at, letter.resolved_by, letter.resolution, letter.note) == (
        None,
        None,
        None,
        None,
    )
    op = store.operations.get("op_test1")
    assert op is not None and op.status == "dead_lettered"
    assert store.operations.dead_letters() == [letter]
    before = snapshot(store)
    assert store.operations.dead_letter("op_test1", "again", {}) is None  # no longer unknown
    assert snapshot(store) == before


def test_dead_letters_lists_open_letters_oldest_first_and_resolve_closes_one_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert store.operations.dead_letters() == [] and store.operations.dead_letters(open_only=False) == []
    unknown_outcome(store, 1, lease_s=0)
    unknown_outcome(store, 2, lease_s=0)
    first = store.operations.dead_letter("op_test1", "first", {})
    second = store.operations.dead_letter("op_test2", "second", {})
    assert first is not None and second is not None
    assert store.operations.dead_letters() == [first, second]
    assert (
        store.operations.resolve_dead_letter(
            "op_test1", resolution="refunded_by_hand", resolved_by="omar", note="checked"
        )
        is True
    )
    resolved = store.operations.dead_letters(open_only=False)[0]
    assert (resolved.operation_key, resolved.resolution, resolved.resolved_by, resolved.note) == (
        "op_test1",
        "refunded_by_hand",
        "omar",
        "checked",
    )
    assert resolved.resolved_at is not None
    assert store.operations.dead_letters() == [second]
    assert [d.operation_key for d in store.operations.dead_letters(open_only=False)] == ["op_test1", "op_test2"]
    before = snapshot(store)
    assert store.operations.resolve_dead_letter("op_test1", resolution="other", resolved_by="gina", note="") is False
    assert store.operations.resolve_dead_letter("op_missing", resolution="other", resolved_by="gina", note="") is False
    assert snapshot(store) == before


# ---- rate limits ---------------------------------------------------------------------------


def test_increment_counter_counts_hits_per_bucket_and_window_of_the_store_clock(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = 10**9  # one window for the whole test: no boundary falls between the calls
    # the clock jumps a whole window ahead and back: ended windows are not forgotten here
    # (`tests/test_rate_counter_windows.py` tests forgetting)
    monkeypatch.setattr(counters_module, "FORGET_AFTER_S", 10 * window)
    assert [store.counters.increment("pt:acme:ada:tool", window) for _ in range(3)] == [1, 2, 3]
    assert store.counters.increment("pt:acme:bob:tool", window) == 1
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=window))  # the next window of the store's clock
        assert store.counters.increment("pt:acme:ada:tool", window) == 1
    assert store.counters.value("pt:acme:ada:tool", window) == 3
    with ThreadPoolExecutor(max_workers=10) as pool:
        counts = list(pool.map(lambda _: store.counters.increment("t:acme", window), range(20)))
    assert sorted(counts) == list(range(1, 21))  # every process-wide hit counted exactly once
    assert store.counters.value("t:acme", window) == 20


def test_take_shares_grants_up_to_the_limit_in_one_transaction_and_give_back_returns_the_unspent(
    store: Store, monkeypatch: pytest.MonkeyPatch, reopen: Callable[..., Store]
) -> None:
    transactions: list[bool] = []
    real = store.transaction

    def counted(*, write: bool = True):  # type: ignore[no-untyped-def]
        transactions.append(write)
        return real(write=write)

    window = 10**9  # one fixed window for the whole test
    before = store.now().timestamp()
    monkeypatch.setattr(store, "transaction", counted)
    got = store.counters.take_shares([("g:", window, 25, 10), ("t:acme", window, 12, 10)])
    assert transactions == [True]  # every window, one commit
    monkeypatch.setattr(store, "transaction", real)
    after = store.now().timestamp()
    assert got.grants == (10, 10)
    assert before <= got.store_time <= after
    assert got.window_ends == (got.store_time - got.store_time % window + window,) * 2
    got = store.counters.take_shares([("g:", window, 25, 10), ("t:acme", window, 12, 10)])
    assert got.grants == (10, 2)  # never past the limit: the tenant window had 2 left
    got = reopen().counters.take_shares([("g:", window, 25, 10), ("t:acme", window, 12, 10)])
    assert got.grants == (5, 0)  # another process: what is left, then a full window stops it
    assert store.counters.take_shares([("g:", window, 25, 10), ("t:acme", window, 12, 1)]).grants == (0,)
    assert store.counters.value("g:", window) == 26  # 25 granted and the refused hit
    assert store.counters.value("t:acme", window) == 13
    assert store.counters.take_shares([("pt:x", window, 1, 1)]).grants == (1,)  # a share of one: one hit
    assert store.counters.take_shares([("pt:x", window, 1, 1)]).grants == (0,)

    start = got.store_time - got.store_time % window
    store.counters.give_back([("g:", start, 7), ("t:acme", start, 20), ("none", start, 3)])
    assert store.counters.value("g:", window) == 19
    assert store.counters.value("t:acme", window) == 0  # never below zero
    assert store.counters.value("none", window) == 0  # nothing created
    store.counters.give_back([])
    assert store.counters.take_shares([("g:", window, 25, 10)]).grants == (6,)


def test_count_hits_counts_every_limit_in_one_transaction_and_stops_at_the_first_full(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    transactions: list[bool] = []
    real = store.transaction

    def counted(*, write: bool = True):  # type: ignore[no-untyped-def]
        transactions.append(write)
        return real(write=write)

    monkeypatch.setattr(store, "transaction", counted)
    window = 10**9  # one fixed window for the whole test: no boundary can fall between the calls
    hits = [("pt:acme:ada:tool", window, 2), ("t:acme", window, 1)]
    assert store.counters.count_hits(hits) is None
    assert transactions == [True]  # both limits, one commit
    assert store.counters.count_hits(hits) == 1  # the tenant window is full
    assert store.counters.count_hits(hits) == 0  # the principal window is full: the tenant's is not counted
    monkeypatch.setattr(store, "transaction", real)
    assert store.counters.value("pt:acme:ada:tool", window) == 3
    assert store.counters.value("t:acme", window) == 2


def test_forget_ended_deletes_only_ended_windows_of_buckets_with_the_prefix(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = 3600
    monkeypatch.setattr(counters_module, "FORGET_AFTER_S", 10 * window)  # only `forget_ended` forgets here
    store.counters.increment("signin:source:a", window)
    store.counters.increment("signin:source:a", window)
    store.counters.increment("signin_look_alike", window)  # '_' is no wildcard here
    store.counters.increment("pt:acme:ada:tool", window)
    assert store.counters.forget_ended("signin:", window) == 0  # every window still running
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=window))  # the next window of the store's clock
        store.counters.increment("signin:source:a", window)
        assert store.counters.forget_ended("signin:", window) == 1  # the ended window of a's, only
        assert store.counters.value("signin:source:a", window) == 1  # the running window is kept
        assert store.counters.forget_ended("signin:", window) == 0
    with store.transaction(write=False) as tx:
        left = sorted((r["bucket"], r["count"]) for r in tx.execute("SELECT bucket, count FROM rate_counters"))
    assert [b for b, _ in left].count("signin:source:a") == 1
    assert ("signin_look_alike", 1) in left and ("pt:acme:ada:tool", 1) in left


def test_counter_value_peeks_without_counting(store: Store) -> None:
    window = 10**9
    assert store.counters.value("t:acme", window) == 0
    store.counters.increment("t:acme", window)
    store.counters.increment("t:acme", window)
    before = snapshot(store)
    assert store.counters.value("t:acme", window) == 2
    assert store.counters.value("t:acme", window) == 2
    assert store.counters.value("t:globex", window) == 0
    assert snapshot(store) == before


# ---- resource leases -----------------------------------------------------------------------


def leases(store: Store) -> dict[str, tuple[str, str]]:
    """``resource_key -> (holder, expires_at)`` of every lease row."""
    with store.transaction(write=False) as tx:
        rows = tx.execute("SELECT resource_key, holder, expires_at FROM resource_leases")
    return {r["resource_key"]: (r["holder"], r["expires_at"]) for r in rows}


def test_acquire_resources_leases_all_or_nothing_to_one_holder_until_the_lease_lapses(
    store: Store, monkeypatch: pytest.MonkeyPatch, reopen: Callable[..., Store]
) -> None:
    start = store.now()
    assert store.leases.acquire(["k2", "k1", "k1"], "h1", 30) is True
    end = store.now()
    held = leases(store)
    assert sorted(held) == ["k1", "k2"] and {h for h, _ in held.values()} == {"h1"}
    for _, expires_at in held.values():
        assert start + timedelta(seconds=30) <= parse_iso(expires_at) <= end + timedelta(seconds=30)

    before = snapshot(store)
    assert store.leases.acquire(["k3", "k2"], "h2", 30) is False  # k2 is h1's: k3 is not taken either
    assert reopen().leases.acquire(["k1"], "h2", 30) is False  # nor from another process
    with pytest.raises(ValueError, match="positive duration"):
        store.leases.acquire(["k9"], "h2", 0)
    assert store.leases.acquire([], "h2", 30) is True  # nothing to hold
    assert snapshot(store) == before

    assert store.leases.acquire(["k1"], "h1", 300) is True  # its holder again: extended
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=40))  # k2 lapsed, k1 did not
        assert store.leases.acquire(["k1", "k3"], "h2", 30) is False
        assert store.leases.acquire(["k2", "k3"], "h2", 30) is True
    held = leases(store)
    assert {k: h for k, (h, _) in held.items()} == {"k1": "h1", "k2": "h2", "k3": "h2"}

    barrier = threading.Barrier(20)

    def contend(i: int) -> bool:
        barrier.wait()
        return store.leases.acquire(["k5", "k4"], f"w{i}", 30)

    with ThreadPoolExecutor(max_workers=20) as pool:
        wins = list(pool.map(contend, range(20)))
    assert wins.count(True) == 1
    winner = f"w{wins.index(True)}"
    assert {k: h for k, (h, _) in leases(store).items() if k in ("k4", "k5")} == {"k4": winner, "k5": winner}


def waiting(store: Store) -> list[tuple[str, str]]:
    with store.transaction(write=False) as tx:
        rows = tx.execute("SELECT resource_key, holder FROM lease_waiters ORDER BY resource_key, holder")
    return [(r["resource_key"], r["holder"]) for r in rows]


def test_queued_waiters_leave_the_line_with_the_lease_or_when_they_give_up(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert store.leases.acquire(["q1"], "h1", 30) is True
    assert store.leases.acquire(["q1"], "h2", 30) is False
    store.leases.queue(["q1"], "h2", 30)
    store.leases.queue(["q1"], "h2", 30)  # once in line, however often it asks
    store.leases.queue(["q1", "q2"], "h3", 30)
    store.leases.queue([], "h4", 30)  # nothing to wait for
    assert waiting(store) == [("q1", "h2"), ("q1", "h3"), ("q2", "h3")]
    assert store.leases.acquire(["q1"], "h2", 30, queued=True) is False  # still h1's: stays in line
    assert waiting(store) == [("q1", "h2"), ("q1", "h3"), ("q2", "h3")]
    assert store.leases.release(["q1"], "h1") == 1
    assert store.leases.acquire(["q1"], "h2", 30, queued=True) is True  # leaves the line with it
    assert waiting(store) == [("q1", "h3"), ("q2", "h3")]
    store.leases.leave_queue("h3")  # gave up
    assert waiting(store) == []
    store.leases.queue(["q5"], "h5", 5)
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=10))  # h5's wait is over (a dead waiter)
        store.leases.queue(["q5"], "h6", 30)
    assert waiting(store) == [("q5", "h6")]


def test_change_notices_name_the_oldest_waiter_of_a_given_up_lease_and_every_changed_breaker(
    store: Store, reopen: Callable[..., Store]
) -> None:
    store.changes.start()
    store.changes.start()  # idempotent
    if isinstance(store, SQLiteStore):  # no notices: callers must look again every time
        assert store.changes.live is False
        seen = store.changes.seen(("lease:k>",))
        assert store.changes.changed(("lease:k>",), seen) is True
        assert store.changes.wait(("lease:k>",), seen, 0.01) is False
        store.changes.note("lease:k>")
        store.changes.note_all()
        store.changes.close()
        store.changes.close()
        return
    deadline = time.monotonic() + 10
    while not store.changes.live:  # the listener connects in the background
        assert time.monotonic() < deadline, "the change listener never connected"
        time.sleep(0.01)
    other = reopen()  # another process holds the lease and gives it up
    assert other.leases.acquire(["n1"], "h1", 30) is True
    store.leases.queue(["n1"], "h2", 30)
    store.leases.queue(["n1"], "h3", 30)  # in line after h2
    h2, h3, anyone = ("lease:n1>h2",), ("lease:n1>h3",), ("lease:n1>",)
    seen2, seen3, seen_any = store.changes.seen(h2), store.changes.seen(h3), store.changes.seen(anyone)
    assert store.changes.changed(h2, seen2) is False
    assert other.leases.release(["n1"], "h1") == 1
    assert store.changes.wait(h2, seen2, 10) is True  # the oldest waiter is named
    assert store.changes.changed(h3, seen3) is False and store.changes.changed(anyone, seen_any) is False
    assert store.changes.wait(h3, seen3, 0.01) is False
    store.leases.leave_queue("h2")
    store.leases.leave_queue("h3")
    assert other.leases.acquire(["n1"], "h1", 30) is True
    assert other.leases.release(["n1"], "h1") == 1  # nobody waits: the notice names nobody
    assert store.changes.wait(anyone, seen_any, 10) is True

    seen = store.changes.seen(("breaker:dep",))
    other.breakers.report("dep", "x", failed=True, failure_threshold=5, reset_timeout_s=30)
    assert store.changes.wait(("breaker:dep",), seen, 10) is True  # every change of a breaker row

    seen = store.changes.seen(("mine",))
    store.changes.note("mine")  # counted in this process
    assert store.changes.changed(("mine",), seen) is True
    seen = store.changes.seen(("mine",))
    store.changes.note_all()  # notices may be lost: everything counts as changed
    assert store.changes.changed(("mine",), seen) is True
    store.changes.close()
    assert store.changes.live is False
    store.changes.close()


def test_renew_resources_extends_only_the_holders_own_leases(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert store.leases.acquire(["k1", "k2"], "h1", 5) is True
    start = store.now()
    assert store.leases.renew(["k1", "k2"], "h1", 120) is True
    end = store.now()
    for _, expires_at in leases(store).values():
        assert start + timedelta(seconds=120) <= parse_iso(expires_at) <= end + timedelta(seconds=120)
    before = snapshot(store)
    assert store.leases.renew(["k1"], "h2", 600) is False  # not its holder
    assert store.leases.renew(["k9"], "h1", 600) is False  # never leased
    assert store.leases.renew([], "h1", 600) is True
    assert snapshot(store) == before
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=200))
        assert store.leases.acquire(["k1"], "h2", 30) is True  # h1's lease lapsed: taken over
        taken = leases(store)["k1"]
        assert store.leases.renew(["k1", "k2"], "h1", 600) is False  # k1 is h2's now
        assert leases(store)["k1"] == taken


def test_breaker_state_opens_on_failures_and_hands_out_one_probe_by_the_store_clock(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = {"failure_threshold": 3, "reset_timeout_s": 30.0}
    assert store.breakers.row("pay") is None
    assert store.breakers.admit("pay", "h1", 10) == ("closed", 0.0, 0)
    store.breakers.report("pay", "h1", failed=True, **report)
    assert store.breakers.report("pay", "h2", failed=True, **report).failures == 2  # any process counts
    assert store.breakers.report("pay", "h3", failed=False, **report).failures == 0  # a success resets
    for holder in ("h1", "h2"):
        assert store.breakers.report("pay", holder, failed=True, **report).state == "closed"
    opened = store.breakers.report("pay", "h3", failed=True, **report)
    assert (opened.state, opened.failures, opened.times_opened) == ("open", 3, 1)
    assert 29.0 < opened.retry_in_s <= 30.0
    admit, retry_in, _ = store.breakers.admit("pay", "h4", 10)
    assert admit == "open" and 29.0 < retry_in <= 30.0
    before = snapshot(store)
    assert store.breakers.release("pay", "h4") is False  # holds no probe: nothing changes
    assert store.breakers.report("pay", "h4", failed=False, **report).state == "open"  # a straggler
    assert snapshot(store) == before
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=31))  # past the reset, by the store's clock
        barrier = threading.Barrier(20)

        def contend(i: int) -> str:
            barrier.wait()
            return store.breakers.admit("pay", f"w{i}", 10)[0]

        with ThreadPoolExecutor(max_workers=20) as pool:
            verdicts = list(pool.map(contend, range(20)))
        assert sorted(set(verdicts)) == ["open", "probe"] and verdicts.count("probe") == 1
        prober = f"w{verdicts.index('probe')}"
        row = store.breakers.row("pay")
        assert row is not None and (row.state, row.probe_owner) == ("half_open", prober)
        assert store.breakers.report("pay", "h1", failed=False, **report).state == "half_open"  # not the probe
        assert store.breakers.release("pay", prober) is True  # unreported: open again, next caller probes
        assert store.breakers.admit("pay", "h5", 10)[0] == "probe"
        reopened = store.breakers.report("pay", "h5", failed=True, **report)  # the probe failed
        assert (reopened.state, reopened.times_opened, reopened.probe_owner) == ("open", 2, None)
        assert store.breakers.admit("pay", "h6", 10)[0] == "open"
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=62))
        assert store.breakers.admit("pay", "h6", 10)[0] == "probe"
        assert store.breakers.admit("pay", "h7", 10)[0] == "open"  # the probe is out
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=73))  # h6 never reported: its probe lapsed
        assert store.breakers.admit("pay", "h7", 10)[0] == "probe"
        closed = store.breakers.report("pay", "h7", failed=False, **report)
        assert (closed.state, closed.failures, closed.probe_owner) == ("closed", 0, None)
        assert store.breakers.admit("pay", "h8", 10) == ("closed", 0.0, 0)


def test_release_resources_gives_up_only_the_holders_own_leases(store: Store) -> None:
    assert store.leases.acquire(["k1", "k2"], "h1", 30) is True
    before = snapshot(store)
    assert store.leases.release(["k1", "k2"], "h2") == 0  # not its holder
    assert store.leases.release([], "h1") == 0
    assert snapshot(store) == before
    assert store.leases.release(["k1"], "h1") == 1
    assert store.leases.acquire(["k1"], "h2", 30) is True  # free again at once
    assert store.leases.release(["k1", "k2"], "h1") == 1  # k2 only: k1 is h2's now
    assert store.leases.release(["k2"], "h1") == 0  # repeating it is harmless
    assert {k: h for k, (h, _) in leases(store).items()} == {"k1": "h2"}


def test_transition_gives_up_the_holders_leases_with_the_change_and_only_when_it_happened(
    store: Store,
) -> None:
    executing(store, 1, owner="w1", lease_s=30)
    assert store.leases.acquire(["k1", "k2"], "h1", 30) is True
    assert store.leases.acquire(["k3"], "h2", 30) is True
    before = snapshot(store)
    with pytest.raises(InvalidTransitionError):  # not the owner: no change, every lease stays
        store.operations.transition(
            "op_test1", "executing", "succeeded", owner="w2", result={"x": 1}, release_leases=(["k1"], "h1")
        )
    assert snapshot(store) == before
    done = store.operations.transition(
        "op_test1",
        "executing",
        "succeeded",
        owner="w1",
        result={"x": 1},
        audit=[event("operation.completed", operation_key="op_test1")],
        release_leases=(["k2", "k1", "k3"], "h1"),  # k3 is h2's: it stays
    )
    assert done.status == "succeeded" and len(named(store, "operation.completed")) == 1
    assert {k: h for k, (h, _) in leases(store).items()} == {"k3": "h2"}
    assert store.leases.acquire(["k1", "k2"], "h9", 30) is True  # free again at once


# ---- admission slots -----------------------------------------------------------------------


def test_take_slot_hands_out_each_slot_below_the_cap_once_until_it_lapses_by_the_store_clock(
    store: Store, monkeypatch: pytest.MonkeyPatch, reopen: Callable[..., Store]
) -> None:
    start = store.now()
    assert store.slots.take("model:acme", "h1", 2, 30) == 0
    assert reopen().slots.take("model:acme", "h2", 2, 30) == 1  # another process counts too
    end = store.now()
    held = store.slots.held("model:acme")
    assert [(r.scope, r.slot, r.holder) for r in held] == [("model:acme", 0, "h1"), ("model:acme", 1, "h2")]
    for row in held:
        assert isinstance(row, SlotRow)
        assert start + timedelta(seconds=30) <= parse_iso(row.expires_at) <= end + timedelta(seconds=30)

    before = snapshot(store)
    assert store.slots.take("model:acme", "h3", 2, 30) is None  # both held: nothing changes
    assert reopen().slots.take("model:acme", "h3", 2, 30) is None
    with pytest.raises(ValueError, match="cap >= 1"):
        store.slots.take("model:acme", "h3", 0, 30)
    with pytest.raises(ValueError, match="positive time to live"):
        store.slots.take("model:acme", "h3", 3, 0)
    assert snapshot(store) == before
    assert store.slots.take("model:beta", "h3", 2, 30) == 0  # each scope has its own slots
    assert store.slots.take("model:acme", "h3", 3, 30) == 2  # a larger cap has a free slot
    assert store.slots.held("tool:acme") == []

    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=31))  # every slot lapsed by the store's clock
        assert store.slots.held("model:acme") == []
        assert store.slots.take("model:acme", "h4", 1, 30) == 0  # a lapsed slot is taken over
        assert [(r.slot, r.holder) for r in store.slots.held("model:acme")] == [(0, "h4")]
        assert store.slots.take("model:acme", "h5", 1, 30) is None  # and is live again

    barrier = threading.Barrier(20)

    def contend(i: int) -> int | None:
        barrier.wait()
        return store.slots.take("tool:acme", f"w{i}", 3, 30)

    with ThreadPoolExecutor(max_workers=20) as pool:
        won = list(pool.map(contend, range(20)))
    assert sorted(s for s in won if s is not None) == [0, 1, 2]  # exactly the cap, each slot once
    assert {r.slot: r.holder for r in store.slots.held("tool:acme")} == {
        slot: f"w{i}" for i, slot in enumerate(won) if slot is not None
    }


def test_release_slot_gives_back_only_the_holders_own_slot(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert store.slots.take("tool:acme", "h1", 2, 30) == 0
    before = snapshot(store)
    assert store.slots.release("tool:acme", 0, "h2") is False  # not its holder
    assert store.slots.release("tool:acme", 1, "h1") is False  # not its slot
    assert store.slots.release("tool:beta", 0, "h1") is False  # not its scope
    assert snapshot(store) == before
    assert store.slots.release("tool:acme", 0, "h1") is True
    assert store.slots.held("tool:acme") == []
    assert store.slots.release("tool:acme", 0, "h1") is False  # repeating it is harmless
    assert store.slots.take("tool:acme", "h2", 1, 30) == 0  # free again at once
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=31))  # h2's slot lapsed: h3 takes it over
        assert store.slots.take("tool:acme", "h3", 1, 30) == 0
        assert store.slots.release("tool:acme", 0, "h2") is False  # the late holder frees nothing
        assert [(r.slot, r.holder) for r in store.slots.held("tool:acme")] == [(0, "h3")]


# ---- sealed delegations --------------------------------------------------------------------


def test_put_and_get_delegation_keep_opaque_text_per_operation_with_the_store_clock(
    store: Store, reopen: Callable[..., Store]
) -> None:
    assert store.delegations.get("op_test1") is None
    start = store.now()
    expires = iso(start + timedelta(minutes=5))
    put = store.delegations.put("op_test1", "v1.sealed-one", expires)
    assert (put.operation_key, put.sealed, put.expires_at) == ("op_test1", "v1.sealed-one", expires)
    assert start <= parse_iso(put.created_at) <= store.now()
    assert "sealed-one" not in repr(put)  # the sealed text never shows in a repr
    assert store.delegations.get("op_test1") == put == reopen().delegations.get("op_test1")
    again = store.delegations.put("op_test1", "v1.sealed-two", expires)  # a re-run proposal node replaces it
    assert store.delegations.get("op_test1") == again and again.sealed == "v1.sealed-two"
    assert store.delegations.get("op_test2") is None
    with store.transaction(write=False) as tx:
        assert len(tx.execute("SELECT * FROM sealed_delegations")) == 1


def test_delete_and_purge_delegations_remove_ended_and_expired_ones_only(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    later = iso(store.now() + timedelta(minutes=5))
    for n in (1, 2, 3):
        store.proposals.create(make_proposal(n))
        store.delegations.put(f"op_test{n}", f"v1.s{n}", later)
    store.delegations.put("op_soon", "v1.soon", iso(store.now() + timedelta(seconds=30)))
    before = snapshot(store)
    assert store.delegations.delete("op_none") is False
    assert store.delegations.purge() == 0  # all pending, none expired
    assert snapshot(store) == before
    store.operations.transition("op_test2", "pending_approval", "rejected")
    approve_row(store, "op_test3")  # approved: still needed
    with monkeypatch.context() as shifted:
        shift_store_clock(shifted, store, timedelta(seconds=31))
        assert store.delegations.purge() == 2  # op_test2 ended, op_soon expired
    assert [k for k in ("op_test1", "op_test2", "op_test3", "op_soon") if store.delegations.get(k)] == [
        "op_test1",
        "op_test3",
    ]
    assert store.delegations.delete("op_test1") is True and store.delegations.delete("op_test1") is False
    assert store.delegations.get("op_test1") is None and store.delegations.get("op_test3") is not None


# ---- identities ----------------------------------------------------------------------------


def test_token_hash_is_a_keyed_hash_of_the_token(store: Store, reopen: Callable[..., Store]) -> None:
    hashed = store.identities.token_hash("secret-token-ada")
    assert re.fullmatch(r"[0-9a-f]{64}", hashed) and "secret-token-ada" not in hashed
    assert store.identities.token_hash("secret-token-ada") == hashed
    assert store.identities.token_hash("secret-token-bob") != hashed
    assert reopen().identities.token_hash("secret-token-ada") == hashed  # every process with the secret agrees
    assert reopen(key=b"another-store-secret-0002").identities.token_hash("secret-token-ada") != hashed


def test_add_identity_stores_a_signed_row_with_the_store_clock_and_never_replaces_one(store: Store) -> None:
    start = store.now()
    added = store.identities.add(
        make_identity("ada", token_hash=store.identities.token_hash("tok-ada"), review_tenants=("globex",))
    )
    end = store.now()
    assert added is not None and added.authentic and added.status == "active"
    assert added.created_at == added.updated_at and start <= parse_iso(added.created_at) <= end
    assert store.identities.get("ada") == added
    before = snapshot(store)
    assert store.identities.add(make_identity("ada", tenant_id="globex", roles=("admin",))) is None
    assert snapshot(store) == before


def test_change_identity_re_signs_an_authentic_row_and_refuses_an_unknown_or_forged_one(store: Store) -> None:
    added = store.identities.add(make_identity("ada", token_hash=store.identities.token_hash("tok-1")))
    assert added is not None
    rotated = store.identities.change("ada", token_hash=store.identities.token_hash("tok-2"))
    assert (
        rotated.token_hash == store.identities.token_hash("tok-2") and rotated.status == "active" and rotated.authentic
    )
    revoked = store.identities.change("ada", status="revoked")
    assert revoked.status == "revoked" and revoked.token_hash == rotated.token_hash
    assert (
        revoked.updated_at >= rotated.updated_at >= added.updated_at
        and revoked.created_at == added.created_at
    )
    assert store.identities.get("ada") == revoked
    promoted = store.identities.change("ada", roles=["support", "finance", "support"], scopes=["orders:read"])
    assert (promoted.roles, promoted.scopes, promoted.authentic) == (
        ("finance", "support"),
        ("orders:read",),
        True,
    )
    assert store.identities.get("ada") == promoted and promoted.token_hash == revoked.token_hash

    before = snapshot(store)
    with pytest.raises(IdentityError) as unknown:
        store.identities.change("nobody", status="revoked")
    assert unknown.value.code == "unknown_identity"
    assert snapshot(store) == before

    store.identities.add(make_identity("bob"))
    with store.transaction() as tx:  # promoted with database access alone
        tx.execute("UPDATE identities SET roles = ? WHERE user_id = ?", ('["admin"]', "bob"))
    before = snapshot(store)
    with pytest.raises(IdentityError) as forged:
        store.identities.change("bob", status="active", token_hash=store.identities.token_hash("tok-bob"))
    assert forged.value.code == "forged_identity"
    assert snapshot(store) == before
    stored = store.identities.get("bob")
    assert stored is not None and stored.roles == ("admin",) and not stored.authentic  # never re-signed


def test_get_identity_and_identity_by_token_hash_report_whether_the_row_verifies(store: Store) -> None:
    assert store.identities.get("ada") is None
    assert store.identities.by_token_hash(store.identities.token_hash("tok-ada")) is None
    added = store.identities.add(make_identity("ada", token_hash=store.identities.token_hash("tok-ada")))
    store.identities.add(make_identity("bob", token_hash=store.identities.token_hash("tok-bob")))
    assert store.identities.get("ada") == added
    assert store.identities.by_token_hash(store.identities.token_hash("tok-ada")) == added
    bob = store.identities.by_token_hash(store.identities.token_hash("tok-bob"))
    assert bob is not None and bob.user_id == "bob"
    assert store.identities.by_token_hash(store.identities.token_hash("tok-eve")) is None
    with store.transaction() as tx:  # a row changed with database access alone no longer verifies
        tx.execute("UPDATE identities SET scopes = ? WHERE user_id = ?", ('["refunds:write"]', "ada"))
    tampered = store.identities.get("ada")
    assert tampered is not None and tampered.scopes == ("refunds:write",) and not tampered.authentic
    by_token = store.identities.by_token_hash(store.identities.token_hash("tok-ada"))
    assert by_token is not None and not by_token.authentic


def test_identity_writes_bind_their_version_and_an_older_row_copied_back_reads_replayed(store: Store) -> None:
    added = store.identities.add(make_identity("ada", token_hash=store.identities.token_hash("tok-1")))
    assert added is not None and added.version == 1 and not added.replayed
    with store.transaction(write=False) as tx:
        old = tx.one("SELECT * FROM identities WHERE user_id = ?", ("ada",))
    assert old is not None
    rotated = store.identities.change("ada", token_hash=store.identities.token_hash("tok-2"))
    assert rotated.version == 2 and store.identities.get("ada") == rotated
    bindings = named(store, "record.versioned")
    assert [(e.detail["kind"], e.detail["version"], e.tenant_id) for e in bindings] == [
        ("identity", 1, "acme"),
        ("identity", 2, "acme"),
    ]
    assert all("ada" not in e.detail["key"] for e in bindings)  # user ids enter the log only hashed
    assert [(r.key, r.version, r.mac_ok) for r in store.identities.versioned_rows()] == [("ada", 2, True)]
    with store.transaction() as tx:  # the older, validly MAC'd row copied back with database access alone
        tx.execute(
            "UPDATE identities SET token_hash = ?, updated_at = ?, version = ?, mac = ? WHERE user_id = ?",
            (old["token_hash"], old["updated_at"], old["version"], old["mac"], "ada"),
        )
    replayed = store.identities.get("ada")
    assert replayed is not None and replayed.replayed and not replayed.authentic and replayed.version == 1
    by_token = store.identities.by_token_hash(store.identities.token_hash("tok-1"))
    assert by_token is not None and by_token.replayed and not by_token.authentic
    assert [(r.key, r.version, r.mac_ok) for r in store.identities.versioned_rows()] == [("ada", 1, True)]
    before = snapshot(store)
    with pytest.raises(IdentityError) as refused:
        store.identities.change("ada", status="revoked")
    assert refused.value.code == "forged_identity"
    assert snapshot(store) == before


def test_list_identities_by_user_id_optionally_of_some_tenants(store: Store) -> None:
    assert store.identities.list() == []
    for user, tenant in (("zed", "acme"), ("ada", "acme"), ("gus", "globex"), ("ivy", "initech")):
        store.identities.add(make_identity(user, tenant_id=tenant))
    assert [i.user_id for i in store.identities.list()] == ["ada", "gus", "ivy", "zed"]
    assert all(i.authentic for i in store.identities.list())
    assert [i.user_id for i in store.identities.list(["acme"])] == ["ada", "zed"]
    assert [i.user_id for i in store.identities.list(["globex", "initech"])] == ["gus", "ivy"]
    assert store.identities.list([]) == []
    assert store.identities.list(["umbrella"]) == []


# ---- audit ---------------------------------------------------------------------------------


def test_audit_log_is_append_only_and_hash_chained(store: Store) -> None:
    first = store.audit.append(
        AuditEventIn(
            event="call.rejected", result="rejected", code="unknown_tool", call_id="c1", detail={"n": 1}
        )
    )
    second = store.audit.append(
        AuditEventIn(event="proposal.created", result="pending_approval", call_id="c2")
    )
    assert first.prev_hash == GENESIS_HASH and second.prev_hash == first.hash
    for event_ in (first, second):
        row = dataclasses.asdict(event_)
        assert (
            audit_hash(audit_row_content(row), event_.prev_hash, store.keys.key("audit-chain")) == event_.hash
        )
    with pytest.raises(StoreError), store.transaction() as tx:
        tx.execute("UPDATE audit_events SET result = 'accepted' WHERE seq = ?", (first.seq,))
    with pytest.raises(StoreError), store.transaction() as tx:
        tx.execute("DELETE FROM audit_events")
    assert [e.code for e in store.audit.events(call_ids=["c1"])] == ["unknown_tool"]
    assert len(store.audit.events()) == 2


def test_append_audit_returns_the_stored_event_and_refuses_a_detail_it_cannot_encode(store: Store) -> None:
    start = store.now()
    stored = store.audit.append(
        event("call.accepted", call_id="c1", tool="lookup_order", detail={"n": 1, "s": "é"})
    )
    end = store.now()
    assert (stored.event, stored.result, stored.call_id, stored.tool, stored.detail) == (
        "call.accepted",
        "recorded",
        "c1",
        "lookup_order",
        {"n": 1, "s": "é"},
    )
    assert stored.event_id.startswith("evt_") and stored.payload_retained
    assert stored.detail_sha256 == digest({"n": 1, "s": "é"})
    assert start - timedelta(seconds=1) <= parse_iso(stored.occurred_at) <= end + timedelta(seconds=1)
    assert store.audit.events() == [stored]
    before = snapshot(store)
    with pytest.raises(ValueError, match="NaN"):
        store.audit.append(event(detail={"x": float("nan")}))
    assert snapshot(store) == before


def test_concurrent_audit_appends_keep_one_chain(store: Store) -> None:
    def append(i: int) -> None:
        store.audit.append(AuditEventIn(event="call.accepted", result="allowed", call_id=f"c{i}"))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(append, range(40)))
    events = store.audit.events()
    assert len(events) == 40
    assert events[0].prev_hash == GENESIS_HASH
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(events))


def test_concurrent_appends_naming_a_proposal_keep_one_chain_with_its_tenant(store: Store) -> None:
    """Events that name a proposal read its tenant with the chain's head (on SQLite in one
    statement, under the writer lock BEGIN IMMEDIATE holds): appended by 8 threads at once onto
    an empty chain, they make one chain from the genesis hash, each with the proposal's tenant
    (the store's record, not the one the writer gave)."""
    store.proposals.create(make_proposal(tenant_id="umbrella"))
    assert store.audit.events() == []
    together = threading.Barrier(8)

    def append(i: int) -> None:
        together.wait()
        for j in range(5):
            store.audit.append(
                event("call.accepted", call_id=f"c{i}-{j}", proposal_id="prop_test1", tenant_id="acme")
            )

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(append, range(8)))
    events = store.audit.events()
    assert len(events) == 40 and events[0].prev_hash == GENESIS_HASH
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(events))
    assert {e.tenant_id for e in events} == {"umbrella"}
    assert verify_chain(store).ok


def test_append_audits_links_events_in_order_in_one_transaction_all_or_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = store.audit.append(event("first"))
    transactions: list[bool] = []
    real = store.transaction

    def counted(*, write: bool = True):  # type: ignore[no-untyped-def]
        transactions.append(write)
        return real(write=write)

    monkeypatch.setattr(store, "transaction", counted)
    assert store.audit.append_many([]) == [] and transactions == []  # nothing to append: no transaction
    appended = store.audit.append_many(
        [event("a", call_id="c1"), event("b", call_id="c2"), event("c", call_id="c3")]
    )
    assert transactions == [True]
    monkeypatch.setattr(store, "transaction", real)
    assert [e.event for e in appended] == ["a", "b", "c"]
    assert [e.seq for e in appended] == sorted(e.seq for e in appended) and appended[0].seq > head.seq
    assert appended[0].prev_hash == head.hash
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(appended))
    assert store.audit.events() == [head, *appended]
    before = snapshot(store)
    with pytest.raises(ValueError):
        store.audit.append_many([event("d"), event("e", detail={"x": float("inf")})])
    assert snapshot(store) == before
    assert verify_chain(store).ok


def test_latest_audit_event_is_the_most_recent_of_a_name(store: Store) -> None:
    assert store.audit.latest("release.loaded") is None
    store.audit.append(event("release.loaded", detail={"release": "ops-tools/1.0.0"}))
    newest = store.audit.append(event("release.loaded", detail={"release": "ops-tools/1.1.0"}))
    store.audit.append(event("call.accepted"))
    assert store.audit.latest("release.loaded") == newest
    assert store.audit.latest("release.stopped") is None


def test_purge_audit_payloads_deletes_old_payloads_and_keeps_the_chain(store: Store) -> None:
    old = store.audit.append(event("old", detail={"card": "4111"}))
    new = store.audit.append(event("new", detail={"card": "5500"}))
    assert old.occurred_at < new.occurred_at
    before = snapshot(store)
    assert store.audit.purge_payloads(old.occurred_at) == 0  # strictly older only
    assert snapshot(store) == before
    assert store.audit.purge_payloads(new.occurred_at) == 1
    purged, kept = store.audit.events()
    assert (purged.event_id, purged.detail, purged.payload_retained) == (old.event_id, {}, False)
    assert purged.detail_sha256 == old.detail_sha256 and purged.hash == old.hash
    assert kept == new
    assert store.audit.latest("old") == purged
    assert verify_chain(store).ok  # the chain covers the payload's digest, not the payload
    assert store.audit.purge_payloads(new.occurred_at) == 0


def test_audit_with_payloads_gives_every_event_with_the_text_its_digest_covers(store: Store) -> None:
    old = store.audit.append(event("old", detail={"b": 1, "a": "x"}))
    new = store.audit.append(event("new", detail={"n": 2}))
    before = snapshot(store)
    assert store.audit.with_payloads() == [(old, '{"a":"x","b":1}'), (new, '{"n":2}')]
    assert [digest(e.detail) for e, _ in store.audit.with_payloads()] == [old.detail_sha256, new.detail_sha256]
    store.audit.purge_payloads(new.occurred_at)
    [(purged, text), (kept, kept_text)] = store.audit.with_payloads()
    assert (purged.event_id, purged.payload_retained, text) == (old.event_id, False, None)
    assert (kept, kept_text) == (new, '{"n":2}')
    assert snapshot(store)["audit_events"] == before["audit_events"]  # reading changes nothing


def test_audit_events_match_any_filter_in_chain_order(store: Store) -> None:
    a = store.audit.append(event("a", operation_key="op_1"))
    b = store.audit.append(event("b", proposal_id="prop_1"))
    c = store.audit.append(event("c", call_id="c1"))
    d = store.audit.append(event("d", call_id="c2", operation_key="op_2"))
    assert store.audit.events() == [a, b, c, d]
    assert store.audit.events(operation_key="op_1") == [a]
    assert store.audit.events(proposal_id="prop_1") == [b]
    assert store.audit.events(call_ids=["c2", "c1"]) == [c, d]
    assert store.audit.events(operation_key="op_1", call_ids=["c2"]) == [a, d]  # any filter matches
    assert store.audit.events(operation_key="op_9", proposal_id="prop_9", call_ids=["c9"]) == []


# ---- the contract covers the whole interface -----------------------------------------------

# ---- durable waits -------------------------------------------------------------------------


def wait_in(n: int = 1, **overrides: Any) -> WaitIn:
    base = WaitIn(
        operation_key=f"op_wait{n}",
        thread_id=f"t-{n}",
        tenant_id="acme",
        user_id="lee",
        call_id=f"call_{n}",
        tool="submit_report_job",
        status_tool="check_job_status",
        job_ref=f"job_{n}",
        every_s=15.0,
        max_wait_s=60.0,
    )
    return dataclasses.replace(base, **overrides)


def test_open_wait_schedules_by_the_store_clock_and_returns_an_existing_wait_unchanged(
    store: Store, reopen: Callable[..., Store]
) -> None:
    opened = store.waits.open(wait_in(1))
    assert (opened.state, opened.outcome, opened.checks, opened.verified) == ("waiting", "", 0, True)
    assert parse_iso(opened.next_check_at) - parse_iso(opened.created_at) == timedelta(seconds=15)
    assert parse_iso(opened.expires_at) - parse_iso(opened.created_at) == timedelta(seconds=60)
    again = store.waits.open(wait_in(1, job_ref="job_other", thread_id="t-9"))
    assert again == opened  # first opener wins; nothing rewritten
    assert reopen().waits.get("op_wait1") == opened


def test_get_wait_verifies_the_row_mac_and_a_foreign_key_reads_it_unverified(
    store: Store, reopen: Callable[..., Store]
) -> None:
    assert store.waits.get("op_missing") is None
    store.waits.open(wait_in(1))
    assert store.waits.get("op_wait1").verified  # type: ignore[union-attr]
    other = reopen(key=b"another-store-secret-000000001")
    assert other.waits.get("op_wait1").verified is False  # type: ignore[union-attr]
    with store.transaction() as tx:
        tx.execute("UPDATE job_waits SET state = 'ready', outcome = 'done' WHERE operation_key = 'op_wait1'")
    tampered = store.waits.get("op_wait1")
    assert tampered is not None and tampered.state == "ready" and not tampered.verified and not tampered.final


def test_due_waits_are_judged_by_the_store_clock_oldest_first(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.waits.open(wait_in(1))
    store.waits.open(wait_in(2, every_s=5.0))
    assert store.waits.due(10) == []
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=6))
        assert [w.operation_key for w in store.waits.due(10)] == ["op_wait2"]
        shift_store_clock(later, store, timedelta(seconds=10))
        assert [w.operation_key for w in store.waits.due(10)] == ["op_wait2", "op_wait1"]
        assert [w.operation_key for w in store.waits.due(1)] == ["op_wait2"]


def test_record_wait_check_progresses_once_per_check_and_ends_done_or_expired(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.waits.open(wait_in(1))
    store.waits.open(wait_in(2))
    running = store.waits.record_check(
        "op_wait1", checks_seen=0, job_status="running", result={"s": 1}, done=False
    )
    assert running is not None and (running.state, running.checks, running.last_status) == (
        "waiting",
        1,
        "running",
    )
    assert running.result == {"s": 1} and running.verified
    before = snapshot(store)
    # a stale check (another worker recorded check 1 first), a missing wait: nothing changes
    assert store.waits.record_check("op_wait1", checks_seen=0, job_status="x", result=None, done=True) is None
    assert store.waits.record_check("op_nope", checks_seen=0, job_status="x", result=None, done=True) is None
    assert snapshot(store) == before
    done = store.waits.record_check(
        "op_wait1", checks_seen=1, job_status="complete", result={"s": 2}, done=True
    )
    assert done is not None and (done.state, done.outcome, done.checks) == ("ready", "done", 2) and done.final
    assert store.waits.record_check("op_wait1", checks_seen=2, job_status="x", result=None, done=True) is None
    with monkeypatch.context() as later:  # past the expiry by the store's clock: expired, not done
        shift_store_clock(later, store, timedelta(seconds=61))
        expired = store.waits.record_check(
            "op_wait2", checks_seen=0, job_status="running", result=None, done=False
        )
    assert expired is not None and (expired.state, expired.outcome) == ("ready", "expired")
    store.waits.open(wait_in(3))
    with store.transaction() as tx:  # changed outside the store: never progressed
        tx.execute("UPDATE job_waits SET job_ref = 'job_forged' WHERE operation_key = 'op_wait3'")
    before = snapshot(store)
    assert (
        store.waits.record_check("op_wait3", checks_seen=0, job_status="complete", result=None, done=True)
        is None
    )
    assert snapshot(store) == before


def test_concurrent_wait_checks_record_one(store: Store, reopen: Callable[..., Store]) -> None:
    store.waits.open(wait_in(1))
    stores = [store, reopen(), reopen(), reopen()]
    barrier = threading.Barrier(len(stores))

    def check(s: Store) -> object:
        barrier.wait()
        return s.waits.record_check("op_wait1", checks_seen=0, job_status="running", result=None, done=False)

    with ThreadPoolExecutor(len(stores)) as pool:
        results = list(pool.map(check, stores))
    assert sum(r is not None for r in results) == 1
    assert store.waits.get("op_wait1").checks == 1  # type: ignore[union-attr]


def test_resume_wait_only_from_a_verified_ready_wait_once(store: Store) -> None:
    store.waits.open(wait_in(1))
    assert store.waits.resume("op_wait1") is False  # still waiting
    store.waits.record_check("op_wait1", checks_seen=0, job_status="complete", result=None, done=True)
    assert store.waits.resume("op_wait1") is True
    resumed = store.waits.get("op_wait1")
    assert resumed is not None and resumed.state == "resumed" and resumed.verified and resumed.final
    assert store.waits.resume("op_wait1") is False and store.waits.resume("op_missing") is False
    store.waits.open(wait_in(2))
    with store.transaction() as tx:
        tx.execute("UPDATE job_waits SET state = 'ready', outcome = 'done' WHERE operation_key = 'op_wait2'")
    assert store.waits.resume("op_wait2") is False
    assert store.waits.get("op_wait2").state == "ready"  # type: ignore[union-attr]


def test_list_waits_newest_first_filtered_by_state(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.waits.open(wait_in(1))
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=1))
        store.waits.open(wait_in(2))
    store.waits.record_check("op_wait1", checks_seen=0, job_status="complete", result=None, done=True)
    assert [w.operation_key for w in store.waits.list()] == ["op_wait2", "op_wait1"]
    assert [w.operation_key for w in store.waits.list("ready")] == ["op_wait1"]
    assert [w.operation_key for w in store.waits.list("waiting", limit=1)] == ["op_wait2"]
    assert store.waits.list("resumed") == []


CONTRACT: dict[str, tuple[Callable[..., None], ...]] = {
    "now": (test_now_is_the_store_clock_and_recorded_times_come_from_it,),
    "calibrated_now": (test_calibrated_now_is_the_store_clock_and_follows_a_clock_put_in_front_of_it,),
    "transaction": (
        test_a_transaction_commits_on_success_and_rolls_back_on_any_error,
        test_a_read_only_store_reads_and_refuses_every_write,
    ),
    "setup": (test_setup_is_idempotent_and_refuses_a_newer_schema,),
    "require_schema": (test_require_schema_accepts_only_this_toolgates_schema_version_and_writes_nothing,),
    "migrate": (test_migrate_applies_only_the_missing_steps_of_a_component_all_or_nothing,),
    "close": (test_close_releases_every_connection_and_a_store_closes_as_a_context_manager,),
    "proposals.create": (
        test_create_proposal_is_idempotent_by_operation_key,
        test_create_proposal_stores_its_operation_and_audit_together_and_a_repeat_appends_nothing,
    ),
    "proposals.get": (test_get_proposal_returns_exactly_what_was_stored,),
    "proposals.list": (test_list_proposals_pairs_each_with_its_operation_oldest_first,),
    "proposals.page": (
        test_page_lists_proposals_in_keyset_pages_in_the_order_their_operations_were_made,
        test_a_page_reads_a_bounded_number_of_rows_whatever_is_pending,
    ),
    "proposals.same_effect": (
        test_same_effect_finds_the_other_proposals_of_the_thread_for_the_same_tool_and_arguments,
    ),
    "proposals.superseding": (test_superseding_is_the_newest_proposal_that_replaces_one,),
    "approvals.record": (
        test_one_decision_per_reviewer_and_decisions_are_immutable,
        test_record_decision_appends_its_audit_only_when_the_decision_is_new,
    ),
    "approvals.record_and_settle": (
        test_record_and_settle_settles_the_operation_in_the_decisions_transaction,
        test_record_and_settle_of_a_decision_on_record_already_settles_nothing,
        test_record_and_settle_never_approves_past_a_recorded_rejection,
    ),
    "approvals.for_proposal": (test_decisions_for_lists_a_proposals_decisions_in_order_marking_forged_rows,),
    "approvals.all": (test_all_decisions_lists_every_decision_in_the_store_marking_forged_rows,),
    "operations.get": (test_get_operation_and_list_operations_oldest_first_by_status,),
    "operations.list": (test_get_operation_and_list_operations_oldest_first_by_status,),
    "operations.transition": (
        test_transition_changes_status_result_and_error_with_its_audit,
        test_transition_from_the_wrong_status_or_by_another_owner_changes_nothing,
        test_transition_after_a_lapsed_lease_waits_for_the_lease_to_lapse,
        test_database_refuses_illegal_operation_transitions,
    ),
    "operations.claim": (
        test_claim_only_from_approved_and_only_once,
        test_claim_sets_the_lease_from_the_store_clock_and_audits_only_the_winner,
        test_claim_refuses_an_approval_that_has_expired,
        test_twenty_concurrent_claims_have_exactly_one_winner,
    ),
    "operations.renew_lease": (test_renew_lease_extends_only_the_owners_live_claim,),
    "operations.stale_executing": (test_stale_executing_lists_claims_whose_lease_lapsed_beyond_the_grace,),
    "operations.due": (test_due_operations_lists_approved_ones_longest_approved_first_up_to_the_limit,),
    "operations.dead_letter": (test_add_dead_letter_moves_only_an_unknown_operation_whose_lease_lapsed,),
    "operations.dead_letters": (test_dead_letters_lists_open_letters_oldest_first_and_resolve_closes_one_once,),
    "operations.resolve_dead_letter": (test_dead_letters_lists_open_letters_oldest_first_and_resolve_closes_one_once,),
    "counters.increment": (test_increment_counter_counts_hits_per_bucket_and_window_of_the_store_clock,),
    "counters.count_hits": (test_count_hits_counts_every_limit_in_one_transaction_and_stops_at_the_first_full,),
    "counters.take_shares": (
        test_take_shares_grants_up_to_the_limit_in_one_transaction_and_give_back_returns_the_unspent,
    ),
    "counters.give_back": (
        test_take_shares_grants_up_to_the_limit_in_one_transaction_and_give_back_returns_the_unspent,
    ),
    "counters.value": (test_counter_value_peeks_without_counting,),
    "counters.forget_ended": (test_forget_ended_deletes_only_ended_windows_of_buckets_with_the_prefix,),
    "leases.acquire": (test_acquire_resources_leases_all_or_nothing_to_one_holder_until_the_lease_lapses,),
    "leases.renew": (test_renew_resources_extends_only_the_holders_own_leases,),
    "leases.release": (test_release_resources_gives_up_only_the_holders_own_leases,),
    "leases.queue": (
        test_queued_waiters_leave_the_line_with_the_lease_or_when_they_give_up,
        test_change_notices_name_the_oldest_waiter_of_a_given_up_lease_and_every_changed_breaker,
    ),
    "leases.leave_queue": (test_queued_waiters_leave_the_line_with_the_lease_or_when_they_give_up,),
    **{
        f"changes.{method}": (
            test_change_notices_name_the_oldest_waiter_of_a_given_up_lease_and_every_changed_breaker,
        )
        for method in ("seen", "changed", "wait", "note", "note_all", "start", "close")
    },
    "breakers.admit": (test_breaker_state_opens_on_failures_and_hands_out_one_probe_by_the_store_clock,),
    "breakers.report": (test_breaker_state_opens_on_failures_and_hands_out_one_probe_by_the_store_clock,),
    "breakers.release": (test_breaker_state_opens_on_failures_and_hands_out_one_probe_by_the_store_clock,),
    "breakers.row": (test_breaker_state_opens_on_failures_and_hands_out_one_probe_by_the_store_clock,),
    "delegations.put": (test_put_and_get_delegation_keep_opaque_text_per_operation_with_the_store_clock,),
    "delegations.get": (test_put_and_get_delegation_keep_opaque_text_per_operation_with_the_store_clock,),
    "delegations.delete": (test_delete_and_purge_delegations_remove_ended_and_expired_ones_only,),
    "delegations.purge": (test_delete_and_purge_delegations_remove_ended_and_expired_ones_only,),
    "identities.token_hash": (test_token_hash_is_a_keyed_hash_of_the_token,),
    "identities.add": (test_add_identity_stores_a_signed_row_with_the_store_clock_and_never_replaces_one,),
    "identities.change": (test_change_identity_re_signs_an_authentic_row_and_refuses_an_unknown_or_forged_one,),
    "identities.get": (test_get_identity_and_identity_by_token_hash_report_whether_the_row_verifies,),
    "identities.versioned_rows": (
        test_identity_writes_bind_their_version_and_an_older_row_copied_back_reads_replayed,
    ),
    "identities.by_token_hash": (test_get_identity_and_identity_by_token_hash_report_whether_the_row_verifies,),
    "identities.list": (test_list_identities_by_user_id_optionally_of_some_tenants,),
    "audit.append": (
        test_audit_log_is_append_only_and_hash_chained,
        test_append_audit_returns_the_stored_event_and_refuses_a_detail_it_cannot_encode,
        test_concurrent_audit_appends_keep_one_chain,
    ),
    "audit.append_many": (test_append_audits_links_events_in_order_in_one_transaction_all_or_nothing,),
    "audit.latest": (test_latest_audit_event_is_the_most_recent_of_a_name,),
    "audit.purge_payloads": (test_purge_audit_payloads_deletes_old_payloads_and_keeps_the_chain,),
    "audit.events": (test_audit_events_match_any_filter_in_chain_order,),
    "audit.with_payloads": (test_audit_with_payloads_gives_every_event_with_the_text_its_digest_covers,),
    "waits.open": (test_open_wait_schedules_by_the_store_clock_and_returns_an_existing_wait_unchanged,),
    "waits.get": (test_get_wait_verifies_the_row_mac_and_a_foreign_key_reads_it_unverified,),
    "waits.due": (test_due_waits_are_judged_by_the_store_clock_oldest_first,),
    "waits.record_check": (
        test_record_wait_check_progresses_once_per_check_and_ends_done_or_expired,
        test_concurrent_wait_checks_record_one,
    ),
    "waits.resume": (test_resume_wait_only_from_a_verified_ready_wait_once,),
    "waits.list": (test_list_waits_newest_first_filtered_by_state,),
    "slots.take": (test_take_slot_hands_out_each_slot_below_the_cap_once_until_it_lapses_by_the_store_clock,),
    "slots.release": (test_release_slot_gives_back_only_the_holders_own_slot,),
    "slots.held": (test_take_slot_hands_out_each_slot_below_the_cap_once_until_it_lapses_by_the_store_clock,),
}
"""Each public `Store` method and the tests (run on both backends) that hold it to its contract."""


def public_store_methods() -> set[str]:
    """The public methods of `Store` (``transaction``, ``now``, ...) and of each of its aggregates,
    the latter as ``aggregate.method`` (``operations.claim``)."""
    public = {name for name, member in inspect.getmembers(Store) if not name.startswith("_") and callable(member)}
    for name, member in inspect.getmembers(Store):
        if isinstance(member, functools.cached_property):
            aggregate = inspect.signature(member.func, eval_str=True).return_annotation
            public |= {
                f"{name}.{method}"
                for method, function in inspect.getmembers(aggregate)
                if not method.startswith("_") and callable(function)
            }
    return public


def test_every_public_store_method_has_a_contract_test() -> None:
    public = public_store_methods()
    assert {m for m in Store.__abstractmethods__ if not m.startswith("_")} <= public
    missing = sorted(public - set(CONTRACT))
    assert missing == [], (
        f"Store methods without a contract test here (add one and list it in CONTRACT): {missing}"
    )
    assert sorted(set(CONTRACT) - public) == [], "CONTRACT lists methods Store no longer has"
    for name, tests in CONTRACT.items():
        for test in tests:
            assert test.__name__.startswith("test_") and globals()[test.__name__] is test
            assert "store" in inspect.signature(test).parameters, f"{test.__name__} must run on both backends"
            assert re.search(rf"\.{re.escape(name)}\(", inspect.getsource(test)), f"{test.__name__} never calls {name}"


def test_set_initializer_runs_once_before_the_first_unit_of_work(
    store: Store, reopen: Callable[..., Store]
) -> None:
    fresh = reopen()
    started: list[Store] = []
    fresh.set_initializer(started.append)
    assert started == []  # nothing runs at once: a server builds its store before it serves
    assert fresh.operations.get("op_none") is None
    assert fresh.proposals.get("prop_none") is None
    assert started == [fresh]


CONTRACT["set_initializer"] = (test_set_initializer_runs_once_before_the_first_unit_of_work,)


def test_audit_link_appends_in_the_callers_transaction_and_rolls_back_with_it(store: Store) -> None:
    with pytest.raises(RuntimeError), store.transaction() as tx:
        linked = store.audit.link(tx, [event("contract.linked")])
        assert [e.event for e in linked] == ["contract.linked"]
        raise RuntimeError("the change it records fails")
    assert named(store, "contract.linked") == []  # the evidence went with the change
    with store.transaction() as tx:
        assert store.audit.link(tx, []) == []
        store.audit.link(tx, [event("contract.linked"), event("contract.linked")])
    stored = named(store, "contract.linked")
    assert len(stored) == 2 and stored[1].prev_hash == stored[0].hash
    assert verify_chain(store).ok


def test_audit_append_after_appends_what_build_makes_of_the_latest_event(store: Store) -> None:
    seen: list[str | None] = []

    def build(last: AuditEvent | None) -> AuditEventIn | None:
        seen.append(last.code if last else None)
        return None if last is not None and last.code == "2" else event("contract.after", code=str(len(seen)))

    first = store.audit.append_after("contract.after", build)
    assert first is not None and first.code == "1"
    second = store.audit.append_after("contract.after", build)
    assert second is not None and second.code == "2"
    assert store.audit.append_after("contract.after", build) is None  # build declined: nothing appended
    assert seen == [None, "1", "2"]
    assert [e.code for e in named(store, "contract.after")] == ["1", "2"]


CONTRACT["audit.link"] = (test_audit_link_appends_in_the_callers_transaction_and_rolls_back_with_it,)


def test_audit_link_behind_links_each_group_only_behind_the_row_its_statements_wrote(store: Store) -> None:
    store.proposals.create(make_proposal(1))
    store.proposals.create(make_proposal(2, tenant_id="globex"))
    stamp = iso(store.now())

    def moved(key: str, from_status: str, to_status: str) -> tuple[str, tuple[str, ...]]:
        return (
            "UPDATE operations SET status = ?, updated_at = ? WHERE operation_key = ? AND status = ?"
            " RETURNING operation_key",
            (to_status, stamp, key, from_status),
        )

    def groups(*names: str) -> list[tuple[list[AuditEventIn], Written]]:
        return [
            (
                [event(name, operation_key=f"op_test{n}")],
                Written(n - 1, "operations", "operation_key", f"op_test{n}"),
            )
            for n, name in enumerate(names, start=1)
        ]

    before = snapshot(store)
    with store.transaction() as tx:  # the first group's row not written: nothing linked at all
        answers = store.audit.link_behind(
            tx,
            [moved("op_test1", "approved", "executing"), moved("op_test2", "pending_approval", "approved")],
            groups("behind.first", "behind.second"),
        )
    assert answers == [[], [{"operation_key": "op_test2"}]]
    assert named(store, "behind.first") == named(store, "behind.second") == []
    assert snapshot(store)["audit_events"] == before["audit_events"]
    assert store.operations.get("op_test2").status == "approved"  # type: ignore[union-attr]
    with store.transaction() as tx:  # the first written, the second not: the first group only
        answers = store.audit.link_behind(
            tx,
            [moved("op_test1", "pending_approval", "approved"), moved("op_test2", "pending_approval", "approved")],
            groups("behind.first", "behind.second"),
        )
    assert answers == [[{"operation_key": "op_test1"}], []]
    assert [(e.operation_key, e.tenant_id) for e in named(store, "behind.first")] == [("op_test1", "acme")]
    assert named(store, "behind.second") == []
    with store.transaction() as tx:  # both written: both groups, in order, each with its row's tenant
        store.audit.link_behind(
            tx,
            [moved("op_test1", "approved", "expired"), moved("op_test2", "approved", "expired")],
            groups("behind.first", "behind.second"),
        )
    linked = [e for e in store.audit.events() if e.event.startswith("behind.")]
    assert [(e.event, e.tenant_id) for e in linked] == [
        ("behind.first", "acme"),
        ("behind.first", "acme"),
        ("behind.second", "globex"),
    ]
    assert linked[2].prev_hash == linked[1].hash and linked[1].seq < linked[2].seq
    before = snapshot(store)
    with pytest.raises(RuntimeError), store.transaction() as tx:  # rolled back with the change
        store.audit.link_behind(tx, [moved("op_test1", "expired", "expired")], groups("behind.gone"))
        raise RuntimeError("the change it records fails")
    assert snapshot(store) == before
    assert verify_chain(store).ok


CONTRACT["audit.link_behind"] = (
    test_audit_link_behind_links_each_group_only_behind_the_row_its_statements_wrote,
)


def test_audit_link_ahead_links_only_behind_a_row_its_statements_wrote(store: Store) -> None:
    # a step whose rows are new reads the chain head first (PostgreSQL; None on SQLite, which
    # links behind the statements), and its statements, its events and the COMMIT go together:
    # the events only when the statements wrote the row they record, each statement's rows back
    lease = (
        "INSERT INTO resource_leases (resource_key, holder, acquired_at, expires_at) VALUES (?, 'w',"
        " '2026-12-07T00:00:00.000000Z', '2026-12-07T01:00:00.000000Z') ON CONFLICT DO NOTHING"
        " RETURNING resource_key"
    )
    held = ("SELECT holder FROM resource_leases WHERE resource_key = ?", ("r-ahead",))
    for wrote in (True, False):  # the second finds the lease stored: nothing written, nothing linked
        with store.transaction() as tx:
            answers = store.audit.link_ahead(
                tx,
                store._head_first(tx),
                [(lease, ("r-ahead",)), held],
                [held, held],
                [AuditEventIn(event="ahead.leased", result="recorded", tenant_id="acme")],
                Written(0, "resource_leases", "resource_key", "r-ahead"),
                {},
            )
        assert answers == [[{"resource_key": "r-ahead"}] if wrote else [], [{"holder": "w"}]]
    linked = [e for e in store.audit.events() if e.event == "ahead.leased"]
    assert [(e.event, e.tenant_id) for e in linked] == [("ahead.leased", "acme")]
    assert verify_chain(store).ok


def test_audit_head_first_reads_the_tenants_and_link_ahead_links_each_group_only_behind_its_row(
    store: Store,
) -> None:
    # a step whose events name rows that exist (an outcome, a decision) reads the chain head and
    # those rows' tenants first (PostgreSQL; nothing on SQLite, which links behind the
    # statements), then its statements, its events and the COMMIT go together: the first group
    # only behind the first row written, each later group only behind its own row too
    store.proposals.create(make_proposal(1))
    store.proposals.create(make_proposal(2, tenant_id="globex"))
    stamp = iso(store.now())

    def moved(key: str, from_status: str, to_status: str) -> tuple[str, tuple[str, ...]]:
        return (
            "UPDATE operations SET status = ?, updated_at = ? WHERE operation_key = ? AND status = ?"
            " RETURNING operation_key",
            (to_status, stamp, key, from_status),
        )

    def again(key: str) -> tuple[str, tuple[str, ...]]:
        return ("SELECT operation_key FROM operations WHERE operation_key = ? AND false", (key,))

    def step(first: tuple[str, str], second: tuple[str, str]) -> list[list[dict[str, Any]]]:
        one = [event("ahead.first", operation_key="op_test1")]
        two = [event("ahead.second", operation_key="op_test2")]
        with store.transaction() as tx:
            head, tenants = store.audit.head_first(tx, [*one, *two])
            if isinstance(store, PostgresStore):
                assert head is not None and tenants == {
                    ("operations", "op_test1"): "acme",
                    ("operations", "op_test2"): "globex",
                }
            else:
                assert (head, tenants) == (None, {})
            return store.audit.link_ahead(
                tx,
                head,
                [moved("op_test1", *first), moved("op_test2", *second)],
                [again("op_test1"), again("op_test2")],
                one,
                Written(0, "operations", "operation_key", "op_test1"),
                tenants,
                behind=[(two, Written(1, "operations", "operation_key", "op_test2"))],
            )

    before = snapshot(store)["audit_events"]
    # the first group's row not written: nothing linked, whatever the second statement did
    assert step(("approved", "executing"), ("pending_approval", "approved")) == [[], [{"operation_key": "op_test2"}]]
    assert snapshot(store)["audit_events"] == before
    # the first written, the second not: the first group only
    assert step(("pending_approval", "approved"), ("pending_approval", "approved")) == [
        [{"operation_key": "op_test1"}],
        [],
    ]
    assert [(e.event, e.tenant_id) for e in named(store, "ahead.first")] == [("ahead.first", "acme")]
    assert named(store, "ahead.second") == []
    # both written: both groups, in order, each with its row's tenant
    step(("approved", "expired"), ("approved", "expired"))
    linked = [e for e in store.audit.events() if e.event.startswith("ahead.")]
    assert [(e.event, e.tenant_id) for e in linked] == [
        ("ahead.first", "acme"),
        ("ahead.first", "acme"),
        ("ahead.second", "globex"),
    ]
    assert linked[2].prev_hash == linked[1].hash and linked[1].seq < linked[2].seq
    assert verify_chain(store).ok


def test_a_backend_that_reads_no_head_first_refuses_the_tail_calls_and_sends_nothing(store: Store) -> None:
    # SQLite reads no chain head first and every head under its lock: `_link_ahead` and
    # `_link_tail` are never its to run; a caller that asks anyway gets a store error, and the
    # transaction it asked in still commits only what it did itself
    if isinstance(store, PostgresStore):
        pytest.skip("PostgreSQL reads its head first and sends tails")
    events = len(store.audit.events())
    with store.transaction() as tx:
        assert store._head_first(tx) is None
        with pytest.raises(StoreError, match="reads no chain head first"):
            store._link_ahead(tx, [], [], Written(0, "resource_leases", "resource_key", "r"))
        with pytest.raises(StoreError, match="reads no chain head first"):
            store._wrote(tx, Written(0, "resource_leases", "resource_key", "r"))
        with pytest.raises(StoreError, match="reads no chain head first"):
            store._all_written(tx, Written(0, "operations", "operation_key", "o"), [])
        with pytest.raises(StoreError, match="reads every chain head under the lock"):
            store._link_tail(tx, lambda when: ("SELECT 1", ()), "0" * 64, [], lambda moved: None)
    assert len(store.audit.events()) == events


CONTRACT["audit.link_ahead"] = (
    test_audit_link_ahead_links_only_behind_a_row_its_statements_wrote,
    test_audit_head_first_reads_the_tenants_and_link_ahead_links_each_group_only_behind_its_row,
)
CONTRACT["audit.head_first"] = (
    test_audit_head_first_reads_the_tenants_and_link_ahead_links_each_group_only_behind_its_row,
)


def test_audit_append_ahead_appends_in_order_once_each_and_the_chain_verifies(
    store: Store, reopen: Callable[..., Store]
) -> None:
    # appended as `append_many` would (PostgreSQL links them after the head this process last
    # saw, checked under the lock): in order, each with its tenant, a keyed event the chain
    # holds already left out, whatever ran in between (another append, another process's)
    store.proposals.create(make_proposal(1, tenant_id="globex"))
    shared = KeyedEventIn(event_id="evt-ahead", event="ahead.keyed", result="recorded")
    store.audit.append_ahead([event("ahead.one"), event("ahead.two", tenant_id="acme")])
    store.audit.append_ahead([shared])
    reopen().audit.append(event("ahead.between"))  # another process links meanwhile
    store.audit.append_ahead([shared, event("ahead.three", operation_key="op_test1")])
    store.audit.append_ahead([event("ahead.four")])
    store.audit.append_ahead([])
    linked = [e for e in store.audit.events() if e.event.startswith("ahead.")]
    assert [(e.event, e.tenant_id) for e in linked] == [
        ("ahead.one", None),
        ("ahead.two", "acme"),
        ("ahead.keyed", None),
        ("ahead.between", None),
        ("ahead.three", "globex"),
        ("ahead.four", None),
    ]
    assert all(a.occurred_at <= b.occurred_at for a, b in itertools.pairwise(linked))
    assert verify_chain(store).ok


CONTRACT["audit.append_ahead"] = (test_audit_append_ahead_appends_in_order_once_each_and_the_chain_verifies,)
CONTRACT["audit.append_after"] = (test_audit_append_after_appends_what_build_makes_of_the_latest_event,)


# ---- admission slot renewal (appended: kept apart from CONTRACT's literal above) -------------


def slot_rows(store: Store) -> dict[tuple[str, int], tuple[str, str]]:
    """``(scope, slot) -> (holder, expires_at)`` of every slot row, lapsed ones included."""
    with store.transaction(write=False) as tx:
        rows = tx.execute("SELECT scope, slot, holder, expires_at FROM admission_slots")
    return {(r["scope"], int(r["slot"])): (r["holder"], r["expires_at"]) for r in rows}


def test_renew_slot_extends_only_the_holders_live_slot_from_the_store_clock(
    store: Store, monkeypatch: pytest.MonkeyPatch, reopen: Callable[..., Store]
) -> None:
    assert store.slots.take("model:acme", "h1", 2, 30) == 0
    assert store.slots.take("model:acme", "h2", 2, 30) == 1
    assert reopen().slots.renew("model:acme", 0, "h1", 30) is True  # from another process's connection
    theirs = slot_rows(store)[("model:acme", 1)]
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=20))  # within the TTL, on the store's clock
        start = store.now()
        assert store.slots.renew("model:acme", 0, "h1", 30) is True
        end = store.now()
        expires = parse_iso(slot_rows(store)[("model:acme", 0)][1])
        assert start + timedelta(seconds=30) <= expires <= end + timedelta(seconds=30)  # store-now + TTL
        assert slot_rows(store)[("model:acme", 1)] == theirs  # another holder's slot: untouched

    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=40))  # h2's slot lapsed, h1's was renewed
        assert [(r.slot, r.holder) for r in store.slots.held("model:acme")] == [(0, "h1")]
        before = snapshot(store)
        assert store.slots.renew("model:acme", 1, "h2", 30) is False  # lapsed: never revived
        assert store.slots.renew("model:acme", 0, "h2", 30) is False  # another holder's slot
        assert store.slots.renew("model:acme", 7, "h1", 30) is False  # a tampered slot number
        assert store.slots.renew("model:acme", -1, "h1", 30) is False
        assert store.slots.renew("model:beta", 0, "h1", 30) is False  # not its scope
        assert store.slots.renew("tool:acme", 0, "h1", 30) is False
        assert store.slots.renew("model:acme", 0, "h1 ", 30) is False  # not exactly its holder
        with pytest.raises(ValueError, match="positive time to live"):
            store.slots.renew("model:acme", 0, "h1", 0)
        with pytest.raises(ValueError, match="positive time to live"):
            store.slots.renew("model:acme", 0, "h1", -5)
        assert snapshot(store) == before
        assert [(r.slot, r.holder) for r in store.slots.held("model:acme")] == [(0, "h1")]

        assert store.slots.take("model:acme", "h3", 2, 30) == 1  # h2's lapsed slot is taken over
        taken = snapshot(store)
        assert store.slots.renew("model:acme", 1, "h2", 30) is False  # the late holder keeps nothing
        assert snapshot(store) == taken
        assert [(r.slot, r.holder) for r in store.slots.held("model:acme")] == [(0, "h1"), (1, "h3")]


def test_renew_slot_racing_takers_keeps_a_live_slot_and_never_revives_a_lapsed_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    racers = 12

    def race(holder: str) -> tuple[bool, list[int | None]]:
        barrier = threading.Barrier(racers + 1)

        def take(i: int) -> int | None:
            barrier.wait()
            return store.slots.take("tool:acme", f"t{i}", 1, 30)

        def renew() -> bool:
            barrier.wait()
            return store.slots.renew("tool:acme", 0, holder, 30)

        with ThreadPoolExecutor(max_workers=racers + 1) as pool:
            renewed = pool.submit(renew)
            taken = list(pool.map(take, range(racers)))
        return renewed.result(), taken

    assert store.slots.take("tool:acme", "h1", 1, 30) == 0
    renewed, taken = race("h1")  # live: the holder keeps it, no taker gets it
    assert renewed is True and taken == [None] * racers
    assert [r.holder for r in store.slots.held("tool:acme")] == ["h1"]
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=31))  # lapsed: exactly one taker, no revival
        renewed, taken = race("h1")
        assert renewed is False
        assert sorted(taken, key=repr) == [0] + [None] * (racers - 1)
        [row] = store.slots.held("tool:acme")
        assert row.holder == f"t{taken.index(0)}"


def test_a_read_only_store_refuses_renew_slot(store: Store, reopen: Callable[..., Store]) -> None:
    assert store.slots.take("model:acme", "h1", 1, 30) == 0
    before = snapshot(store)
    with pytest.raises(StoreError, match="read-only"):
        reopen(read_only=True).slots.renew("model:acme", 0, "h1", 30)
    assert snapshot(store) == before


CONTRACT["slots.renew"] = (
    test_renew_slot_extends_only_the_holders_live_slot_from_the_store_clock,
    test_renew_slot_racing_takers_keeps_a_live_slot_and_never_revives_a_lapsed_one,
    test_a_read_only_store_refuses_renew_slot,
)


def test_first_audit_event_finds_the_earliest_match_of_one_operation_and_reads_nothing_else(
    store: Store,
) -> None:
    assert store.audit.first("op_1", "delivery.refused") is None
    other = event("delivery.refused", operation_key="op_2", code="proposal_missing", tool_release="r/1")
    first = event("delivery.refused", operation_key="op_1", code="proposal_missing", tool_release="r/1")
    store.audit.append_many([other, event("delivery.refused", proposal_id="prop_1", code="proposal_missing")])
    found = store.audit.append(first)
    again = store.audit.append(first)
    by_r2 = store.audit.append(dataclasses.replace(first, tool_release="r/2"))
    other_code = store.audit.append(dataclasses.replace(first, code="tool_not_in_release"))
    store.audit.append(dataclasses.replace(first, event="operation.refused"))
    before = snapshot(store)

    assert store.audit.first("op_1", "delivery.refused") == found  # chain order: the earliest
    assert store.audit.first("op_1", "delivery.refused", code="proposal_missing") == found
    assert store.audit.first("op_1", "delivery.refused", tool_release="r/2") == by_r2
    assert store.audit.first("op_1", "delivery.refused", code="tool_not_in_release") == other_code
    assert (
        store.audit.first("op_1", "delivery.refused", code="tool_not_in_release", tool_release="r/2")
        is None
    )
    assert store.audit.first("op_1", "delivery.refused", code="approval_invalid") is None
    assert store.audit.first("op_9", "delivery.refused") is None  # another operation's events
    assert store.audit.first("op_1", "delivery.deferred") is None
    assert found != again and found.detail == {} and found.payload_retained
    assert snapshot(store) == before  # a read: no row changed


CONTRACT["audit.first"] = (
    test_first_audit_event_finds_the_earliest_match_of_one_operation_and_reads_nothing_else,
)


# ---- proposal MACs (appended: kept apart from CONTRACT's literal above) -----------------------


def _insert_proposal_row(store: Store, proposal: ProposalRecord, mac: str | None) -> None:
    """A proposal row and its operation inserted with database access alone (``mac``: a copied
    one, or None as on a row from before proposals carried one)."""
    row = {
        **{k: v for k, v in dataclasses.asdict(proposal).items() if k not in ("authentic", "editors")},
        "arguments": json.dumps(proposal.arguments),
        "mac": mac,
    }
    with store.transaction() as tx:
        tx.execute(
            f"INSERT INTO proposals ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
            tuple(row.values()),
        )
        tx.execute(
            "INSERT INTO operations (operation_key, proposal_id, tool, tenant_id, status, attempts,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, 'pending_approval', 0, ?, ?)",
            (proposal.operation_key, proposal.proposal_id, proposal.tool, proposal.tenant_id)
            + (proposal.created_at,) * 2,
        )


def test_every_proposal_read_marks_whether_the_rows_mac_verifies(store: Store) -> None:
    start = utcnow()
    first, _, created = store.proposals.create(make_proposal(1, created_at=iso(start)))
    assert created and first.authentic
    edit = make_proposal(2, supersedes="prop_test1", created_at=iso(start + timedelta(seconds=1)))
    second, _, _ = store.proposals.create(edit)
    assert second.authentic
    got = store.proposals.get("prop_test1")
    assert got is not None and got.authentic and got == first
    assert [(p.proposal_id, p.authentic) for p, _ in store.proposals.list()] == [
        ("prop_test1", True),
        ("prop_test2", True),
    ]
    with store.transaction(write=False) as tx:
        copied = tx.one("SELECT mac FROM proposals WHERE proposal_id = ?", ("prop_test2",))
    assert copied is not None and copied["mac"]

    # a newer "edit" of prop_test1 with prop_test2's MAC copied, and one with no MAC at all
    _insert_proposal_row(
        store,
        make_proposal(3, supersedes="prop_test1", created_at=iso(start + timedelta(seconds=2))),
        copied["mac"],
    )
    _insert_proposal_row(store, make_proposal(4, created_at=iso(start + timedelta(seconds=3))), None)
    assert [(p.proposal_id, p.authentic) for p, _ in store.proposals.list("pending_approval")] == [
        ("prop_test1", True),
        ("prop_test2", True),
        ("prop_test3", False),
        ("prop_test4", False),
    ]
    for pid, authentic in (("prop_test2", True), ("prop_test3", False), ("prop_test4", False)):
        found = store.proposals.get(pid)
        assert found is not None and found.authentic is authentic
    newest = store.proposals.superseding("prop_test1")
    assert newest is not None and newest.proposal_id == "prop_test3" and not newest.authentic
    assert [(p.proposal_id, p.authentic) for p, _ in store.proposals.same_effect(first)] == [
        ("prop_test2", True),
        ("prop_test3", False),
        ("prop_test4", False),
    ]
    assert [(p.proposal_id, p.authentic) for p, _ in store.proposals.for_tool("issue_refund", "acme")] == [
        ("prop_test4", False),
        ("prop_test3", False),
        ("prop_test2", True),
        ("prop_test1", True),
    ]
    # a repeat of the forged row's key returns the stored row, still marked, and inserts nothing
    again, _, created_again = store.proposals.create(make_proposal(4))
    assert not created_again and again.proposal_id == "prop_test4" and not again.authentic


for _method in ("proposals.create", "proposals.get", "proposals.list", "proposals.same_effect", "proposals.superseding"):
    CONTRACT[_method] = (*CONTRACT[_method], test_every_proposal_read_marks_whether_the_rows_mac_verifies)

# ---- the same tool's proposals, and the requester's words (issue 28) ----------------------------


def test_for_tool_lists_the_tenants_newest_proposals_of_one_tool_with_their_operations(store: Store) -> None:
    start = utcnow()
    for n, seconds in ((1, 0), (2, 2), (3, 1)):  # inserted out of time order
        store.proposals.create(make_proposal(n, created_at=iso(start + timedelta(seconds=seconds))))
    store.proposals.create(make_proposal(4, tool="restart_service", created_at=iso(start)))
    store.proposals.create(make_proposal(5, tenant_id="globex", created_at=iso(start)))
    approve_row(store, "op_test3")
    listed = store.proposals.for_tool("issue_refund", "acme")
    assert [(p.proposal_id, o.operation_key, o.status, p.authentic) for p, o in listed] == [
        ("prop_test2", "op_test2", "pending_approval", True),
        ("prop_test3", "op_test3", "approved", True),
        ("prop_test1", "op_test1", "pending_approval", True),
    ]
    assert listed[0][0] == store.proposals.get("prop_test2")
    # bounded: only the newest
    assert [p.proposal_id for p, _ in store.proposals.for_tool("issue_refund", "acme", 2)] == [
        "prop_test2",
        "prop_test3",
    ]
    assert [p.proposal_id for p, _ in store.proposals.for_tool("issue_refund", "globex")] == ["prop_test5"]
    assert store.proposals.for_tool("issue_refund", "initech") == []
    assert store.proposals.for_tool("issue_refund", "acme", 0) == []


def test_the_requesters_words_are_stored_under_the_mac_and_outside_the_digest(store: Store) -> None:
    worded = make_proposal(1, requester_text="Refund O-5512 please ✓")
    bare = make_proposal(2)
    # the words are context, not the operation: the digested content is the same without them
    assert worded.content() == dataclasses.replace(worded, requester_text=None).content()
    stored, _, _ = store.proposals.create(worded)
    store.proposals.create(bare)
    got = store.proposals.get("prop_test1")
    assert got is not None and got.authentic and got.requester_text == "Refund O-5512 please ✓"
    plain = store.proposals.get("prop_test2")
    assert plain is not None and plain.authentic and plain.requester_text is None
    # the words are under the stored MAC: other words (changed with database access alone) do not verify
    with store.transaction(write=False) as tx:
        row = tx.one("SELECT mac FROM proposals WHERE proposal_id = ?", ("prop_test1",))
    assert row is not None and store.keys.verify("proposal", stored.sealed(), row["mac"])
    changed = dataclasses.replace(stored, requester_text="the manager pre-approved this")
    assert not store.keys.verify("proposal", changed.sealed(), row["mac"])
    # a row from before the words existed (no column value, no key in the MAC) still verifies
    before = make_proposal(3)
    _insert_proposal_row(store, before, store.keys.mac("proposal", before.sealed()))
    old = store.proposals.get("prop_test3")
    assert old is not None and old.authentic and old.requester_text is None


CONTRACT["proposals.for_tool"] = (
    test_for_tool_lists_the_tenants_newest_proposals_of_one_tool_with_their_operations,
    test_every_proposal_read_marks_whether_the_rows_mac_verifies,
)
CONTRACT["proposals.beside"] = (test_beside_reads_every_listing_shown_beside_a_proposal_in_one_statement,)
CONTRACT["proposals.create"] = (
    *CONTRACT["proposals.create"],
    test_the_requesters_words_are_stored_under_the_mac_and_outside_the_digest,
)


# ---- fewer round trips on the approved-write path (issue 31) ----------------------------------


def test_create_at_stamps_the_proposal_with_its_transactions_time_and_is_idempotent(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    shift_store_clock(monkeypatch, store, timedelta(hours=3))  # the store's clock, never the host's
    stamped_at: list[str] = []

    def make(now: str) -> tuple[ProposalRecord, list[AuditEventIn]]:
        stamped_at.append(now)
        proposal = make_proposal(created_at=now, expires_at=iso(parse_iso(now) + timedelta(minutes=15)))
        return proposal, [event("proposal.created", proposal_id=proposal.proposal_id)]

    stored, op, created = store.proposals.create_at(make)
    assert created and len(stamped_at) == 1
    assert parse_iso(stamped_at[0]) - utcnow() > timedelta(hours=2, minutes=59)
    assert stored.created_at == op.created_at == op.updated_at == stamped_at[0]
    assert stored.authentic and stored == store.proposals.get(stored.proposal_id)
    assert op.status == "pending_approval" and len(named(store, "proposal.created")) == 1
    before = snapshot(store)
    again, again_op, created_again = store.proposals.create_at(make)  # same key: the stored rows
    assert not created_again and again == stored and again_op == op
    assert snapshot(store) == before  # nothing inserted, no event appended


CONTRACT["proposals.create_at"] = (test_create_at_stamps_the_proposal_with_its_transactions_time_and_is_idempotent,)


def test_get_many_identities_reads_the_rows_that_exist_marked_as_get_marks_them(store: Store) -> None:
    assert store.identities.get_many([]) == {} and store.identities.get_many(["ada"]) == {}
    store.identities.add(make_identity("ada"))
    store.identities.add(make_identity("bob", tenant_id="globex"))
    with store.transaction() as tx:  # a row changed with database access alone no longer verifies
        tx.execute("UPDATE identities SET scopes = ? WHERE user_id = ?", ('["refunds:write"]', "bob"))
    found = store.identities.get_many(["bob", "ada", "eve", "ada"])
    assert found == {"ada": store.identities.get("ada"), "bob": store.identities.get("bob")}
    assert found["ada"].authentic and not found["bob"].authentic and found["bob"].tenant_id == "globex"


CONTRACT["identities.get_many"] = (test_get_many_identities_reads_the_rows_that_exist_marked_as_get_marks_them,)


def test_claim_takes_its_resource_leases_in_its_transaction_or_is_rolled_back_with_them(store: Store) -> None:
    store.proposals.create(make_proposal())
    approve_row(store)
    assert store.leases.acquire(["k2"], "other", 30)
    before = snapshot(store)
    with pytest.raises(ResourcesBusy):  # k2 is another holder's: the claim is undone with k1
        store.operations.claim(
            "op_test1", "w1", 30, audit=[event("operation.claimed")], resources=(["k2", "k1"], "h1")
        )
    assert snapshot(store) == before
    op = store.operations.get("op_test1")
    assert op is not None and (op.status, op.attempts, op.owner) == ("approved", 0, None)
    store.leases.release(["k2"], "other")
    claimed = store.operations.claim(
        "op_test1", "w1", 30, audit=[event("operation.claimed")], resources=(["k2", "k1"], "h1")
    )
    assert claimed is not None and (claimed.status, claimed.owner, claimed.attempts) == ("executing", "w1", 1)
    with store.transaction(write=False) as tx:
        leases = tx.execute("SELECT * FROM resource_leases ORDER BY resource_key")
    assert [(r["resource_key"], r["holder"]) for r in leases] == [("k1", "h1"), ("k2", "h1")]
    assert {r["expires_at"] for r in leases} == {claimed.lease_expires_at}  # the claim's own lease
    assert len(named(store, "operation.claimed")) == 1
    before = snapshot(store)
    # a lost claim takes nothing, even resources that are free
    assert store.operations.claim("op_test1", "w2", 30, resources=(["k3"], "h2")) is None
    assert snapshot(store) == before


CONTRACT["operations.claim"] = (
    *CONTRACT["operations.claim"],
    test_claim_takes_its_resource_leases_in_its_transaction_or_is_rolled_back_with_them,
)


def test_claim_takes_leases_only_behind_the_claim_that_won_and_a_same_owner_race_takes_none(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the claim and its leases are one script (`Tx.many`): each lease is taken only while the
    # claim in front of it holds the row; the same owner claiming again at the same instant finds
    # its own winning claim's row as the condition describes it, so what it took is rolled back
    store.proposals.create(make_proposal())
    approve_row(store)
    instant = iso(store.now())
    monkeypatch.setattr(store, "_tx_now", lambda tx: instant)  # both claims at one instant
    claimed = store.operations.claim(
        "op_test1", "w1", 30, audit=[event("operation.claimed")], resources=(["k1"], "h1")
    )
    assert claimed is not None and (claimed.owner, claimed.updated_at, claimed.attempts) == ("w1", instant, 1)
    before = snapshot(store)
    lost = store.operations.claim(
        "op_test1", "w1", 30, audit=[event("operation.claimed")], resources=(["k1", "k9"], "h1")
    )
    assert lost is None
    assert snapshot(store) == before  # k9 (free) not taken, no event, attempts still 1
    with store.transaction(write=False) as tx:
        leases = tx.execute("SELECT resource_key, holder FROM resource_leases ORDER BY resource_key")
    assert leases == [{"resource_key": "k1", "holder": "h1"}]
    assert len(named(store, "operation.claimed")) == 1
    # a claim of an operation that is not approved takes none of its (free) resources
    store.proposals.create(make_proposal(2))
    before = snapshot(store)
    assert store.operations.claim("op_test2", "w2", 30, resources=(["k5", "k6"], "h2")) is None
    assert snapshot(store) == before


CONTRACT["operations.claim"] = (
    *CONTRACT["operations.claim"],
    test_claim_takes_leases_only_behind_the_claim_that_won_and_a_same_owner_race_takes_none,
)


def test_record_and_settle_sent_again_settles_nothing_and_writes_nothing(store: Store) -> None:
    # the decision's INSERT and its settlement are one script: the settlement runs only behind a
    # decision on record, so the very decision sent again (on record already, the operation still
    # in from_status) would settle: its transaction is rolled back instead
    proposal, _, _ = store.proposals.create(make_proposal(1))
    decision = make_approval(proposal)
    assert store.approvals.record(decision, audit=[event("approval.recorded", operation_key="op_test1")])
    settle = Settlement(
        operation_key="op_test1",
        from_status="pending_approval",
        to_status="approved",
        audit=[event("operation.approved", operation_key="op_test1")],
    )
    before = snapshot(store)
    assert store.approvals.record_and_settle(
        decision, audit=[event("approval.recorded", operation_key="op_test1")], settle=settle
    ) == (False, None)
    assert snapshot(store) == before
    op = store.operations.get("op_test1")
    assert op is not None and op.status == "pending_approval"
    assert named(store, "operation.approved") == [] and len(named(store, "approval.recorded")) == 1
    # a rejection settles to rejected in the same script; the settlement's events only then
    reject = Settlement(
        operation_key="op_test1",
        from_status="pending_approval",
        to_status="rejected",
        audit=[event("operation.rejected", operation_key="op_test1")],
    )
    recorded, settled = store.approvals.record_and_settle(
        make_approval(proposal, reviewer="rita", decision="reject"), settle=reject
    )
    assert recorded and settled is not None and settled == store.operations.get("op_test1")
    assert settled.status == "rejected" and len(named(store, "operation.rejected")) == 1


CONTRACT["approvals.record_and_settle"] = (
    *CONTRACT["approvals.record_and_settle"],
    test_record_and_settle_sent_again_settles_nothing_and_writes_nothing,
)


def test_create_proposal_sent_again_or_under_a_key_another_operation_holds_writes_nothing(store: Store) -> None:
    # the proposal and its operation are one script: the operation's INSERT runs only behind a
    # proposal stored under its id with its MAC
    proposal = make_proposal()
    store.proposals.create(proposal, audit=[event("proposal.created", proposal_id="prop_test1")])
    before = snapshot(store)
    stored, op, created = store.proposals.create(proposal, audit=[event("proposal.created")])
    assert not created and stored == proposal and op == store.operations.get("op_test1")
    assert snapshot(store) == before  # the same proposal again: nothing written, no event
    # an operation row under the key without a proposal (written by another path): refused whole
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO operations (operation_key, proposal_id, tool, tenant_id, status, attempts,"
            " created_at, updated_at) VALUES ('op_test2', NULL, 'issue_refund', 'acme', 'approved', 0, ?, ?)",
            (proposal.created_at, proposal.created_at),
        )
    before = snapshot(store)
    with pytest.raises(StoreError, match="op_test2"):
        store.proposals.create(make_proposal(2), audit=[event("proposal.created", proposal_id="prop_test2")])
    assert snapshot(store) == before and store.proposals.get("prop_test2") is None


CONTRACT["proposals.create"] = (
    *CONTRACT["proposals.create"],
    test_create_proposal_sent_again_or_under_a_key_another_operation_holds_writes_nothing,
)


def test_record_and_settle_stamps_a_decision_with_its_transactions_time_and_refuses_past_the_expiry(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    proposal, _, _ = store.proposals.create(make_proposal(1))  # expires 15 minutes from now
    shift_store_clock(monkeypatch, store, timedelta(minutes=16))  # the store's clock, not the host's
    before = snapshot(store)
    with pytest.raises(ApprovalError) as late:
        store.approvals.record_and_settle(
            lambda now: make_approval(proposal, decided_at=now),
            audit=[event("approval.recorded", operation_key="op_test1")],
            expires_at=proposal.expires_at,
        )
    assert late.value.code == "expired" and snapshot(store) == before  # nothing written
    monkeypatch.undo()
    shift_store_clock(monkeypatch, store, timedelta(minutes=14))
    seen: list[str] = []

    def at(now: str) -> ApprovalRecord:
        seen.append(now)
        return make_approval(proposal, decided_at=now)

    recorded, settled = store.approvals.record_and_settle(
        at,
        settle=Settlement(operation_key="op_test1", from_status="pending_approval", to_status="approved"),
        expires_at=proposal.expires_at,
    )
    assert recorded and settled is not None and settled.updated_at == seen[0]  # one time for both
    assert parse_iso(proposal.expires_at) - parse_iso(seen[0]) < timedelta(minutes=1, seconds=30)
    (stored,) = store.approvals.for_proposal(proposal.proposal_id)
    assert stored.decided_at == seen[0] and stored.authentic  # the MAC covers the stamped time


CONTRACT["approvals.record_and_settle"] = (
    *CONTRACT["approvals.record_and_settle"],
    test_record_and_settle_stamps_a_decision_with_its_transactions_time_and_refuses_past_the_expiry,
)


# ---- guard snapshots: a decision's and a claim's rows in one statement (issue 31) ---------------


def _statements(store: Store) -> list[str]:
    """The statements every later transaction of ``store`` sends (answered or queued), in order."""
    sent: list[str] = []
    real = store.transaction

    @contextlib.contextmanager
    def counted(*, write: bool = True) -> Iterator[Any]:
        with real(write=write) as tx:
            execute, send = tx.execute, tx.send
            tx.execute = lambda sql, params=(): sent.append(sql) or execute(sql, params)  # type: ignore[method-assign]
            tx.send = lambda sql, params=(): sent.append(sql) or send(sql, params)  # type: ignore[method-assign]
            yield tx

    store.transaction = counted  # type: ignore[method-assign]
    return sent


def _guarded_rows(store: Store) -> tuple[ProposalRecord, ProposalRecord]:
    """prop_test1 (rejected, two decisions: fiona's and mallory's forged one) and its edit
    prop_test2 (pending), requested by cust-ada; identities cust-ada, fiona, gina (revoked), rita
    and mallory."""
    original, _, _ = store.proposals.create(make_proposal(1))
    edit, _, _ = store.proposals.create(make_proposal(2, supersedes="prop_test1"))
    for user in ("cust-ada", "fiona", "gina", "rita", "mallory"):
        store.identities.add(make_identity(user))
    store.identities.change("gina", status="revoked")
    assert store.approvals.record(make_approval(original, reviewer="fiona", decision="reject"))
    _forge_decision(store, original, "apr_forged", iso(utcnow()))  # mallory's, with database access alone
    store.operations.transition("op_test1", "pending_approval", "rejected")
    return original, edit


def test_a_decisions_snapshot_holds_each_aggregates_rows_read_in_one_statement(store: Store) -> None:
    assert store.snapshots.for_decision("prop_none", people=["rita"]) == GuardSnapshot()
    original, edit = _guarded_rows(store)
    sent = _statements(store)
    found = store.snapshots.for_decision("prop_test1", people=["rita", "gina", "eve"])
    assert len(sent) == 1 and sent[0].lstrip().upper().startswith("WITH")  # one statement, a read
    assert found.proposal == store.proposals.get("prop_test1") == original and original.authentic
    assert found.operation == store.operations.get("op_test1") and found.operation.status == "rejected"
    assert found.superseding == store.proposals.superseding("prop_test1") == edit
    assert found.replaced_status is None  # prop_test1 supersedes nothing
    assert found.decisions == store.approvals.for_proposal("prop_test1")
    assert [(d.reviewer_id, d.authentic) for d in found.decisions] == [("fiona", True), ("mallory", False)]
    # the requester, every decision's reviewer and the people asked for (eve does not exist)
    assert found.identities == store.identities.get_many(["cust-ada", "fiona", "mallory", "gina", "rita"])
    assert found.identities["gina"].status == "revoked" and found.identities["rita"].authentic
    assert found.identities["gina"] == store.identities.get("gina")
    replacing = store.snapshots.for_decision("prop_test2")
    assert replacing.proposal == edit and replacing.replaced_status == "rejected"
    assert replacing.superseding is None and replacing.decisions == []
    assert set(replacing.identities) == {"cust-ada"}  # the requester alone: nobody decided yet


def test_a_claims_snapshot_holds_the_operation_its_decisions_and_their_people_in_one_statement(
    store: Store,
) -> None:
    assert store.snapshots.for_claim("op_none") == GuardSnapshot()
    _guarded_rows(store)
    with store.transaction() as tx:  # an identity changed with database access alone: not authentic
        tx.execute("UPDATE identities SET roles = ? WHERE user_id = ?", ('["admin"]', "fiona"))
    sent = _statements(store)
    found = store.snapshots.for_claim("op_test1", people=["gina"])
    assert len(sent) == 1
    assert found.proposal is None  # immutable: the delivery holds it already
    assert found.operation == store.operations.get("op_test1")
    assert found.decisions == store.approvals.for_proposal("prop_test1")
    assert found.identities == store.identities.get_many(["cust-ada", "fiona", "mallory", "gina"])
    assert not found.identities["fiona"].authentic and found.identities["gina"].status == "revoked"
    other = store.snapshots.for_claim("op_test2")
    assert other.operation is not None and other.operation.proposal_id == "prop_test2"
    assert other.decisions == [] and set(other.identities) == {"cust-ada"}


CONTRACT["snapshots.for_decision"] = (test_a_decisions_snapshot_holds_each_aggregates_rows_read_in_one_statement,)
CONTRACT["snapshots.for_claim"] = (
    test_a_claims_snapshot_holds_the_operation_its_decisions_and_their_people_in_one_statement,
)


def _clock_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each `Store.now` meanwhile: PostgreSQL's read of its clock in a round trip of its own
    (patched on the class: the store's clock is not replaced by it; SQLite's own `now` is the
    host's clock and costs none)."""
    seen: list[str] = []
    real = Store.now

    def counted(self: Store) -> Any:
        seen.append("now")
        return real(self)

    monkeypatch.setattr(Store, "now", counted)
    return seen


def test_get_at_reads_the_operation_and_the_stores_time_in_one_statement(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operation as `get` reads it (None when there is none) and the store's time: on
    PostgreSQL a column of the same statement, on SQLite the host's clock (no statement); a clock
    put in front of the store's is the one asked."""
    store.proposals.create(make_proposal(1))
    approve_row(store, "op_test1")
    sent = _statements(store)
    before = store.now()
    clock_reads = _clock_reads(monkeypatch)
    found, now = store.operations.get_at("op_test1")
    missing, later_now = store.operations.get_at("op_missing")
    monkeypatch.undo()
    after = store.now()
    assert clock_reads == []  # no read of the clock alone (PostgreSQL's `Store.now`)
    assert found == store.operations.get("op_test1") and found is not None and found.status == "approved"
    assert missing is None
    assert before <= now <= later_now <= after
    assert len([sql for sql in sent if "operations" in sql]) == 3  # each get_at and the get: one each
    shift_store_clock(monkeypatch, store, timedelta(hours=2))
    _, shifted = store.operations.get_at("op_test1")
    assert shifted - after > timedelta(hours=1)


def test_a_claims_snapshot_asked_for_the_clock_brings_the_stores_time_in_its_one_statement(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _guarded_rows(store)
    assert store.snapshots.for_claim("op_test1").now is None  # not asked for
    sent = _statements(store)
    before = store.now()
    clock_reads = _clock_reads(monkeypatch)
    found = store.snapshots.for_claim("op_test1", clock=True)
    monkeypatch.undo()
    assert clock_reads == []  # no read of the clock alone (PostgreSQL's `Store.now`)
    assert len([sql for sql in sent if sql.startswith("WITH")]) == 1
    assert found.now is not None and before <= found.now <= store.now()
    assert found.operation == store.operations.get("op_test1")
    shift_store_clock(monkeypatch, store, timedelta(hours=2))
    shifted = store.snapshots.for_claim("op_test1", clock=True).now
    assert shifted is not None and shifted - before > timedelta(hours=1)


CONTRACT["operations.get_at"] = (test_get_at_reads_the_operation_and_the_stores_time_in_one_statement,)
CONTRACT["snapshots.for_claim"] = (
    *CONTRACT["snapshots.for_claim"],
    test_a_claims_snapshot_asked_for_the_clock_brings_the_stores_time_in_its_one_statement,
)
