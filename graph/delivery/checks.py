"""Re-judging an approved write right before its claim: which decisions still count, and whether
the approval and the requester's hold on every resource still stand.

An approval is checked when it is given, but a write runs later: a reviewer may have left, a
record may be forged, the release or the handler may have changed, an order may have changed
hands. The executor (`toolgate.graph.delivery.executor`) asks these checks at every delivery, from the
store and the identity directory, never from anything the thread carries. They are apart from the
claim and run mechanics because the review API and the operator's verify command count decisions
the same way without delivering anything.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from toolgate.policy.approvals import verify_for_execution
from toolgate.policy.authorization import check_resource
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.records import ApprovalRecord, OperationRecord, ProposalRecord
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ToolSpec


@dataclass(frozen=True)
class DeliveryChecks:
    """The checks an approved write must pass at delivery time, for one release."""

    store: Store
    registry: Registry
    auditor: Auditor
    directory: IdentityDirectory
    """Tells whether an approver is still an active identity of the proposal's tenant."""

    def counted_decisions(self, proposal: ProposalRecord) -> list[ApprovalRecord]:
        """The proposal's decisions that may count: authentic records by reviewers who are still
        active identities reviewing for the proposal's tenant (its own people or staff), each with
        only the recorded roles its reviewer still holds. Every other one is audited and dropped
        (``forged_approval``, ``reviewer_inactive``, ``reviewer_role_removed``)."""
        counted: list[ApprovalRecord] = []
        for decision in self.store.approvals.for_proposal(proposal.proposal_id):
            reviewer = self.directory.reviewer_for(decision.reviewer_id, proposal.tenant_id)
            # a decision counts with the roles its reviewer held then and still holds now
            kept = tuple(r for r in decision.reviewer_roles if reviewer is not None and r in reviewer.roles)
            if not decision.authentic:
                code = "forged_approval"
            elif reviewer is None:
                code = "reviewer_inactive"
            elif not kept:
                code = "reviewer_role_removed"
            else:
                counted.append(replace(decision, reviewer_roles=kept))
                continue
            if self.store.read_only:  # a verification run reports, it never writes
                continue
            self.auditor.record(
                "approval.voided",
                "refused",
                code=code,
                proposal_id=proposal.proposal_id,
                operation_key=proposal.operation_key,
                tool=proposal.tool,
                detail={"approval_id": decision.approval_id},
            )
        return counted

    def refusal(self, op: OperationRecord, spec: ToolSpec, proposal: ProposalRecord) -> str:
        """Why the approved ``op`` (of ``spec``, proposed as ``proposal``) may not be claimed now
        ("": it may). The approval is verified again from the decisions that still count, then
        every resource is resolved again for the requester."""
        if not proposal.authentic:
            # its row's MAC does not verify: inserted with database access alone (or before
            # proposals carried a MAC); nothing it says is trusted, its approvals included
            return self._refused(op, "forged_proposal", "the proposal's MAC does not verify")
        if (proposal.operation_key, proposal.tool, proposal.tenant_id) != (
            op.operation_key,
            op.tool,
            op.tenant_id,
        ):
            # operation rows carry no MAC: one that names another operation's proposal (inserted or
            # re-pointed with database access) may not borrow its approvals and run it again
            return self._refused(op, "operation_mismatch", "the operation is not its proposal's own")
        verdict = verify_for_execution(
            proposal,
            spec.approval,
            self.counted_decisions(proposal),
            handler_revision=spec.handler_revision,
            release=self.registry.release,
        )
        if verdict.status != "approved":
            self._refused(op, "approval_invalid", verdict.reason)
            return verdict.reason
        return self.ownership_refusal(spec, proposal)

    def _refused(self, op: OperationRecord, code: str, reason: str) -> str:
        """Audit ``approval.refused_at_execution`` (``code``, ``reason``) for ``op`` unless the
        store is read-only (a verification run reports, it never writes); ``code: reason``."""
        if not self.store.read_only:
            self.auditor.record(
                "approval.refused_at_execution",
                "refused",
                code=code,
                operation_key=op.operation_key,
                proposal_id=op.proposal_id,
                tool=op.tool,
                detail={"reason": reason},
            )
        return f"{code}: {reason}"

    def ownership_refusal(self, spec: ToolSpec, proposal: ProposalRecord) -> str:
        """Re-resolve every resource the proposal names for its requester, right before the claim:
        an order that changed hands since approval is not touched. The requester's staff roles
        come from their identity row; one no longer active keeps none."""
        requester = self.directory.active(proposal.requester_id, proposal.tenant_id) or Principal(
            user_id=proposal.requester_id, tenant_id=proposal.tenant_id
        )
        refused = check_resource(spec, requester, proposal.arguments, self.registry.resolver)
        if refused is None:
            return ""
        if not self.store.read_only:
            self.auditor.record(
                "operation.refused",
                "refused",
                code=refused.code,
                operation_key=proposal.operation_key,
                proposal_id=proposal.proposal_id,
                tool=proposal.tool,
                detail={"stage": "execute"},
            )
        return f"{refused.code}: {refused.message}"


__all__ = ["DeliveryChecks"]
