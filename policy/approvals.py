"""Approval rules: who may decide a proposal, and whether its decisions authorize execution.

Authority comes only from approval records an authenticated reviewer wrote into the store.
These functions are pure; `toolgate.graph.review.decisions` applies them when recording a decision,
and the execute node applies `verify_for_execution` again right before the claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from toolgate.canonical import digest
from toolgate.errors import ApprovalError
from toolgate.policy.principal import Principal
from toolgate.store.records import ApprovalRecord, ProposalRecord
from toolgate.tools.spec import ApprovalClass


def proposal_digest_valid(proposal: ProposalRecord) -> bool:
    """True when the stored digest still matches the stored content (detects tampering)."""
    return digest(proposal.content()) == proposal.digest


def effective_approval(proposal: ProposalRecord, base: ApprovalClass) -> ApprovalClass | None:
    """The class recorded on the proposal (the tool's, or raised by an escalation rule when it was
    made), or None when that record does not contain the tool's own ``base`` class: a class can be
    raised, never lowered. Never read from checkpointed state."""
    if proposal.approval_class == base.describe():
        return base
    try:
        recorded = ApprovalClass.parse(proposal.approval_class)
    except ValueError:
        return None
    return recorded if recorded.at_least(base) else None


def _effective(proposal: ProposalRecord, base: ApprovalClass) -> ApprovalClass:
    effective = effective_approval(proposal, base)
    if effective is None:
        raise ApprovalError(
            "approval_class_invalid",
            f"the proposal's approval class {proposal.approval_class!r} is below {base.describe()}",
        )
    return effective


def check_reviewer(
    proposal: ProposalRecord,
    approval: ApprovalClass,
    reviewer: Principal,
    *,
    seen_digest: str | None,
    now: datetime | None,
    expires_at: datetime,
) -> None:
    """Raise `ApprovalError` unless ``reviewer`` may decide ``proposal`` now (``approval``: the
    tool's own class; the proposal's recorded class, which may be higher, is the one applied).
    ``now``: the store's time expiry is judged by (None: the caller judges it in the decision's
    own transaction, `toolgate.store.approvals.Approvals.record_and_settle`)."""
    if not proposal_digest_valid(proposal):
        raise ApprovalError(
            "digest_mismatch", "proposal content does not match its digest; refusing to decide"
        )
    approval = _effective(proposal, approval)
    if seen_digest is not None and seen_digest != proposal.digest:
        raise ApprovalError("digest_mismatch", "the digest you reviewed is not this proposal's digest")
    if now is not None and now >= expires_at:
        raise ApprovalError("expired", f"proposal {proposal.proposal_id} expired at {proposal.expires_at}")
    if reviewer.user_id == proposal.requester_id:
        raise ApprovalError("self_approval", "the requester cannot review their own proposal")
    if reviewer.user_id in proposal.editors:
        raise ApprovalError("editor_approval", "a reviewer who edited the proposal cannot also approve it")
    if not reviewer.reviews_for(proposal.tenant_id):
        raise ApprovalError("cross_tenant", "reviewer belongs to another tenant")
    if not (reviewer.roles & approval.roles):
        raise ApprovalError(
            "missing_role", f"reviewing {proposal.tool} needs one of the roles {sorted(approval.roles)}"
        )


@dataclass(frozen=True, kw_only=True)
class ApprovalVerdict:
    """Whether the recorded decisions authorize execution of the proposal."""

    status: str
    """``approved``, ``rejected`` or ``pending``."""
    approvers: tuple[str, ...]
    """Reviewers whose valid approvals count."""
    reason: str
    """Reviewer's reason for a rejection, or what is still missing."""


def evaluate_decisions(
    proposal: ProposalRecord, approval: ApprovalClass, decisions: Sequence[ApprovalRecord]
) -> ApprovalVerdict:
    """Apply the approval class to the decisions that bind this proposal's digest.

    A decision counts only when its record is authentic (its MAC verified), it binds this digest,
    it was made for the proposal's tenant (by one of its people or by staff reviewing for it),
    and its reviewer held a qualifying role and is neither the requester nor one of the
    proposal's editors. Two-person means two distinct
    reviewers. Any counting rejection rejects. The class applied is the one recorded on the
    proposal (``approval`` is the tool's own; a record below it authorizes nothing).
    """
    effective = effective_approval(proposal, approval)
    if effective is None:
        return ApprovalVerdict(status="pending", approvers=(), reason="approval class on record is invalid")
    approval = effective
    valid = [
        d
        for d in decisions
        if d.authentic
        and d.digest == proposal.digest
        and d.reviewer_tenant_id == proposal.tenant_id
        and d.reviewer_id != proposal.requester_id
        and d.reviewer_id not in proposal.editors
        and set(d.reviewer_roles) & approval.roles
    ]
    for d in valid:
        if d.decision == "reject":
            return ApprovalVerdict(status="rejected", approvers=(), reason=d.reason or "rejected by reviewer")
    approvers = tuple(sorted({d.reviewer_id for d in valid if d.decision == "approve"}))
    sole = any(
        d.decision == "approve" and set(d.reviewer_roles) & approval.sole_approver_roles for d in valid
    )
    if approvers and (sole or len(approvers) >= approval.reviewers_required):
        return ApprovalVerdict(status="approved", approvers=approvers, reason="")
    missing = approval.reviewers_required - len(approvers)
    return ApprovalVerdict(status="pending", approvers=approvers, reason=f"{missing} more approval(s) needed")


def verify_for_execution(
    proposal: ProposalRecord,
    approval: ApprovalClass,
    decisions: Sequence[ApprovalRecord],
    *,
    handler_revision: str,
    release: str,
) -> ApprovalVerdict:
    """Re-check everything right before the claim: digest, revision, release and decisions."""
    if not proposal_digest_valid(proposal):
        return ApprovalVerdict(status="rejected", approvers=(), reason="proposal digest mismatch")
    if proposal.handler_revision != handler_revision or proposal.release != release:
        return ApprovalVerdict(
            status="rejected",
            approvers=(),
            reason=f"proposal is pinned to {proposal.release} {proposal.handler_revision}; not executable here",
        )
    if effective_approval(proposal, approval) is None:
        return ApprovalVerdict(status="rejected", approvers=(), reason="approval class on record is invalid")
    return evaluate_decisions(proposal, approval, decisions)


__all__ = [
    "ApprovalVerdict",
    "check_reviewer",
    "effective_approval",
    "evaluate_decisions",
    "proposal_digest_valid",
    "verify_for_execution",
]
