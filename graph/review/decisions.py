"""Recording a reviewer's decision: the only way authority enters the system.

The reviewer is authenticated by the caller (`IdentityDirectory.authenticate` at every door).
The rules are checked, then the decision is appended as an immutable record bound to the
proposal's digest and signed with the store's approval key, stamped and judged for expiry by
the time of the transaction that appends it (`Approvals.record_and_settle`: the store's clock,
no read of its own). When the approval class is satisfied by the decisions that still count
(`Authority.counted_decisions`) the operation moves ``pending_approval -> approved`` (or
``rejected``) by a conditional update in that same transaction. Every refusal is audited too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from toolgate.clock import new_id, parse_iso
from toolgate.errors import ApprovalError, InvalidTransitionError, NotFoundError
from toolgate.graph.gateway import Gateway
from toolgate.policy.approvals import ApprovalVerdict, check_reviewer, evaluate_decisions
from toolgate.policy.identities import IdentitySnapshot
from toolgate.policy.principal import Principal
from toolgate.store.audit_records import AuditEventIn
from toolgate.store.records import (
    ApprovalRecord,
    OperationRecord,
    OperationStatus,
    ProposalRecord,
    Settlement,
)


@dataclass(frozen=True, kw_only=True)
class ReviewOutcome:
    """Result of recording one decision."""

    proposal: ProposalRecord
    operation: OperationRecord
    verdict: ApprovalVerdict
    record: ApprovalRecord


def decide(
    gw: Gateway,
    proposal_id: str,
    reviewer: Principal,
    decision: Literal["approve", "reject"],
    *,
    reason: str = "",
    seen_digest: str | None = None,
) -> ReviewOutcome:
    """Record ``reviewer``'s decision on ``proposal_id``; raises `ApprovalError` when refused.

    Every row the rules judge (the proposal, its operation, its replacement, the operation of the
    proposal it replaces, its decisions and the identities of the reviewer and of everyone those
    decisions name) is read in one statement (`toolgate.store.snapshots`), so all of them are
    one moment of the store; the decision's own transaction re-checks what may have changed
    since (expiry by its clock, one decision per reviewer, the operation's status)."""
    snapshot = gw.store.snapshots.for_decision(proposal_id, people=[reviewer.user_id])
    proposal = snapshot.proposal
    if proposal is None:
        raise NotFoundError(f"no proposal {proposal_id}")
    operation = snapshot.operation
    assert operation is not None
    people = IdentitySnapshot(snapshot.identities)
    spec = gw.registry.get(proposal.tool)
    common = {
        "proposal_id": proposal_id,
        "operation_key": proposal.operation_key,
        "tool": proposal.tool,
        "handler_revision": proposal.handler_revision,
        "trace_id": proposal.trace_id,
        "thread_id": proposal.thread_id,
        "call_id": proposal.call_id,
    }
    try:
        if not proposal.authentic:  # inserted with database access alone, or from before the MAC
            raise ApprovalError(
                "forged_proposal", f"proposal {proposal_id} is not authentic; propose it again"
            )
        current = people.active(reviewer.user_id, reviewer.tenant_id)  # home tenant, as authenticated
        if current is None:
            raise ApprovalError("reviewer_inactive", f"{reviewer.user_id!r} is not an active identity")
        reviewer = current  # roles and tenant as the store records them now, not as the caller says
        if spec is None or proposal.release != gw.registry.release:
            raise ApprovalError("wrong_release", f"proposal belongs to release {proposal.release}")
        # the floor: the class the release's policy gives these stored arguments; the class on
        # the proposal record (never the thread's state) applies, and may not be below it
        required = gw.policy.escalation(spec.name, spec.approval, proposal.arguments).approval
        # expiry by the store's clock is judged in the decision's own transaction (below); one
        # already recorded is refused here
        if operation.status == "expired":
            raise ApprovalError("expired", f"proposal {proposal_id} expired at {proposal.expires_at}")
        if operation.status != "pending_approval":
            raise ApprovalError("not_pending", f"proposal is {operation.status}, not pending_approval")
        if decision == "approve" and snapshot.superseding is not None:
            # a reviewer's edit replaced it: only the edited proposal may run, never both
            raise ApprovalError("superseded", f"proposal {proposal_id} was edited; review its replacement")
        if decision == "approve" and proposal.supersedes and snapshot.replaced_status != "rejected":
            # an edit counts once the proposal it replaces is rejected (final), never beside it
            raise ApprovalError("original_not_rejected", f"{proposal.supersedes} it replaces is not rejected")
        if decision == "reject" and not reason.strip():
            raise ApprovalError("reason_required", "a rejection needs a reason for the requester")
        check_reviewer(
            proposal,
            required,
            reviewer,
            seen_digest=seen_digest,
            now=None,  # judged by the time of the transaction that records the decision
            expires_at=parse_iso(proposal.expires_at),
        )
        record = ApprovalRecord(
            approval_id=new_id("apr"),
            proposal_id=proposal_id,
            reviewer_id=reviewer.user_id,
            reviewer_tenant_id=proposal.tenant_id,  # the tenant decided for (check_reviewer passed)
            reviewer_roles=tuple(sorted(reviewer.roles)),
            decision=decision,
            digest=proposal.digest,
            reason=reason.strip(),
            decided_at="",  # stamped with the time of the transaction that records it
        )
        # The verdict this decision completes, judged before it is stored: when it settles the
        # proposal, the decision and the operation's change commit in one transaction.
        settling = evaluate_decisions(
            proposal,
            required,
            [
                *gw.authority.counted_decisions(proposal, snapshot.decisions, people),
                dataclasses.replace(record, authentic=True),
            ],
        )
        recorded_event = gw.auditor.event(
            "approval.recorded",
            decision,
            user_id=reviewer.user_id,
            detail={"digest": proposal.digest, "roles": sorted(reviewer.roles), "reason": record.reason},
            **common,
        )
        settle = (
            Settlement(
                operation_key=proposal.operation_key,
                from_status="pending_approval",
                to_status="approved" if settling.status == "approved" else "rejected",
                audit=[settled_event(gw, settling, reviewer, common)],
            )
            if settling.status in ("approved", "rejected")
            else None
        )
        stamped: list[ApprovalRecord] = []

        def at(now: str) -> ApprovalRecord:
            stamped.append(dataclasses.replace(record, decided_at=now))
            return stamped[-1]

        try:  # one reading of the store's clock: the transaction's own, free on PostgreSQL
            recorded, settled = gw.store.approvals.record_and_settle(
                at,
                audit=[recorded_event],
                settle=settle,
                expires_at=proposal.expires_at,
                while_pending=proposal.operation_key,  # a decision that settled it meanwhile wins
            )
        except ApprovalError as late:
            if late.code != "expired":
                raise
            gw.executor.expire_if_due(operation, proposal=proposal)  # to expired, audited proposal.expired
            raise ApprovalError("expired", f"proposal {proposal_id} expired at {proposal.expires_at}") from late
        record = stamped[-1]
        if not recorded:
            latest = gw.store.operations.get(proposal.operation_key)
            if latest is not None and latest.status != "pending_approval":  # settled since the snapshot
                raise ApprovalError("not_pending", f"proposal is {latest.status}, not pending_approval")
            raise ApprovalError("already_decided", "this reviewer already decided this proposal")
    except ApprovalError as exc:
        gw.auditor.record(
            "approval.refused",
            "refused",
            user_id=reviewer.user_id,
            code=exc.code,
            detail={"reason": str(exc)},
            **common,
        )
        raise
    if settled is not None:
        return ReviewOutcome(proposal=proposal, operation=settled, verdict=settling, record=record)
    # Not settled with the decision (it does not complete the verdict, another decision settled
    # the proposal first, or a rejection is on record): judge every decision stored by now.
    verdict = evaluate_decisions(proposal, required, gw.authority.counted_decisions(proposal))
    if verdict.status in ("approved", "rejected"):
        target: OperationStatus = "approved" if verdict.status == "approved" else "rejected"
        try:
            operation = gw.store.operations.transition(
                proposal.operation_key,
                "pending_approval",
                target,
                audit=[settled_event(gw, verdict, reviewer, common)],
            )
        except InvalidTransitionError:
            operation = gw.store.operations.get(proposal.operation_key) or operation
    return ReviewOutcome(proposal=proposal, operation=operation, verdict=verdict, record=record)


def settled_event(
    gw: Gateway, verdict: ApprovalVerdict, reviewer: Principal, common: dict[str, Any]
) -> AuditEventIn:
    """``proposal.approved`` or ``proposal.rejected``, appended with the operation's change."""
    return gw.auditor.event(
        f"proposal.{verdict.status}",
        verdict.status,
        user_id=reviewer.user_id,
        detail={"approvers": len(verdict.approvers)},
        **common,
    )


def handler_timeout_s(gw: Gateway, proposal: ProposalRecord) -> float | None:
    """The hard timeout the proposal's handler runs under, shown to its reviewer: read from the
    release that proposed it (None when this gateway serves another release or lost the tool)."""
    spec = gw.registry.get(proposal.tool) if gw.registry.release == proposal.release else None
    return spec.timeout_s if spec is not None else None


__all__ = ["ReviewOutcome", "decide", "handler_timeout_s", "settled_event"]
