"""Evidence commits with the change it records, on both backends.

Each state change (proposal, decision with the approval it completes, claim, outcome) appends its
audit events in its own transaction: a change without its evidence, or evidence of a change that
never happened, cannot be left behind. A read call audits with one append. Counted through the
store's own `AuditLog._chain` (each call is one transaction's events, linked by `AuditLog.link` or
behind its statements by `AuditLog.link_behind`) and its transactions."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from support import Harness, principal, start

from toolgate.errors import StoreError
from toolgate.graph.review.decisions import decide
from toolgate.store.chain import verify_chain
from toolgate.store.records import ApprovalRecord, Settlement
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}


class Counted:
    """Write transactions of a store, and the audit events each carried."""

    def __init__(self, harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
        store = harness.store
        self.writes = 0
        self.appends: list[tuple[str, ...]] = []
        real_tx, real_append = store.transaction, store.audit._chain

        @contextmanager
        def transaction(*, write: bool = True) -> Iterator[Any]:
            if write:
                self.writes += 1
            with real_tx(write=write) as tx:
                yield tx

        def append(tx: Any, events: Any, *linked: Any) -> Any:
            if events:
                self.appends.append(tuple(e.event for e in events))
            return real_append(tx, events, *linked)

        monkeypatch.setattr(store, "transaction", transaction)
        monkeypatch.setattr(store.audit, "_chain", append)  # `link` and `link_behind` chain through it

    def reset(self) -> None:
        self.writes, self.appends = 0, []


def refund_proposal(harness: Harness, thread: str) -> dict[str, Any]:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND))])
    return start(harness.graph(model), "refund", "cust-ada", thread)["__interrupt__"][0].value["toolgate"][
        "proposals"
    ][0]


def test_a_read_call_audits_with_one_append(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    counted = Counted(harness, monkeypatch)
    model = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")), ai("It shipped.")]
    )
    state = start(harness.graph(model), "where is my order?", "cust-ada", "t-read")
    assert state["status"] == "done"
    assert harness.handler_calls["lookup_order"] == 1
    # the call's acceptance and outcome in one append, after the response of the turn that asked
    # for it (issue 31: that turn's event travels with them); the final answer's in one more
    assert counted.appends == [("model.response", "call.accepted", "call.completed"), ("model.response",)]
    # those two plus the rate limiter's one counting transaction (4 before the model turn travelled)
    assert counted.writes == 3
    assert verify_chain(harness.store).ok


def test_an_approved_write_commits_each_change_with_its_evidence(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = Counted(harness, monkeypatch)
    proposal = refund_proposal(harness, "t-write")
    # the proposing turn's response travels with the proposal (issue 31)
    assert ("model.response", "call.accepted", "proposal.created") in counted.appends
    counted.reset()
    outcome = decide(harness.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    assert outcome.operation.status == "approved"
    # finance approves alone: the decision and the approval it completes are one transaction
    assert counted.appends == [("approval.recorded", "proposal.approved")]
    assert counted.writes == 1
    counted.reset()
    delivery = harness.gateway().executor.deliver(proposal["operation_key"], worker_id="w1")
    assert delivery.status == "succeeded"
    assert counted.appends == [
        ("operation.claimed", "handler.started"),
        ("handler.finished", "operation.completed"),
    ]
    # the claim with the order's resource lease taken in its transaction, the outcome with the
    # lease's release in its own (the payment system writes its refund through its own records
    # connection; a tool that declares no forwarded credentials had nothing sealed, so no delete of
    # sealed credentials is written either). 3 before the lease was folded into the claim.
    assert counted.writes == 2
    with harness.store.transaction(write=False) as tx:
        assert tx.execute("SELECT resource_key FROM resource_leases") == []  # given up with the outcome
    assert harness.refunds() == 1
    assert verify_chain(harness.store).ok


def test_a_failed_append_leaves_the_claim_untaken(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    proposal = refund_proposal(harness, "t-atomic")
    gateway = harness.gateway()
    decide(gateway, proposal["proposal_id"], principal("fiona"), "approve")
    events_before = len(harness.store.audit.events())

    def broken(tx: Any, *args: Any) -> Any:  # linking the claim's events, behind its statements
        raise StoreError("audit chain unavailable")

    monkeypatch.setattr(harness.store.audit, "_chain", broken)
    with pytest.raises(StoreError):
        gateway.executor.deliver(proposal["operation_key"], worker_id="w1")
    op = harness.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "approved" and op.attempts == 0  # the claim rolled back
    assert harness.handler_calls["issue_refund"] == 0
    assert len(harness.store.audit.events()) == events_before
    monkeypatch.undo()
    assert gateway.executor.deliver(proposal["operation_key"], worker_id="w2").status == "succeeded"
    assert harness.refunds() == 1
    assert verify_chain(harness.store).ok


def test_a_lost_claim_appends_nothing(harness: Harness) -> None:
    proposal = refund_proposal(harness, "t-lost")
    gateway = harness.gateway()
    decide(gateway, proposal["proposal_id"], principal("fiona"), "approve")
    key = proposal["operation_key"]
    assert harness.store.operations.claim(key, "w1", 60.0) is not None
    before = len(harness.store.audit.events())
    event = gateway.auditor.event("operation.claimed", "acquired", operation_key=key)
    assert harness.store.operations.claim(key, "w2", 60.0, audit=[event]) is None
    assert len(harness.store.audit.events()) == before


def test_two_concurrent_second_approvals_approve_exactly_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two support reviewers of a two-person refund decide at once. Each judged its decision
    before the other's was stored (a barrier holds both before their transactions), so neither
    settles with its decision; the judgement after the commit then approves exactly once."""
    proposal = refund_proposal(harness, "t-two")
    gateway = harness.gateway()
    barrier = threading.Barrier(2, timeout=30)
    real = harness.store.approvals.record_and_settle
    settles: list[object] = []

    def held(*args: Any, **kwargs: Any) -> Any:
        settles.append(kwargs.get("settle"))
        barrier.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(harness.store.approvals, "record_and_settle", held)
    outcomes: dict[str, Any] = {}
    errors: list[BaseException] = []

    def review(user: str) -> None:
        try:
            outcomes[user] = decide(gateway, proposal["proposal_id"], principal(user), "approve")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=review, args=(u,)) for u in ("rita", "sam")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert settles == [None, None]  # neither decision completed the verdict on its own
    op = harness.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "approved"
    events = [e.event for e in harness.store.audit.events(proposal_id=proposal["proposal_id"])]
    assert events.count("approval.recorded") == 2
    assert events.count("proposal.approved") == 1
    assert verify_chain(harness.store).ok


def test_an_approval_does_not_settle_over_a_recorded_rejection(harness: Harness) -> None:
    """A rejection on record keeps an approval from settling in its own transaction, whatever the
    approving reviewer saw when it judged: the operation stays for the judgement of every stored
    decision (`decide` makes it after the commit)."""
    proposal = refund_proposal(harness, "t-reject-first")
    stored = harness.store.proposals.get(proposal["proposal_id"])
    assert stored is not None

    def decision(approval_id: str, reviewer: str, verdict: str) -> ApprovalRecord:
        who = principal(reviewer)
        return ApprovalRecord(
            approval_id=approval_id,
            proposal_id=stored.proposal_id,
            reviewer_id=who.user_id,
            reviewer_tenant_id=stored.tenant_id,
            reviewer_roles=tuple(sorted(who.roles)),
            decision=verdict,
            digest=stored.digest,
            reason="not damaged" if verdict == "reject" else "",
            decided_at="2026-12-01T00:00:00.000000Z",
        )

    assert harness.store.approvals.record(decision("apr_r", "rita", "reject"))  # recorded, not settled
    recorded, settled = harness.store.approvals.record_and_settle(
        decision("apr_f", "fiona", "approve"),
        settle=Settlement(
            operation_key=stored.operation_key, from_status="pending_approval", to_status="approved"
        ),
    )
    assert recorded and settled is None
    op = harness.store.operations.get(stored.operation_key)
    assert op is not None and op.status == "pending_approval"
