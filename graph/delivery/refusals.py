"""Refusing a delivery whose tool or proposal is gone, before any check of its approval.

An approved operation is only delivered by a process whose release has its tool (for its tenant)
and only against its stored proposal. When either is missing (a worker of another release, a
retired tool, a tampered or deleted proposal row) `Executor.deliver` claims nothing and the
operation stays approved; the refusal is audited as ``delivery.refused`` with a stable code:

- ``tool_not_in_release``: the release of this process has no such tool for the tenant;
- ``proposal_missing``: the operation names no proposal, or one the store does not hold.

The event carries the operation key, tool, proposal id and tenant (the store's own record of the
operation decides the tenant). A worker retries an operation it could not deliver for as long as
it runs (ever further apart: `toolgate.graph.worker.backoff`), so the refusal is audited once per
operation, code and release: a repeat finds the same event (`Store.audit.first`, one row
at most) and adds none (an unbounded stream of identical events would bury the one that matters).
"""

from __future__ import annotations

from toolgate.store.audit import Auditor
from toolgate.store.records import OperationRecord, ProposalRecord
from toolgate.tools.spec import ToolSpec

EVENT = "delivery.refused"
TOOL_NOT_IN_RELEASE = "tool_not_in_release"
PROPOSAL_MISSING = "proposal_missing"


def missing_refusal(
    auditor: Auditor,
    release: str,
    op: OperationRecord,
    spec: ToolSpec | None,
    proposal: ProposalRecord | None,
) -> str:
    """Why ``op`` cannot be delivered by ``release`` at all ("" when its tool and proposal are
    both present); a refusal is audited once (see the module)."""
    if spec is None:
        reason = f"tool {op.tool!r} is not in release {release}"
        audit_once(auditor, op, TOOL_NOT_IN_RELEASE, reason)
        return reason
    if proposal is None:
        reason = "proposal missing"
        audit_once(auditor, op, PROPOSAL_MISSING, reason)
        return reason
    return ""


def audit_once(auditor: Auditor, op: OperationRecord, code: str, reason: str) -> bool:
    """Record ``delivery.refused`` (``code``) for ``op`` unless this release already did; whether
    it was recorded now (a read-only store records nothing)."""
    store = auditor.store
    if store.read_only:
        return False
    # one indexed row at most (`Store.audit.first`), never the operation's whole trail
    if store.audit.first(op.operation_key, EVENT, code=code, tool_release=auditor.release):
        return False
    auditor.record(
        EVENT,
        "refused",
        code=code,
        operation_key=op.operation_key,
        proposal_id=op.proposal_id,
        tool=op.tool,
        tenant_id=op.tenant_id,
        detail={"reason": reason, "tenant_id": op.tenant_id},
    )
    return True


__all__ = ["EVENT", "PROPOSAL_MISSING", "TOOL_NOT_IN_RELEASE", "audit_once", "missing_refusal"]
