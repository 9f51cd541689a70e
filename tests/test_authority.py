"""The authority on its own: its three checkpoints, each asked with a missing, a wrong and someone
else's credential, a revoked approver, a tampered and a replayed approval record and a skewed
clock, with the exact code each answers; and proof that the three ask the same rules.

`toolgate.policy.authority.Authority` is built once per gateway; these tests ask it directly, on
the demo release over a real store (SQLite and PostgreSQL), with proposals made and approved the
way the gateway makes them (a graph run, then `decide`). What a checkpoint is given of a call is
what the graph would hand it: the thread's principal, what checkpointed state records of the call,
and the store's own rows.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from support import REFUND_REQUEST, Harness, principal, set_store_now, start

from toolgate.errors import IdentityError
from toolgate.graph.gateway import Gateway
from toolgate.graph.review.decisions import decide
from toolgate.policy.authority import (
    DELIVERY_REFUSED,
    Authority,
    ClaimRefusal,
    ProposedCall,
    RecordedCall,
    acting_principal,
)
from toolgate.policy.decisions import Rejection
from toolgate.policy.principal import Principal
from toolgate.store.records import OperationRecord, ProposalRecord
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.registry import Registry
from toolgate.tools.spec import Deprecation

REFUND = {"order_id": "O-5512", "amount_cents": 1000, "reason": "damaged"}
NOBODY = Principal(user_id="cust-nobody", tenant_id="acme")
"""An authenticated caller of the right tenant holding no grant at all."""


# ---- helpers -------------------------------------------------------------------------------


def proposed(harness: Harness, thread: str, call_id: str = "c1", **changes: Any) -> dict[str, Any]:
    """cust-ada's refund proposed in ``thread`` (pending approval): its proposal facts."""
    model = ScriptedChatModel(
        responses=[ai("", tool_call("issue_refund", {**REFUND, **changes}, call_id)), ai("done")]
    )
    facts = start(harness.graph(model), REFUND_REQUEST, "cust-ada", thread)["__interrupt__"][0].value
    return facts["toolgate"]["proposals"][0]  # type: ignore[no-any-return]


def approved(
    harness: Harness, gw: Gateway, thread: str, **changes: Any
) -> tuple[OperationRecord, ProposalRecord]:
    """cust-ada's refund, approved by fiona (finance): the store's operation and proposal rows."""
    facts = proposed(harness, thread, **changes)
    decide(gw, facts["proposal_id"], principal("fiona"), "approve")
    return rows(gw, facts["operation_key"])


def rows(gw: Gateway, operation_key: str) -> tuple[OperationRecord, ProposalRecord]:
    op = gw.store.operations.get(operation_key)
    assert op is not None and op.status == "approved" and op.proposal_id
    proposal = gw.store.proposals.get(op.proposal_id)
    assert proposal is not None and proposal.authentic
    return op, proposal


def dispatch(authority: Authority, who: Principal, tool: str, args: Any) -> Rejection | None:
    """The dispatch checkpoint's refusal of one call (None: accepted), counting no rate limit."""
    call = ProposedCall("c-test", tool, args, None)
    return authority.at_dispatch(who, call, counts={}, max_identical_calls=3, peek=True).rejection


def read(order_id: str = "O-5512") -> RecordedCall:
    """A read of ``order_id`` as checkpointed state records it."""
    return RecordedCall(call_id="c-read", tool="lookup_order", read=True, arguments={"order_id": order_id})


def write(facts: ProposalRecord, **changes: Any) -> RecordedCall:
    """The write of ``facts`` as checkpointed state records it (``changes``: as a client rewrote it)."""
    recorded = {
        "call_id": facts.call_id,
        "tool": facts.tool,
        "read": False,
        "arguments": facts.arguments,
        "operation_key": facts.operation_key,
        "proposal_id": facts.proposal_id,
    }
    return RecordedCall(**{**recorded, **changes})


def code(refusal: Rejection | ClaimRefusal | None) -> str | None:
    return None if refusal is None else refusal.code


def audited(gw: Gateway, event: str, key: str | None = None) -> list[str | None]:
    """The codes of ``event`` in the audit log (of operation ``key`` when given), in order."""
    return [e.code for e in gw.store.audit.events(operation_key=key) if e.event == event]


def sql(gw: Gateway, statement: str, *args: Any) -> None:
    """A change made with database access alone (no store secret): what a tamperer can do."""
    with gw.store.transaction() as tx:
        tx.execute(statement, args)


# ---- who acts --------------------------------------------------------------------------------


def test_who_acts_is_the_threads_first_principal_never_a_missing_or_another_one() -> None:
    ada, gina = principal("cust-ada"), principal("cust-gina")
    with pytest.raises(IdentityError) as missing:
        acting_principal(None, None)
    assert missing.value.code == "missing_principal"
    assert acting_principal(None, ada) == ada
    with pytest.raises(IdentityError) as other_tenant:  # someone else's thread
        acting_principal(ada.to_dict(), gina)
    assert other_tenant.value.code == "thread_owner"
    with pytest.raises(IdentityError) as new_turn:  # a colleague may resume, never start a turn
        acting_principal(ada.to_dict(), principal("rita"), new_turn=True)
    assert new_turn.value.code == "thread_owner"
    assert acting_principal(ada.to_dict(), principal("rita")) == ada  # resuming: still ada's thread


# ---- at dispatch -----------------------------------------------------------------------------


def test_at_dispatch_refuses_a_missing_a_wrong_and_someone_elses_credential(harness: Harness) -> None:
    authority = harness.gateway().authority
    lookup = {"order_id": "O-5512"}
    assert dispatch(authority, principal("cust-ada"), "lookup_order", lookup) is None
    assert code(dispatch(authority, NOBODY, "lookup_order", lookup)) == "unauthorized"  # no grant
    assert code(dispatch(authority, principal("cust-gina"), "lookup_order", lookup)) == "cross_tenant"
    assert code(dispatch(authority, principal("cust-bob"), "lookup_order", lookup)) == "not_owner"
    assert code(dispatch(authority, principal("cust-bob"), "issue_refund", REFUND)) == "not_owner"
    # a credential the model offers in the arguments is refused, never read
    smuggled = {**lookup, "user_id": "cust-ada"}
    assert (
        code(dispatch(authority, principal("cust-bob"), "lookup_order", smuggled)) == "identity_in_arguments"
    )
    # business policy: a customer's refund above their limit, on an order of theirs that allows it
    big = {**REFUND, "order_id": "O-5520", "amount_cents": 6000}  # a customer may ask up to 5000
    refused = dispatch(authority, principal("cust-ada"), "issue_refund", big)
    assert refused is not None and (refused.code, refused.rule_id) == (
        "policy_violation",
        "refund.amount_limit",
    )
    assert code(dispatch(authority, principal("cust-ada"), "issue_refund_now", REFUND)) == "unknown_tool"


# ---- at execute ------------------------------------------------------------------------------


def test_at_execute_judges_a_read_again_for_the_threads_principal(harness: Harness) -> None:
    authority = harness.gateway().authority

    def refused(who: Principal, call: RecordedCall) -> str | None:
        return code(authority.at_execute(who, call, thread_id="t-read", proposal=None).rejection)

    assert refused(principal("cust-ada"), read()) is None
    assert refused(NOBODY, read()) == "unauthorized"
    assert refused(principal("cust-gina"), read()) == "cross_tenant"
    assert refused(principal("cust-bob"), read()) == "not_owner"
    # state that records a write tool as a read, or a tool the release lacks, matches no record
    as_read = RecordedCall(call_id="c-w", tool="issue_refund", read=True, arguments=REFUND)
    assert refused(principal("cust-ada"), as_read) == "state_mismatch"
    unknown = RecordedCall(call_id="c-u", tool="drop_tables", read=True, arguments={})
    assert refused(principal("cust-ada"), unknown) == "state_mismatch"


def test_at_execute_runs_a_write_only_through_its_own_stored_proposal(harness: Harness) -> None:
    gw = harness.gateway()
    authority = gw.authority
    facts = proposed(harness, "t-exec")
    stored = gw.store.proposals.get(facts["proposal_id"])
    assert stored is not None
    ada = principal("cust-ada")

    def refused(
        who: Principal, call: RecordedCall, proposal: ProposalRecord | None, thread: str = "t-exec"
    ) -> str | None:
        return code(authority.at_execute(who, call, thread_id=thread, proposal=proposal).rejection)

    assert refused(ada, write(stored), stored) is None
    # missing: the state names no proposal, or one the store does not hold
    assert refused(ada, write(stored, proposal_id=None), None) == "state_mismatch"
    # wrong: a call id, operation key or tool rewritten in state; the proposal of another thread
    assert refused(ada, write(stored, call_id="c-other"), stored) == "state_mismatch"
    assert refused(ada, write(stored, operation_key="op_other"), stored) == "state_mismatch"
    assert refused(ada, write(stored, tool="restart_service"), stored) == "state_mismatch"
    assert refused(ada, write(stored), stored, thread="t-elsewhere") == "state_mismatch"
    # someone else's: another requester or another tenant's principal carrying ada's proposal
    assert refused(principal("cust-bob"), write(stored), stored) == "state_mismatch"
    assert refused(principal("cust-gina"), write(stored), stored) == "state_mismatch"


# ---- before the claim ------------------------------------------------------------------------


def test_before_claim_refuses_a_missing_a_wrong_and_someone_elses_proposal(harness: Harness) -> None:
    gw = harness.gateway()
    authority = gw.authority
    op, proposal = approved(harness, gw, "t-claim")
    assert authority.before_claim(op, proposal) is None

    # missing: audited once per operation, code and release, however often it is asked
    for _ in range(2):
        missing = authority.before_claim(op, None)
        assert missing == ClaimRefusal("proposal_missing", "proposal missing")
    assert audited(gw, DELIVERY_REFUSED, op.operation_key) == ["proposal_missing"]
    # wrong: a row whose MAC does not verify, and one whose content no longer matches its digest
    forged = authority.before_claim(op, dataclasses.replace(proposal, authentic=False))
    assert forged == ClaimRefusal("forged_proposal", "forged_proposal: the proposal's MAC does not verify")
    bent = dataclasses.replace(proposal, arguments={**proposal.arguments, "amount_cents": 4999})
    assert authority.before_claim(op, bent) == ClaimRefusal("approval_invalid", "proposal digest mismatch")
    # someone else's: an operation row that borrows this proposal (and its approval)
    borrowed = dataclasses.replace(op, operation_key="op_borrowed")
    assert code(authority.before_claim(borrowed, proposal)) == "operation_mismatch"
    assert audited(gw, "approval.refused_at_execution") == [
        "forged_proposal",
        "approval_invalid",
        "operation_mismatch",
    ]
    # a release without the tool
    elsewhere = dataclasses.replace(
        authority, registry=Registry.of(gw.registry.release, [], gw.registry.resolver)
    )
    assert code(elsewhere.before_claim(op, proposal)) == "tool_not_in_release"
    assert authority.before_claim(op, proposal) is None  # nothing of that changed the operation


def test_before_claim_counts_no_approval_of_a_revoked_or_demoted_approver(harness: Harness) -> None:
    gw = harness.gateway()
    authority = gw.authority
    op, proposal = approved(harness, gw, "t-revoked")
    assert authority.before_claim(op, proposal) is None

    gw.directory.change_roles("fiona", roles=frozenset({"analyst"}), scopes=None, by=None)
    assert authority.before_claim(op, proposal) == ClaimRefusal(
        "approval_invalid", "2 more approval(s) needed"
    )
    gw.directory.revoke("fiona", by=None)
    assert code(authority.before_claim(op, proposal)) == "approval_invalid"
    voided = audited(gw, "approval.voided", op.operation_key)
    assert voided == ["reviewer_role_removed", "reviewer_inactive"]


def test_before_claim_counts_no_tampered_or_replayed_approval_record(harness: Harness) -> None:
    gw = harness.gateway()
    authority = gw.authority
    op, proposal = approved(harness, gw, "t-replay-source")
    (source,) = gw.store.approvals.for_proposal(proposal.proposal_id)
    pending = proposed(harness, "t-replay-target", call_id="c2", amount_cents=900)
    target = gw.store.proposals.get(pending["proposal_id"])
    assert target is not None
    columns = "reviewer_id, reviewer_roles, decision, digest, reason, decided_at, reviewer_tenant_id"

    # replayed: fiona's authentic approval of the first refund copied onto the second, MAC and all
    sql(
        gw,
        f"INSERT INTO approvals (approval_id, proposal_id, {columns}, mac)"
        f" SELECT 'appr_replayed', ?, {columns}, mac FROM approvals WHERE approval_id = ?",
        target.proposal_id,
        source.approval_id,
    )
    sql(gw, "UPDATE operations SET status = 'approved' WHERE operation_key = ?", target.operation_key)
    replayed_op = gw.store.operations.get(target.operation_key)
    assert replayed_op is not None
    assert authority.counted_decisions(target) == []
    assert code(authority.before_claim(replayed_op, target)) == "approval_invalid"

    # tampered: a second approval of the first refund, written with database access alone
    sql(
        gw,
        f"INSERT INTO approvals (approval_id, proposal_id, {columns}, mac)"
        f" SELECT 'appr_tampered', proposal_id, 'rita', reviewer_roles, decision, digest, reason,"
        f" decided_at, reviewer_tenant_id, mac FROM approvals WHERE approval_id = ?",
        source.approval_id,
    )
    assert [d.approval_id for d in authority.counted_decisions(proposal)] == [source.approval_id]
    assert authority.before_claim(op, proposal) is None  # fiona's own approval still stands alone
    # each count of decisions audits what it dropped: the replay twice, the tampered row twice
    assert audited(gw, "approval.voided") == ["forged_approval"] * 4


# ---- the clock -------------------------------------------------------------------------------


def test_every_time_decision_is_the_stores_clock_never_the_process_clock(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_now = harness.store.now()
    gw = harness.gateway()
    authority = gw.authority
    op, proposal = approved(harness, gw, "t-clock")
    window = timedelta(minutes=harness.policy.approval_minutes)

    set_store_now(monkeypatch, harness.store, real_now + window + timedelta(minutes=1))
    assert authority.expired(proposal)  # by the store's clock, whatever this process's says
    # a tool retired by the store's clock is refused at dispatch, the process clock unasked
    sunset = Deprecation(real_now - timedelta(days=1), timedelta(days=1, minutes=1), replacement=None)
    retiring = [
        dataclasses.replace(s, deprecation=sunset) if s.name == "lookup_order" else s
        for s in gw.registry.tools.values()
    ]
    later = dataclasses.replace(
        authority, registry=Registry.of(gw.registry.release, retiring, gw.registry.resolver)
    )
    assert (
        code(dispatch(later, principal("cust-ada"), "lookup_order", {"order_id": "O-5512"}))
        == "tool_deprecated"
    )
    # the executor asks the authority first: the approval lapsed, nothing is claimed
    delivery = gw.executor.deliver(op.operation_key, worker_id="w-skewed")
    assert (delivery.status, delivery.claim) == ("expired", "NOT_ATTEMPTED")
    assert harness.refunds() == 0

    set_store_now(monkeypatch, harness.store, real_now - timedelta(hours=1))  # the store lags
    assert not authority.expired(proposal)
    assert dispatch(later, principal("cust-ada"), "lookup_order", {"order_id": "O-5512"}) is None


# ---- one set of rules ------------------------------------------------------------------------


def test_an_order_changing_hands_is_seen_at_all_three_checkpoints(harness: Harness) -> None:
    """The ownership rule is one method: the data it reads changes once, every checkpoint sees it."""
    gw = harness.gateway()
    authority = gw.authority
    ada = principal("cust-ada")
    op, proposal = approved(harness, gw, "t-hands")
    assert dispatch(authority, ada, "lookup_order", {"order_id": "O-5512"}) is None
    assert authority.at_execute(ada, read(), thread_id="t-hands", proposal=None).rejection is None
    assert authority.before_claim(op, proposal) is None

    sql(gw, "UPDATE sor_orders SET customer_id = 'cust-bob' WHERE order_id = ?", "O-5512")
    assert code(dispatch(authority, ada, "lookup_order", {"order_id": "O-5512"})) == "not_owner"
    assert (
        code(authority.at_execute(ada, read(), thread_id="t-hands", proposal=None).rejection) == "not_owner"
    )
    refused = authority.before_claim(op, proposal)
    assert refused is not None and refused.code == "not_owner" and refused.reason.startswith("not_owner: ")
    assert audited(gw, "operation.refused", op.operation_key) == ["not_owner"]


def test_the_three_checkpoints_ask_the_same_rule_methods(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change to one rule of the authority (here: ownership refuses everything) is observed at
    dispatch, at execute and before the claim alike, and so is the tool's absence from a release."""
    gw = harness.gateway()
    authority = gw.authority
    ada = principal("cust-ada")
    op, proposal = approved(harness, gw, "t-same")
    asked: list[str] = []
    closed = Rejection(code="cross_tenant", message="closed for the test", retryable=False)

    def ownership(self: Authority, spec: Any, who: Principal, arguments: Any) -> Rejection:
        asked.append(who.user_id)
        return closed

    monkeypatch.setattr(Authority, "ownership", ownership)
    assert dispatch(authority, ada, "lookup_order", {"order_id": "O-5512"}) == closed
    assert authority.at_execute(ada, read(), thread_id="t-same", proposal=None).rejection == closed
    assert authority.before_claim(op, proposal) == ClaimRefusal(
        "cross_tenant", "cross_tenant: closed for the test"
    )
    assert asked == ["cust-ada", "cust-ada", "cust-ada"]  # the requester, re-read, before the claim
    monkeypatch.undo()

    without = dataclasses.replace(
        authority, registry=Registry.of(gw.registry.release, [], gw.registry.resolver)
    )
    assert code(dispatch(without, ada, "lookup_order", {"order_id": "O-5512"})) == "unknown_tool"
    assert (
        code(without.at_execute(ada, read(), thread_id="t-same", proposal=None).rejection) == "state_mismatch"
    )
    assert code(without.before_claim(op, proposal)) == "tool_not_in_release"
