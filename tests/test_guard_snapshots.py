"""The guards before a decision and before a claim judge rows read in one statement
(`toolgate.store.snapshots`, issue 31): each guard folded into that read still refuses, on both
backends, and the read is one statement.

`decide` reads the proposal, its operation, its replacement, the status of the operation it
replaces, its decisions and the reviewer's identity together; a delivery reads the decisions and
the identities of their reviewers and of the requester together right before its claim. Reads
folded with the store's time (the execute node's operation read, a worker's claim snapshot) still
let the claim refuse what changed right after them, where the clock used to be read."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from langgraph.types import Command
from support import REFUND_REQUEST, Harness, audit_events, principal, shift_store_clock, start

from toolgate.errors import ApprovalError
from toolgate.graph.context import Context
from toolgate.graph.review import edits
from toolgate.graph.review.decisions import decide
from toolgate.store import PostgresStore, Store
from toolgate.store import postgres as store_postgres
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 1000, "reason": "damaged"}


def _pending(harness: Harness, thread: str) -> dict[str, Any]:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    result = start(harness.graph(model), REFUND_REQUEST, "cust-ada", thread)
    return result["__interrupt__"][0].value["toolgate"]["proposals"][0]  # type: ignore[no-any-return]


GUARDED = ("proposals", "operations", "approvals", "identities")
"""The tables whose rows the guards judge."""


@contextlib.contextmanager
def _read_only(
    store: Store, monkeypatch: pytest.MonkeyPatch, keep: Callable[[str, Any], Any | None]
) -> Iterator[list[Any]]:
    """What ``keep`` makes of each statement (with its parameters) of a read-only transaction of
    ``store`` meanwhile, where it makes anything (None: not kept)."""
    seen: list[Any] = []
    real = store.transaction

    @contextlib.contextmanager
    def watched(*, write: bool = True) -> Iterator[Any]:
        with real(write=write) as tx:
            if not write:
                execute = tx.execute

                def kept(sql: str, params: Any = ()) -> Any:
                    if (item := keep(sql, params)) is not None:
                        seen.append(item)
                    return execute(sql, params)

                tx.execute = kept
            yield tx

    with monkeypatch.context() as m:
        m.setattr(store, "transaction", watched)
        yield seen


@contextlib.contextmanager
def _reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The first word of every statement of a read-only transaction of ``store`` meanwhile that
    reads a table the guards judge (the store's clock and the proposal cache's own read of an
    immutable proposal, say, are not of them)."""
    store.snapshots.for_claim("warm-up")  # SQLite names the tables' columns once per store

    def guarded(sql: str, params: Any) -> str | None:
        if sql.startswith("WITH") or any(f"FROM {t}" in sql for t in GUARDED[1:]):
            return sql.split()[0]
        return None

    with _read_only(store, monkeypatch, guarded) as seen:
        yield seen


def _status(harness: Harness, key: str) -> str:
    op = harness.store.operations.get(key)
    assert op is not None
    return op.status


def _refused(gw: Any, proposal: dict[str, Any], who: str) -> str:
    with pytest.raises(ApprovalError) as refused:
        decide(gw, proposal["proposal_id"], principal(who), "approve")
    return refused.value.code


def test_decide_refuses_a_reviewer_revoked_after_signing_in(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fiona was authenticated at the door; her identity is revoked before her decision is
    recorded. The identity read with the proposal says so: refused, nothing recorded."""
    proposal = _pending(harness, "t-revoked-reviewer")
    gw = harness.gateway()
    harness.store.identities.change("fiona", status="revoked")
    with _reads(harness.store, monkeypatch) as reads:
        assert _refused(gw, proposal, "fiona") == "reviewer_inactive"
    assert reads == ["WITH"]  # the snapshot alone; the refusal's audit is a write
    assert harness.store.approvals.for_proposal(proposal["proposal_id"]) == []
    assert _status(harness, proposal["operation_key"]) == "pending_approval"
    assert [e.code for e in audit_events(harness.store, "approval.refused")] == ["reviewer_inactive"]


def test_decide_refuses_a_superseded_proposal_and_an_edit_beside_its_open_original(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit stored its replacement but never rejected the original: approving the original is
    ``superseded`` (the replacement read with it), approving the edit ``original_not_rejected``
    (the original's operation read with it)."""
    original = _pending(harness, "t-superseded")
    gw = harness.gateway()
    with monkeypatch.context() as m:
        m.setattr(edits, "decide", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("crash")))
        with pytest.raises(RuntimeError):
            edits.edit_proposal(
                gw,
                original["proposal_id"],
                principal("rita"),
                tool="issue_refund",
                arguments={**REFUND, "amount_cents": 700},
            )
    edited = harness.store.proposals.superseding(original["proposal_id"])
    assert edited is not None
    with _reads(harness.store, monkeypatch) as reads:
        assert _refused(gw, original, "fiona") == "superseded"
        assert _refused(gw, {"proposal_id": edited.proposal_id}, "fiona") == "original_not_rejected"
    assert reads == ["WITH", "WITH"]
    assert (
        _status(harness, original["operation_key"])
        == _status(harness, edited.operation_key)
        == "pending_approval"
    )
    assert [e.code for e in audit_events(harness.store, "approval.refused")] == [
        "superseded",
        "original_not_rejected",
    ]
    assert harness.handler_calls["issue_refund"] == 0


def test_decide_refuses_an_expired_proposal_by_the_stores_skewed_clock(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's clock is 16 minutes on (the proposal expires after 15): the decision's own
    transaction judges the expiry, refuses it, and the operation is moved to expired."""
    proposal = _pending(harness, "t-expired-decide")
    gw = harness.gateway()
    shift_store_clock(monkeypatch, harness.store, timedelta(minutes=16))
    assert _refused(gw, proposal, "fiona") == "expired"
    assert harness.store.approvals.for_proposal(proposal["proposal_id"]) == []
    assert _status(harness, proposal["operation_key"]) == "expired"
    assert [e.code for e in audit_events(harness.store, "approval.refused")] == ["expired"]
    assert len(audit_events(harness.store, "proposal.expired")) == 1


def test_a_claim_refuses_an_approval_whose_reviewer_was_revoked_after_deciding(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fiona approves; her identity is revoked before delivery. The delivery reads the decision
    and her identity in one statement right before the claim: the approval no longer counts."""
    proposal = _pending(harness, "t-revoked-at-claim")
    gw = harness.gateway()
    decide(gw, proposal["proposal_id"], principal("fiona"), "approve")
    harness.store.identities.change("fiona", status="revoked")
    with _reads(harness.store, monkeypatch) as reads:
        delivery = gw.executor.deliver(proposal["operation_key"], worker_id="w")
    assert reads == ["WITH"]  # operation, decisions and identities together (the clock aside)
    assert (delivery.status, delivery.claim) == ("approved", "NOT_ATTEMPTED")
    assert [e.code for e in audit_events(harness.store, "approval.voided")] == ["reviewer_inactive"]
    assert [e.code for e in audit_events(harness.store, "approval.refused_at_execution")] == [
        "approval_invalid"
    ]
    assert harness.handler_calls["issue_refund"] == 0 and harness.refunds() == 0


def test_a_claim_refuses_when_the_requester_was_revoked_after_approval(harness: Harness) -> None:
    """The requester's identity comes with the decisions' reviewers' in the same statement."""
    proposal = _pending(harness, "t-requester-revoked")
    gw = harness.gateway()
    decide(gw, proposal["proposal_id"], principal("fiona"), "approve")
    harness.store.identities.change("cust-ada", status="revoked")
    delivery = gw.executor.deliver(proposal["operation_key"], worker_id="w")
    assert delivery.status == "approved" and delivery.reason.startswith("requester_inactive")
    assert [e.code for e in audit_events(harness.store, "approval.refused_at_execution")] == [
        "requester_inactive"
    ]
    assert harness.handler_calls["issue_refund"] == 0


def test_a_claim_refuses_a_tampered_approval_row(harness: Harness) -> None:
    """A decision row written with database access alone (no valid MAC) and the operation moved
    to approved beside it: the forged decision read in the claim's snapshot counts for nothing."""
    proposal = _pending(harness, "t-tampered-approval")
    gw = harness.gateway()
    stored = harness.store.proposals.get(proposal["proposal_id"])
    assert stored is not None
    with harness.store.transaction() as tx:
        tx.execute(
            "INSERT INTO approvals (approval_id, proposal_id, reviewer_id, reviewer_tenant_id, reviewer_roles,"
            " decision, digest, reason, decided_at, mac) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                "apr_forged",
                stored.proposal_id,
                "fiona",
                "acme",
                '["finance"]',
                "approve",
                stored.digest,
                "",
                stored.created_at,
                "forged",
            ),
        )
    harness.store.operations.transition(proposal["operation_key"], "pending_approval", "approved")
    delivery = gw.executor.deliver(proposal["operation_key"], worker_id="w")
    assert (delivery.status, delivery.claim) == ("approved", "NOT_ATTEMPTED")
    assert [e.code for e in audit_events(harness.store, "approval.voided")] == ["forged_approval"]
    assert [e.code for e in audit_events(harness.store, "approval.refused_at_execution")] == [
        "approval_invalid"
    ]
    assert harness.handler_calls["issue_refund"] == 0 and harness.refunds() == 0


def test_a_claim_does_not_run_an_approval_past_its_expiry_by_the_stores_skewed_clock(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Approved, then the store's clock is 16 minutes on: the delivery moves it to expired."""
    proposal = _pending(harness, "t-expired-claim")
    gw = harness.gateway()
    decide(gw, proposal["proposal_id"], principal("fiona"), "approve")
    shift_store_clock(monkeypatch, harness.store, timedelta(minutes=16))
    delivery = gw.executor.deliver(proposal["operation_key"], worker_id="w")
    assert delivery.status == "expired" and delivery.claim == "NOT_ATTEMPTED"
    assert len(audit_events(harness.store, "proposal.expired")) == 1
    assert harness.handler_calls["issue_refund"] == 0 and harness.refunds() == 0


@contextlib.contextmanager
def _clock_reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every read of the store's clock in a round trip of its own meanwhile (`Store.now` on
    PostgreSQL; SQLite's clock is the host's and costs none, so nothing is counted there). The
    calibrated clock's reading is kept for the while, as `tests/test_pg_round_trips.py` does: how
    long a reading serves is not what this counts."""
    seen: list[str] = []
    if isinstance(store, PostgresStore):
        real = Store.now

        def counted(self: Store) -> Any:
            seen.append("now")
            return real(self)

        monkeypatch.setattr(Store, "now", counted)  # on the class: the store's own clock, not replaced
        monkeypatch.setattr(store_postgres, "CLOCK_REUSE_S", 3600.0)
    yield seen


def _resume(graph: Any, thread: str) -> dict[str, Any]:
    """Wake ``thread`` after a decision recorded elsewhere (fiona resumes it)."""
    return graph.invoke(  # type: ignore[no-any-return]
        Command(resume={"wake": True}),
        {"configurable": {"thread_id": thread}},
        context=Context(principal=principal("fiona")),
    )


@pytest.mark.parametrize(
    ("revoked", "refusal", "voided"),
    [("cust-ada", "requester_inactive", []), ("fiona", "approval_invalid", ["reviewer_inactive"])],
)
def test_the_execute_node_reads_the_operation_with_the_time_and_the_claim_judges_what_changed_after(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, revoked: str, refusal: str, voided: list[str]
) -> None:
    """The execute node reads each write's operation and the store's time in one statement (on
    PostgreSQL the clock was a round trip of its own after it). An identity is revoked right after
    that read, where the node used to read the clock: the claim's snapshot, still read right
    before the claim, sees it and refuses; nothing runs and the operation stays approved."""
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    graph = harness.graph(model)
    thread = f"t-head-read-{revoked}"
    paused = start(graph, REFUND_REQUEST, "cust-ada", thread)
    proposal = paused["__interrupt__"][0].value["toolgate"]["proposals"][0]
    decide(harness.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    store = harness.store
    read_at = store.operations.get_at
    heads: list[tuple[str, str | None]] = []

    def read_then_revoked(key: str) -> Any:
        found, now = read_at(key)
        heads.append((key, found.status if found else None))
        store.identities.change(revoked, status="revoked")  # between the old read points
        return found, now

    monkeypatch.setattr(store.operations, "get_at", read_then_revoked)
    with _clock_reads(store, monkeypatch) as clock_reads:
        _resume(graph, thread)
    assert heads == [(proposal["operation_key"], "approved")]  # one read of the operation with the time
    assert clock_reads == []  # and none of the clock alone
    assert harness.handler_calls["issue_refund"] == 0 and harness.refunds() == 0
    assert _status(harness, proposal["operation_key"]) == "approved"
    assert [e.code for e in audit_events(store, "approval.refused_at_execution")] == [refusal]
    assert [e.code for e in audit_events(store, "approval.voided")] == voided
    assert audit_events(store, "operation.claimed") == []


def test_a_delivery_judges_expiry_at_its_snapshots_time_and_the_claim_refuses_one_expired_after_it(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivery nothing handed an operation to (a worker's) reads the operation, its decisions,
    the identities and the store's time in one statement, and judges expiry and the requester's
    rules at that time (it read the clock twice more on PostgreSQL). The store's clock moves 16
    minutes on right after that read, where the expiry used to read it: the approval is still
    valid at the snapshot's time, and the claim's own conditional update, on the clock of its
    transaction, refuses it; the operation is moved to expired, nothing runs."""
    proposal = _pending(harness, "t-expired-after-snapshot")
    gw = harness.gateway()
    decide(gw, proposal["proposal_id"], principal("fiona"), "approve")
    store = harness.store
    snapshot = store.snapshots.for_claim
    times: list[Any] = []

    def read_then_expired(key: str, people: Any = (), *, clock: bool = False) -> Any:
        found = snapshot(key, people, clock=clock)
        times.append(found.now)
        shift_store_clock(monkeypatch, store, timedelta(minutes=16))  # between the old read points
        return found

    monkeypatch.setattr(store.snapshots, "for_claim", read_then_expired)
    delivery = gw.executor.deliver(proposal["operation_key"], worker_id="w")
    assert len(times) == 1 and times[0] is not None  # the time came with the snapshot
    assert (delivery.status, delivery.claim) == ("expired", "NOT_ACQUIRED")
    assert _status(harness, proposal["operation_key"]) == "expired"
    assert len(audit_events(store, "proposal.expired")) == 1
    assert audit_events(store, "operation.claimed") == []
    assert harness.handler_calls["issue_refund"] == 0 and harness.refunds() == 0


def test_a_delivery_reads_what_it_judges_before_the_claim_and_the_time_in_one_statement(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's delivery of a valid approval: one read before its claim (the snapshot, which
    brings the store's time) and no clock read of its own; it runs once."""
    proposal = _pending(harness, "t-snapshot-clock")
    gw = harness.gateway()
    decide(gw, proposal["proposal_id"], principal("fiona"), "approve")
    with _reads(harness.store, monkeypatch) as reads, _clock_reads(harness.store, monkeypatch) as clock_reads:
        delivery = gw.executor.deliver(proposal["operation_key"], worker_id="w")
    assert (delivery.status, delivery.claim) == ("succeeded", "ACQUIRED")
    assert reads == ["WITH"] and clock_reads == []
    assert harness.handler_calls["issue_refund"] == 1 and harness.refunds() == 1


@contextlib.contextmanager
def _statements(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, Any]]]:
    """Every guard snapshot's statement (``WITH``) of a read-only transaction of ``store``
    meanwhile, with its parameters."""
    with _read_only(
        store, monkeypatch, lambda sql, params: (sql, params) if sql.startswith("WITH t AS") else None
    ) as seen:
        yield seen


def _full_scans(store: Store, sql: str, params: Any) -> list[str]:
    """The tables ``sql``'s plan reads whole (its CTE ``t`` aside). PostgreSQL is told to avoid
    sequential scans, so one it still plans has no index to use instead (a small table's plan
    would scan it whatever the indexes), in a transaction of its own (a read there is autocommit)."""
    postgres = isinstance(store, PostgresStore)
    with store.transaction(write=postgres) as tx:
        if postgres:
            tx.execute("SET LOCAL enable_seqscan = off")
            lines = [str(r["QUERY PLAN"]) for r in tx.execute(f"EXPLAIN {sql}", params)]
            return [m.group(1) for line in lines if (m := re.search(r"Seq Scan on (\w+)", line))]
        lines = [str(r["detail"]) for r in tx.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        return [m.group(1) for line in lines if (m := re.match(r"SCAN (\w+)$", line)) and m.group(1) != "t"]


def test_the_guard_snapshots_read_no_table_whole(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decision's and a claim's snapshots find every row they judge through an index (a
    reviewer's edit by the proposal it supersedes too), so their cost does not grow with the
    proposals the store holds; the write runs once."""
    proposal = _pending(harness, "t-snapshot-plans")
    gw = harness.gateway()
    with _statements(harness.store, monkeypatch) as statements:
        decide(gw, proposal["proposal_id"], principal("fiona"), "approve")
        delivery = gw.executor.deliver(proposal["operation_key"], worker_id="w")
    assert (delivery.status, delivery.claim) == ("succeeded", "ACQUIRED")
    assert len(statements) == 2  # the decision's snapshot, the claim's
    assert [_full_scans(harness.store, sql, params) for sql, params in statements] == [[], []]
    assert harness.handler_calls["issue_refund"] == 1 and harness.refunds() == 1
