"""Who may see which proposal and operation through the approval API, and the 404 for the rest.

A caller sees a proposal they requested, or one of their tenant's whose tool they may review;
an operation's audit events only an auditor of its tenant (`toolgate.policy.audit_readers`).
Anything else answers exactly like an unknown id (no oracle for guessing ids across tenants) and
is audited as ``api.refused``. This rule is its own module because every read and every decision
route starts with it, and a route that skipped it would leak another tenant's proposals.
"""

from __future__ import annotations

from toolgate.graph.gateway import Gateway
from toolgate.graph.server.serving import Refusal
from toolgate.policy.audit_readers import audit_scope, own_tenant_scope
from toolgate.policy.identities import AUDITOR_ROLE
from toolgate.policy.principal import Principal
from toolgate.store.records import OperationRecord, ProposalRecord


def visible(gw: Gateway, caller: Principal, proposal: ProposalRecord) -> bool:
    """True when ``caller`` may see ``proposal``: its requester (who may follow it, and is refused
    by `decide` if they try to decide it), or a reviewer for its tenant (one of its people, or
    staff granted that tenant) holding a role of its tool's approval class."""
    if proposal.requester_id == caller.user_id and proposal.tenant_id == caller.tenant_id:
        return True
    if not caller.reviews_for(proposal.tenant_id):
        return False
    spec = gw.registry.get(proposal.tool)
    return spec is not None and bool(caller.roles & spec.approval.roles)


def _unseen(
    gw: Gateway,
    caller: Principal,
    route: str,
    what: str,
    *,
    proposal: ProposalRecord | None = None,
    operation: OperationRecord | None = None,
) -> Refusal:
    """Audit a request for a record the caller may not see (or that does not exist) as
    ``api.refused``; the caller gets the same 404 either way."""
    gw.auditor.record(
        "api.refused",
        "refused",
        user_id=caller.user_id,
        code="not_visible" if proposal or operation else "not_found",
        proposal_id=proposal.proposal_id if proposal else None,
        operation_key=operation.operation_key if operation else None,
        tool=proposal.tool if proposal else operation.tool if operation else None,
        detail={"route": route, "status": 404, "tenant_id": caller.tenant_id},
    )
    return Refusal(404, "not_found", f"no such {what}")


def visible_proposal(
    gw: Gateway, caller: Principal, proposal_id: str, route: str
) -> tuple[ProposalRecord, OperationRecord]:
    """The proposal ``proposal_id`` and its operation when ``caller`` may see it; else a 404
    `Refusal`, audited as ``api.refused`` for ``route``."""
    proposal = gw.store.proposals.get(proposal_id)
    operation = gw.store.operations.get(proposal.operation_key) if proposal else None
    if proposal is None or operation is None:
        raise _unseen(gw, caller, route, "proposal")
    if not visible(gw, caller, proposal):
        raise _unseen(gw, caller, route, "proposal", proposal=proposal)
    return proposal, operation


def visible_operation(
    gw: Gateway, caller: Principal, operation_key: str, route: str
) -> tuple[OperationRecord, ProposalRecord]:
    """An operation is visible through its proposal (reads have none and are not reviewed here)."""
    operation = gw.store.operations.get(operation_key)
    proposal = gw.store.proposals.get(operation.proposal_id) if operation and operation.proposal_id else None
    if operation is None:
        raise _unseen(gw, caller, route, "operation")
    if proposal is None or operation.tenant_id != proposal.tenant_id or not visible(gw, caller, proposal):
        raise _unseen(gw, caller, route, "operation", operation=operation)
    return operation, proposal


def audited_operation(gw: Gateway, caller: Principal, operation_key: str, route: str) -> OperationRecord:
    """The operation whose audit events ``caller`` may read, by the one rule every door shares.

    An auditor covering the operation's tenant reads it (reads included, which have no proposal).
    A person who may follow the operation but holds no auditor role is refused ``not_auditor``
    (403), recorded as a refused ``audit.read`` exactly as the CLI records it; everyone else gets
    the 404 of an unknown id."""
    scope = audit_scope(caller)
    if scope is None:
        followed, _ = visible_operation(gw, caller, operation_key, route)
        refused = own_tenant_scope(caller)
        gw.auditor.record(
            "audit.read",
            "refused",
            user_id=caller.user_id,
            code="not_auditor",
            tenant_id=caller.tenant_id,
            detail={"command": f"GET {route}", "scope": refused.label, "subject": followed.operation_key},
        )
        raise Refusal(
            403,
            "not_auditor",
            f"{caller.user_id!r} may follow this operation but not read its audit events "
            f"(needs role {AUDITOR_ROLE})",
        )
    operation = gw.store.operations.get(operation_key)
    if operation is None:
        raise _unseen(gw, caller, route, "operation")
    if not scope.covers(operation.tenant_id):
        raise _unseen(gw, caller, route, "operation", operation=operation)
    return operation


__all__ = ["audited_operation", "visible", "visible_operation", "visible_proposal"]
