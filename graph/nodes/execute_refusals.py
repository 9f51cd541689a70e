"""Re-judging a call of the turn from trusted sources before execute runs it, and refusing it.

Checkpointed state only says which calls the turn holds; whether one may run now is decided again
here, from the loaded release, the principal's grants and the proposal in the store, never from
the state itself. A read runs only for a tool that is a read in the loaded release and that this
principal may use on this resource now; a write runs only through an operation whose proposal
belongs to this thread, tenant, requester, tool and call. These are the execute node's checks
(dispatch made its own); they are apart from running the calls so that every refusal is decided
and audited in one place, before anything runs.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage

from toolgate.graph.gateway import Gateway
from toolgate.graph.messages import rejection_message
from toolgate.graph.nodes._common import audit_call_id
from toolgate.graph.state import CallRecord, Outcome
from toolgate.policy.authorization import check_resource, check_scopes
from toolgate.policy.decisions import Rejection
from toolgate.policy.principal import Principal
from toolgate.store.audit_records import AuditEventIn
from toolgate.tools.spec import ToolSpec

STATE_MISMATCH = Rejection(
    code="state_mismatch",
    message="Not run: this call does not match the gateway's own records for this task.",
    retryable=False,
)


def refuse_call(
    gw: Gateway,
    record: CallRecord,
    principal: Principal,
    rejection: Rejection,
    common: dict[str, Any],
    accepted: AuditEventIn | None = None,
) -> tuple[ToolMessage, Outcome, bool]:
    """Answer a call that execute will not run (audited like a dispatch refusal, in one append
    with the read's ``accepted`` event)."""
    call_id, tool = record["call_id"], record.get("tool", "unknown")
    refused = gw.auditor.event(
        "call.rejected",
        "rejected",
        user_id=principal.user_id,
        code=rejection.code,
        call_id=audit_call_id(call_id),
        tool=tool,
        detail={"message": rejection.message[:300], "stage": "execute"},
        **common,
    )
    gw.auditor.record_all([*([accepted] if accepted else []), refused])
    outcome = Outcome(call_id=call_id, tool=tool, status="rejected", detail=rejection.code)
    return rejection_message(call_id, tool, rejection), outcome, True


def read_refusal(
    gw: Gateway, spec: ToolSpec | None, record: CallRecord, principal: Principal
) -> Rejection | None:
    """Why a read recorded in state may not run for ``principal`` now (None: it may)."""
    if spec is None or spec.is_write:
        return STATE_MISMATCH
    return check_scopes(spec, principal) or check_resource(
        spec, principal, record.get("arguments", {}), gw.registry.resolver
    )


def write_refusal(
    gw: Gateway, spec: ToolSpec | None, record: CallRecord, principal: Principal, task: str
) -> Rejection | None:
    """Why a write recorded in state may not be delivered from this thread (None: it may).

    The operation and its proposal are read from the store: they must be this call's, proposed in
    this thread, for this tenant and requester."""
    proposal = gw.executor.proposal(record.get("proposal_id", ""))
    if (
        spec is None
        or not spec.is_write
        or proposal is None
        or proposal.operation_key != record.get("operation_key")
        or proposal.thread_id != task
        or proposal.tenant_id != principal.tenant_id
        or proposal.requester_id != principal.user_id
        or proposal.tool != spec.name
        or proposal.call_id != record.get("call_id")
    ):
        return STATE_MISMATCH
    return None


__all__ = ["STATE_MISMATCH", "read_refusal", "refuse_call", "write_refusal"]
