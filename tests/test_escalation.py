"""Escalation as policy: a refund above the configured threshold needs two reviewers; below it, one
finance reviewer. On SQLite and PostgreSQL (the ``harness`` fixture runs on both).

The threshold is the release's policy file's ``refund.large_needs_two_reviewers`` rule, lowered to
2000 cents for these tests (the shipped one, 50000, is above every acme order). The class is raised
when the proposal is made, stored on the proposal record under its digest, shown to reviewers with
its reason and named in the ``proposal.created`` event; deciding reads it from the store, never from
the thread's checkpoint, and a record below the policy's class decides nothing.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest
from langgraph.types import Command
from support import REFUND_REQUEST, Harness, audit_events, principal, shift_store_clock, start
from support import tool_messages as messages_of

from toolgate.canonical import digest
from toolgate.errors import ApprovalError
from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.graph.seals.seal import seal_of
from toolgate.graph.seals.updates import apply_update
from toolgate.graph.state import gateway_state
from toolgate.policy.rules import PolicyRules
from toolgate.store.records import ProposalRecord
from toolgate.store.snapshots import GuardSnapshot
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.demo.release import HOME
from toolgate.tools.spec import ApprovalClass

RULE = "refund.large_needs_two_reviewers"
THRESHOLD = 2000
ABOVE = {"order_id": "O-5512", "amount_cents": 2500, "reason": "damaged"}
BELOW = {**ABOVE, "amount_cents": 1500}
RAISED = "two_person(finance,support)"
BASE = "two_person(finance,support;sole=finance)"


def policy_with_threshold(over: int) -> PolicyRules:
    """The refund release's policy file, its escalation threshold set to ``over`` cents."""
    raw = json.loads((HOME / "ops-tools-1.0.0" / "policy.json").read_text())
    (rule,) = [r for r in raw["rules"] if r.get("kind") == "escalate"]
    rule["over"] = over
    return PolicyRules.from_mapping(raw)


@pytest.fixture
def rig(harness: Harness) -> Harness:
    harness.policy = policy_with_threshold(THRESHOLD)
    return harness


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def propose(rig: Harness, arguments: dict[str, Any], thread: str) -> tuple[Any, dict[str, Any]]:
    """cust-ada asks for a refund; the graph and the approval interrupt's facts."""
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", arguments, "c1")), ai("done")])
    graph = rig.graph(model)
    state = start(graph, REFUND_REQUEST, "cust-ada", thread)
    return graph, state["__interrupt__"][0].value["toolgate"]["proposals"][0]


def resume(graph: Any, thread: str) -> dict[str, Any]:
    result: dict[str, Any] = graph.invoke(Command(resume={"wake": True}), cfg(thread), context=Context())
    return result


def status(rig: Harness, facts: dict[str, Any]) -> str:
    operation = rig.store.operations.get(facts["operation_key"])
    assert operation is not None
    return operation.status


def refused(rig: Harness, facts: dict[str, Any], user: str) -> str:
    """``user``'s approval is refused: its code, after checking nothing was recorded and it was audited."""
    before = len(rig.store.approvals.for_proposal(facts["proposal_id"]))
    audited = len(audit_events(rig.store, "approval.refused"))
    with pytest.raises(ApprovalError) as refusal:
        decide(rig.gateway(), facts["proposal_id"], principal(user), "approve")
    assert len(rig.store.approvals.for_proposal(facts["proposal_id"])) == before
    events = audit_events(rig.store, "approval.refused")
    assert len(events) == audited + 1 and events[-1].code == refusal.value.code
    assert events[-1].proposal_id == facts["proposal_id"]
    return refusal.value.code


def test_a_refund_above_the_threshold_needs_two_distinct_reviewers(rig: Harness) -> None:
    graph, facts = propose(rig, ABOVE, "t-above")
    reason = rig.policy.escalations[0].reason
    assert facts["approval_class"] == RAISED
    assert facts["escalation"] == {"rule_id": RULE, "reason": reason, "approval_class": RAISED}
    stored = rig.store.proposals.get(facts["proposal_id"])
    assert stored is not None and stored.approval_class == RAISED
    assert (stored.escalation_rule_id, stored.escalation_reason) == (RULE, reason)
    assert stored.content()["escalation"] == {"rule_id": RULE, "reason": reason}  # under the digest
    (created,) = audit_events(rig.store, "proposal.created")
    assert created.detail["escalation"] == {"rule_id": RULE, "reason": reason, "approval_class": RAISED}

    assert refused(rig, facts, "cust-ada") == "self_approval"  # the requester, never
    assert refused(rig, facts, "omar") == "missing_role"  # an operator is not entitled by the class
    first = decide(rig.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    assert first.verdict.status == "pending" and first.operation.status == "pending_approval"
    assert resume(graph, "t-above")["status"] == "awaiting_approval"
    assert rig.handler_calls["issue_refund"] == 0 and rig.refunds() == 0
    assert refused(rig, facts, "fiona") == "already_decided"  # the same person twice is one reviewer

    second = decide(rig.gateway(), facts["proposal_id"], principal("sam"), "approve")
    assert second.verdict.status == "approved" and second.verdict.approvers == ("fiona", "sam")
    final = resume(graph, "t-above")
    assert json.loads(str(messages_of(final)[-1].content))["status"] == "completed"
    assert rig.handler_calls["issue_refund"] == 1 and rig.refunds() == 1


def test_below_the_threshold_one_finance_reviewer_suffices(rig: Harness) -> None:
    graph, facts = propose(rig, BELOW, "t-below")
    assert facts["approval_class"] == BASE and facts["escalation"] is None
    stored = rig.store.proposals.get(facts["proposal_id"])
    assert stored is not None and stored.escalation_rule_id is None and "escalation" not in stored.content()
    (created,) = audit_events(rig.store, "proposal.created")
    assert "escalation" not in created.detail
    assert refused(rig, facts, "omar") == "missing_role"
    outcome = decide(rig.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    assert outcome.verdict.status == "approved" and outcome.operation.status == "approved"
    resume(graph, "t-below")
    assert rig.handler_calls["issue_refund"] == 1 and rig.refunds() == 1


def test_a_checkpoint_claiming_the_lower_class_changes_nothing(rig: Harness) -> None:
    """Even a state rewritten with a seal that verifies (trusted code of another release): the
    call record claims the base class and a smaller amount, fiona alone has approved; nothing runs."""
    graph, facts = propose(rig, ABOVE, "t-forged")
    decide(rig.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    values = gateway_state(graph.get_state(cfg("t-forged")).values)
    record = {**values["calls"]["c1"], "arguments": BELOW, "approval_class": BASE, "escalation": None}
    update = {"calls": {"c1": record}}
    graph.update_state(
        cfg("t-forged"), {**update, "seal": seal_of(rig.store.keys, "t-forged", apply_update(values, update))}
    )
    resume(graph, "t-forged")
    assert rig.handler_calls["issue_refund"] == 0 and rig.refunds() == 0 and rig.payments() == 0
    assert status(rig, facts) == "pending_approval"
    assert rig.gateway().executor.deliver(facts["operation_key"], worker_id="w").status == "pending_approval"
    assert rig.handler_calls["issue_refund"] == 0
    stored = rig.store.proposals.get(facts["proposal_id"])
    assert stored is not None and stored.approval_class == RAISED


def test_a_proposal_record_rewritten_to_the_lower_class_decides_nothing(
    rig: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row rewritten in the database with its digest recomputed (the table refuses updates; this
    stands for someone writing around it): its class is below what the policy gives its arguments,
    so no decision is recorded on it, and the refusal is audited."""
    _, facts = propose(rig, ABOVE, "t-rewritten")
    stored = rig.store.proposals.get(facts["proposal_id"])
    assert stored is not None
    lowered = dataclasses.replace(
        stored, approval_class=BASE, escalation_rule_id=None, escalation_reason=None
    )
    lowered = dataclasses.replace(lowered, digest=digest(lowered.content()))
    real = rig.store.proposals.get
    read = rig.store.snapshots.for_decision

    def rewritten(proposal_id: str) -> ProposalRecord | None:
        return lowered if proposal_id == facts["proposal_id"] else real(proposal_id)

    def rewritten_snapshot(proposal_id: str, people: Any = ()) -> GuardSnapshot:
        # `decide` reads the proposal with the rest of what it judges, in one statement
        return dataclasses.replace(read(proposal_id, people), proposal=rewritten(proposal_id))

    monkeypatch.setattr(rig.store.proposals, "get", rewritten)
    monkeypatch.setattr(rig.store.snapshots, "for_decision", rewritten_snapshot)
    assert refused(rig, facts, "fiona") == "approval_class_invalid"
    assert status(rig, facts) == "pending_approval" and rig.handler_calls["issue_refund"] == 0


def test_a_skewed_clock_cannot_stretch_the_window_between_the_two_approvals(
    rig: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's clock decides expiry: the second reviewer comes after 16 minutes (by the
    database), so the escalated refund is expired, refused with ``expired`` and never runs."""
    graph, facts = propose(rig, ABOVE, "t-late")
    decide(rig.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    shift_store_clock(monkeypatch, rig.store, timedelta(minutes=16))
    assert refused(rig, facts, "sam") == "expired"
    resume(graph, "t-late")
    assert status(rig, facts) == "expired" and rig.handler_calls["issue_refund"] == 0


def test_the_shipped_policy_escalates_refunds_over_500_dollars() -> None:
    """The demo releases' own files: over 50000 cents, two reviewers; at 50000, the tool's class."""
    from toolgate.tools.demo.release import DEMO_RELEASES

    for release in DEMO_RELEASES.values():
        refund = release.policy.escalations[0]
        assert (refund.id, refund.tool, refund.over, refund.approval.describe()) == (
            RULE,
            "issue_refund",
            50000,
            RAISED,
        )
        base = ApprovalClass.parse(BASE)
        assert release.policy.escalation("issue_refund", base, {"amount_cents": 50001}).rule_id == RULE
        assert release.policy.escalation("issue_refund", base, {"amount_cents": 50000}).approval == base
