"""One contract, run against both backends (SQLite and a real PostgreSQL server)."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from toolgate.canonical import digest
from toolgate.clock import iso, utcnow
from toolgate.errors import InvalidTransitionError, StoreError
from toolgate.store import ApprovalRecord, AuditEventIn, ProposalRecord, Store
from toolgate.store.chain import GENESIS_HASH, audit_hash, audit_row_content


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


def approve_row(store: Store, key: str = "op_test1") -> None:
    store.transition(key, "pending_approval", "approved")


def test_setup_is_idempotent(store: Store) -> None:
    assert store.migrate("toolgate", __import__("toolgate.store", fromlist=["MIGRATIONS"]).MIGRATIONS) == 0


def test_create_proposal_is_idempotent_by_operation_key(store: Store) -> None:
    first, op, created = store.create_proposal(make_proposal())
    again, op2, created2 = store.create_proposal(make_proposal())
    assert created and not created2
    assert first == again and op.status == op2.status == "pending_approval"
    assert len(store.list_proposals()) == 1


def test_database_refuses_to_update_or_delete_a_proposal(store: Store) -> None:
    store.create_proposal(make_proposal())
    with pytest.raises(StoreError, match="immutable"), store.transaction() as tx:
        tx.execute(
            "UPDATE proposals SET arguments = ? WHERE proposal_id = ?",
            ('{"amount_cents":99999}', "prop_test1"),
        )
    with pytest.raises(StoreError, match="immutable"), store.transaction() as tx:
        tx.execute("DELETE FROM proposals WHERE proposal_id = ?", ("prop_test1",))
    stored = store.get_proposal("prop_test1")
    assert stored is not None and stored.arguments["amount_cents"] == 100


def test_database_refuses_illegal_operation_transitions(store: Store) -> None:
    store.create_proposal(make_proposal())
    with pytest.raises(StoreError, match="invalid operation transition"), store.transaction() as tx:
        tx.execute("UPDATE operations SET status = 'succeeded' WHERE operation_key = ?", ("op_test1",))
    with pytest.raises(InvalidTransitionError):
        store.transition("op_test1", "approved", "executing")
    op = store.get_operation("op_test1")
    assert op is not None and op.status == "pending_approval"


def test_claim_only_from_approved_and_only_once(store: Store) -> None:
    store.create_proposal(make_proposal())
    assert store.claim("op_test1", "w1", 30) is None
    approve_row(store)
    claimed = store.claim("op_test1", "w1", 30)
    assert (
        claimed is not None
        and claimed.status == "executing"
        and claimed.owner == "w1"
        and claimed.attempts == 1
    )
    assert store.claim("op_test1", "w2", 30) is None
    with pytest.raises(InvalidTransitionError):
        store.transition("op_test1", "executing", "succeeded", owner="w2", result={"x": 1})
    done = store.transition("op_test1", "executing", "succeeded", owner="w1", result={"x": 1})
    assert done.result == {"x": 1}


def test_twenty_concurrent_claims_have_exactly_one_winner(store: Store) -> None:
    store.create_proposal(make_proposal())
    approve_row(store)
    barrier = threading.Barrier(20)

    def contend(i: int) -> bool:
        barrier.wait()
        return store.claim("op_test1", f"worker-{i}", 30) is not None

    with ThreadPoolExecutor(max_workers=20) as pool:
        wins = list(pool.map(contend, range(20)))
    assert wins.count(True) == 1
    op = store.get_operation("op_test1")
    assert op is not None and op.attempts == 1


def test_one_decision_per_reviewer_and_decisions_are_immutable(store: Store) -> None:
    proposal, _, _ = store.create_proposal(make_proposal())
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
    assert store.record_decision(record)
    assert not store.record_decision(dataclasses.replace(record, approval_id="apr_2", decision="reject"))
    with pytest.raises(StoreError, match="immutable"), store.transaction() as tx:
        tx.execute("UPDATE approvals SET decision = 'reject'")
    decisions = store.decisions_for(proposal.proposal_id)
    assert [(d.decision, d.authentic) for d in decisions] == [("approve", True)]


def test_audit_log_is_append_only_and_hash_chained(store: Store) -> None:
    first = store.append_audit(
        AuditEventIn(
            event="call.rejected", result="rejected", code="unknown_tool", call_id="c1", detail={"n": 1}
        )
    )
    second = store.append_audit(
        AuditEventIn(event="proposal.created", result="pending_approval", call_id="c2")
    )
    assert first.prev_hash == GENESIS_HASH and second.prev_hash == first.hash
    for event in (first, second):
        row = dataclasses.asdict(event)
        assert (
            audit_hash(audit_row_content(row), event.prev_hash, store.keys.key("audit-chain")) == event.hash
        )
    with pytest.raises(StoreError), store.transaction() as tx:
        tx.execute("UPDATE audit_events SET result = 'accepted' WHERE seq = ?", (first.seq,))
    with pytest.raises(StoreError), store.transaction() as tx:
        tx.execute("DELETE FROM audit_events")
    assert [e.code for e in store.audit_events(call_ids=["c1"])] == ["unknown_tool"]
    assert len(store.audit_events()) == 2


def test_concurrent_audit_appends_keep_one_chain(store: Store) -> None:
    def append(i: int) -> None:
        store.append_audit(AuditEventIn(event="call.accepted", result="allowed", call_id=f"c{i}"))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(append, range(40)))
    events = store.audit_events()
    assert len(events) == 40
    assert events[0].prev_hash == GENESIS_HASH
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(events))


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
    assert store.count_hits(hits) is None
    assert transactions == [True]  # both limits, one commit
    assert store.count_hits(hits) == 1  # the tenant window is full
    assert store.count_hits(hits) == 0  # the principal window is full: the tenant's is not counted
    monkeypatch.setattr(store, "transaction", real)
    assert store.counter_value("pt:acme:ada:tool", window) == 3
    assert store.counter_value("t:acme", window) == 2
