"""Red team: decisions that race or come from the wrong person must never make a second effect."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest
from support import REFUND_REQUEST, Harness, audit_events, principal, start

from toolgate.errors import ApprovalError
from toolgate.graph.review import edits
from toolgate.graph.review.decisions import decide
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 1000, "reason": "damaged"}


def _pending(harness: Harness, thread: str) -> dict[str, Any]:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    result = start(harness.graph(model), REFUND_REQUEST, "cust-ada", thread)
    return result["__interrupt__"][0].value["toolgate"]["proposals"][0]  # type: ignore[no-any-return]


def test_an_approval_landing_inside_an_edit_voids_the_edited_copy(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fiona approves the original just before rita's edit rejects it: the original stands and
    runs once; the edited copy is rejected (``edit_lost_race``), so no second refund can follow."""
    original = _pending(harness, "t-race-edit")
    gw = harness.gateway()
    real_decide = edits.decide

    def approve_first(g: Any, pid: str, who: Any, kind: str, **kw: Any) -> Any:
        if kind == "reject":  # the edit's own rejection of the original: fiona got there first
            # (her check for a replacement ran before the edit stored it; her record lands now)
            snapshots = type(harness.store.snapshots)
            before_edit = snapshots.for_decision

            def unedited(self: Any, pid: str, people: Any = ()) -> Any:
                return dataclasses.replace(before_edit(self, pid, people), superseding=None)

            with monkeypatch.context() as m:
                m.setattr(snapshots, "for_decision", unedited)
                decide(gw, original["proposal_id"], principal("fiona"), "approve")
        return real_decide(g, pid, who, kind, **kw)

    monkeypatch.setattr(edits, "decide", approve_first)
    with pytest.raises(ApprovalError) as refused:
        edits.edit_proposal(
            gw,
            original["proposal_id"],
            principal("rita"),
            tool="issue_refund",
            arguments={**REFUND, "amount_cents": 700},
        )
    assert refused.value.code == "not_pending"
    monkeypatch.setattr(edits, "decide", real_decide)
    edited = harness.store.proposals.superseding(original["proposal_id"])
    assert edited is not None
    assert harness.store.operations.get(edited.operation_key).status == "rejected"  # type: ignore[union-attr]
    assert [
        e.code
        for e in audit_events(harness.store, "proposal.rejected")
        if e.proposal_id == edited.proposal_id
    ] == ["edit_lost_race"]
    with pytest.raises(ApprovalError) as again:
        decide(gw, edited.proposal_id, principal("sam"), "approve")
    assert again.value.code == "not_pending"
    assert edits.current_proposal(gw, original["proposal_id"]).proposal_id == original["proposal_id"]  # type: ignore[union-attr]
    done = gw.executor.deliver(original["operation_key"], worker_id="w")
    assert done.status == "succeeded"
    assert gw.executor.deliver(edited.operation_key, worker_id="w").status == "rejected"
    assert harness.refunds() == 1 and harness.handler_calls["issue_refund"] == 1


def test_an_edited_proposal_can_no_longer_be_approved_in_its_original_form(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit that stored its replacement but never rejected the original (a crash, or an approval
    racing it): approving the original is refused ``superseded``, so only the edit can run."""
    original = _pending(harness, "t-half-edit")
    gw = harness.gateway()
    monkeypatch.setattr(edits, "decide", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("crash")))
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
    assert harness.store.operations.get(original["operation_key"]).status == "pending_approval"  # type: ignore[union-attr]
    with pytest.raises(ApprovalError) as refused:
        decide(gw, original["proposal_id"], principal("fiona"), "approve")
    assert refused.value.code == "superseded"
    assert [e.code for e in audit_events(harness.store, "approval.refused")] == ["superseded"]
    assert harness.store.operations.get(original["operation_key"]).status == "pending_approval"  # type: ignore[union-attr]
    with pytest.raises(ApprovalError) as beside:  # nor the edit, while its original is open
        decide(gw, edited.proposal_id, principal("fiona"), "approve")
    assert beside.value.code == "original_not_rejected"
    assert harness.store.operations.get(edited.operation_key).status == "pending_approval"  # type: ignore[union-attr]
    decide(gw, original["proposal_id"], principal("fiona"), "reject", reason="replaced by the edit")
    decide(gw, edited.proposal_id, principal("fiona"), "approve")
    assert gw.executor.deliver(original["operation_key"], worker_id="w").status == "rejected"
    assert gw.executor.deliver(edited.operation_key, worker_id="w").status == "succeeded"
    assert harness.refunds() == 1


def test_a_reviewer_demoted_after_approving_no_longer_authorizes_the_write(harness: Harness) -> None:
    """fiona approves alone as finance; before delivery her administrator takes finance away. As a
    revoked reviewer's, her approval must stop counting with the role: nothing runs on it."""
    original = _pending(harness, "t-demoted")
    gw = harness.gateway()
    decide(gw, original["proposal_id"], principal("fiona"), "approve")
    assert harness.store.operations.get(original["operation_key"]).status == "approved"  # type: ignore[union-attr]
    gw.directory.change_roles("fiona", roles=frozenset({"viewer"}), scopes=None, by=principal("ivy"))
    assert gw.executor.deliver(original["operation_key"], worker_id="w").status == "approved"
    assert harness.refunds() == 0 and harness.handler_calls["issue_refund"] == 0
    assert [e.code for e in audit_events(harness.store, "approval.voided")] == ["reviewer_role_removed"]
    assert [e.code for e in audit_events(harness.store, "approval.refused_at_execution")] == [
        "approval_invalid"
    ]


def test_two_reviewers_editing_one_proposal_at_once_leave_one_edit_to_approve(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rita and sam edit the same proposal at once: both replacements are stored, one edit rejects
    the original, and the other's replacement must not stay approvable (two refunds otherwise)."""
    original = _pending(harness, "t-two-edits")
    gw = harness.gateway()
    carry = edits.carry_delegation
    inner: list[Any] = []

    def sam_edits_meanwhile(*args: Any, **kwargs: Any) -> bool:
        if not inner:  # only inside rita's edit: sam's whole edit lands between her two writes
            inner.append(None)
            inner[0] = edits.edit_proposal(
                gw,
                original["proposal_id"],
                principal("sam"),
                tool="issue_refund",
                arguments={**REFUND, "amount_cents": 600},
            )
        return carry(*args, **kwargs)

    monkeypatch.setattr(edits, "carry_delegation", sam_edits_meanwhile)
    with pytest.raises(ApprovalError) as lost:
        edits.edit_proposal(
            gw,
            original["proposal_id"],
            principal("rita"),
            tool="issue_refund",
            arguments={**REFUND, "amount_cents": 700},
        )
    assert lost.value.code == "not_pending", str(lost.value)
    monkeypatch.setattr(edits, "carry_delegation", carry)
    statuses = {
        p.arguments["amount_cents"]: op.status
        for p, op in harness.store.proposals.list(None)
        if p.supersedes == original["proposal_id"]
    }
    assert statuses == {600: "pending_approval", 700: "rejected"}
    winner = inner[0]
    assert edits.current_proposal(gw, original["proposal_id"]).proposal_id == winner.proposal_id  # type: ignore[union-attr]
    decide(gw, winner.proposal_id, principal("fiona"), "approve")
    assert gw.executor.deliver(winner.operation_key, worker_id="w").status == "succeeded"
    assert harness.refunds() == 1


def test_the_thread_follows_the_edit_that_replaced_the_original_not_the_newest(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rita's edit stores its replacement, sam's (in another thread) stores a newer one, rita's
    rejects the original first: sam's newer replacement is voided, and the thread must wait on
    rita's (the one the original's rejection names), not on the newest row."""
    original = _pending(harness, "t-follow")
    gw = harness.gateway()
    carry = edits.carry_delegation
    sam_stored, rita_done = threading.Event(), threading.Event()
    outcome: dict[str, BaseException] = {}

    def sam_edit() -> None:
        try:
            edits.edit_proposal(
                gw,
                original["proposal_id"],
                principal("sam"),
                tool="issue_refund",
                arguments={**REFUND, "amount_cents": 600},
            )
        except ApprovalError as exc:
            outcome["sam"] = exc

    sam = threading.Thread(target=sam_edit)

    def interleave(*args: Any, **kwargs: Any) -> bool:
        if threading.current_thread() is sam:  # sam stored his: hold him until rita's edit is done
            sam_stored.set()
            assert rita_done.wait(timeout=60)
        else:  # rita stored hers: let sam store his (newer) before rita rejects the original
            sam.start()
            assert sam_stored.wait(timeout=60)
        return carry(*args, **kwargs)

    monkeypatch.setattr(edits, "carry_delegation", interleave)
    rita = edits.edit_proposal(
        gw,
        original["proposal_id"],
        principal("rita"),
        tool="issue_refund",
        arguments={**REFUND, "amount_cents": 700},
    )
    rita_done.set()
    sam.join(timeout=60)
    assert not sam.is_alive() and getattr(outcome.get("sam"), "code", None) == "not_pending"
    newest = harness.store.proposals.superseding(original["proposal_id"])
    assert newest is not None and newest.arguments["amount_cents"] == 600  # sam's, voided
    assert harness.store.operations.get(newest.operation_key).status == "rejected"  # type: ignore[union-attr]
    assert edits.current_proposal(gw, original["proposal_id"]).proposal_id == rita.proposal_id  # type: ignore[union-attr]
