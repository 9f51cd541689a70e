"""A person's verified outcome for a dead-lettered operation: who may record it, and recording it once.

An operation whose outcome nobody could determine waits in the dead-letter queue for a person
who checked the system of record (the payment found, or not). Recording that outcome is a
decision with consequences (a ``succeeded`` operation is never delivered again), so it follows
the approval rules: the person reviews for the operation's tenant, holds a role of the tool's
approval class, and is neither its requester nor an editor of its proposal (separation of
duties: nobody settles their own write). Every refusal, including a letter already resolved and
an operation no longer dead-lettered, is audited ``deadletter.refused`` with its code and
changes nothing.
"""

from __future__ import annotations

from toolgate.errors import ApprovalError, InvalidTransitionError, NotFoundError
from toolgate.graph.gateway import Gateway
from toolgate.policy.principal import Principal
from toolgate.store.records import OperationRecord

OUTCOMES = ("succeeded", "failed")


def resolve_dead_letter(
    gw: Gateway, reviewer: Principal, operation_key: str, outcome: str, note: str
) -> OperationRecord:
    """Record ``reviewer``'s ``outcome`` for the dead-lettered ``operation_key``; the operation as
    it now stands. `ApprovalError` (audited) when the rules above refuse it."""
    if outcome not in OUTCOMES:
        raise ApprovalError("invalid_outcome", "--outcome must be succeeded or failed")
    store = gw.store
    op = store.operations.get(operation_key)
    if op is None:
        _audit(gw, reviewer, operation_key, None, "not_found")
        raise NotFoundError(f"no operation {operation_key}")
    refusal = _refusal(gw, reviewer, op)
    if refusal is None and op.status != "dead_lettered":
        refusal = ApprovalError("not_dead_lettered", f"{operation_key} is {op.status}, not dead_lettered")
    if refusal is None and not store.operations.resolve_dead_letter(
        operation_key, resolution=outcome, resolved_by=reviewer.user_id, note=note
    ):
        refusal = ApprovalError("not_open", f"{operation_key} has no open dead letter")
    if refusal is not None:
        _audit(gw, reviewer, operation_key, op.tool, refusal.code)
        raise refusal
    resolved = gw.auditor.event(
        "deadletter.resolved",
        outcome,
        user_id=reviewer.user_id,
        operation_key=operation_key,
        tool=op.tool,
        proposal_id=op.proposal_id,
        detail={"note": note[:200]},
    )
    try:  # the outcome and its evidence in one transaction
        return store.operations.transition(
            operation_key,
            "dead_lettered",
            "succeeded" if outcome == "succeeded" else "failed",
            error=None if outcome == "succeeded" else {"kind": "resolved_failed", "message": note[:200]},
            audit=[resolved],
        )
    except InvalidTransitionError as exc:  # moved on between the check and the letter's close
        _audit(gw, reviewer, operation_key, op.tool, "not_dead_lettered")
        raise ApprovalError("not_dead_lettered", str(exc)) from exc


def _refusal(gw: Gateway, reviewer: Principal, op: OperationRecord) -> ApprovalError | None:
    """Why ``reviewer`` may not settle ``op`` (None: they may), from the store's records only."""
    if not reviewer.reviews_for(op.tenant_id):
        return ApprovalError("cross_tenant", f"{op.operation_key} belongs to another tenant")
    spec = gw.registry.get_for(op.tool, op.tenant_id)
    if spec is None or not (reviewer.roles & spec.approval.roles):
        return ApprovalError(
            "missing_role", f"resolving {op.tool} needs one of the roles of its approval class"
        )
    proposal = gw.store.proposals.get(op.proposal_id) if op.proposal_id else None
    if proposal is None or proposal.operation_key != op.operation_key:
        # who requested it is read from its own proposal: a row pointing elsewhere proves nothing
        return ApprovalError("operation_mismatch", f"{op.operation_key} is not its proposal's own")
    if reviewer.user_id == proposal.requester_id:
        return ApprovalError("self_resolution", "the requester cannot settle the outcome of their own write")
    if reviewer.user_id in proposal.editors:
        return ApprovalError("self_resolution", "a reviewer who edited the write cannot settle its outcome")
    return None


def _audit(gw: Gateway, reviewer: Principal, operation_key: str, tool: str | None, code: str) -> None:
    gw.auditor.record(
        "deadletter.refused",
        "refused",
        user_id=reviewer.user_id,
        code=code,
        operation_key=operation_key,
        tool=tool,
    )


__all__ = ["OUTCOMES", "resolve_dead_letter"]
