"""The guards before a decision and before a claim judge rows read in one statement
(`toolgate.store.snapshots`, issue 31): each guard folded into that read still refuses, on both
backends, and the read is one statement.

`decide` reads the proposal, its operation, its replacement, the status of the operation it
replaces, its decisions and the reviewer's identity together; a delivery reads the decisions and
the identities of their reviewers and of the requester together right before its claim."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from support import REFUND_REQUEST, Harness, audit_events, principal, shift_store_clock, start

from toolgate.errors import ApprovalError
from toolgate.graph.review import edits
from toolgate.graph.review.decisions import decide
from toolgate.store import Store
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 1000, "reason": "damaged"}


def _pending(harness: Harness, thread: str) -> dict[str, Any]:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    result = start(harness.graph(model), REFUND_REQUEST, "cust-ada", thread)
    return result["__interrupt__"][0].value["toolgate"]["proposals"][0]  # type: ignore[no-any-return]


GUARDED = ("proposals", "operations", "approvals", "identities")
"""The tables whose rows the guards judge."""


@contextlib.contextmanager
def _reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The first word of every statement of a read-only transaction of ``store`` meanwhile that
    reads a table the guards judge (the store's clock and the proposal cache's own read of an
    immutable proposal, say, are not of them)."""
    seen: list[str] = []
    store.snapshots.for_claim("warm-up")  # SQLite names the tables' columns once per store
    real = store.transaction

    @contextlib.contextmanager
    def counted(*, write: bool = True) -> Iterator[Any]:
        with real(write=write) as tx:
            if not write:
                execute = tx.execute

                def guarded(sql: str, params: Any = ()) -> Any:
                    if sql.startswith("WITH") or any(f"FROM {t}" in sql for t in GUARDED[1:]):
                        seen.append(sql.split()[0])
                    return execute(sql, params)

                tx.execute = guarded
            yield tx

    with monkeypatch.context() as m:
        m.setattr(store, "transaction", counted)
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
