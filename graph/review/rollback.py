"""Undoing a completed effect: only by its declared rollback operation, itself a new proposal.

Rolling back code never undoes an effect in the world; only a new operation can. A completed
operation whose tool declares a rollback tool and argument mapping can be reversed by proposing
that operation: it passes the same dispatch checks as any call by the requester and waits for its
own approval. Proposing it twice finds the same proposal (same operation key).
"""

from __future__ import annotations

from typing import Any

from toolgate.errors import ApprovalError, NotFoundError
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.review.proposals import draft_proposal, store_proposal
from toolgate.policy.authority import ProposedCall
from toolgate.policy.principal import Principal
from toolgate.store.records import ProposalRecord
from toolgate.tools.spec import Rollback, ToolSpec


def propose_rollback(gw: Gateway, operation_key: str, requester: Principal) -> ProposalRecord:
    """The (pending) proposal that undoes ``operation_key``; raises (and audits) when impossible.

    The tenant is checked first, so someone of another tenant learns nothing about the operation."""
    op = gw.store.operations.get(operation_key)
    original = gw.store.proposals.get(op.proposal_id) if op is not None and op.proposal_id else None
    try:
        target, arguments = _rollback_call(gw, operation_key, requester)
    except (ApprovalError, NotFoundError) as exc:
        gw.auditor.record(
            "rollback.refused",
            "refused",
            user_id=requester.user_id,
            code=getattr(exc, "code", "not_found"),
            operation_key=operation_key if original is not None else None,
            tool=op.tool if op is not None and original is not None else None,
            detail={"reason": str(exc)[:300]},
        )
        raise
    assert op is not None and original is not None
    call_id = f"rollback-{operation_key[3:15]}"
    draft = draft_proposal(
        gw,
        target,
        tenant_id=original.tenant_id,
        requester_id=requester.user_id,
        thread_id=f"rollback:{operation_key}",
        call_id=call_id,
        arguments=arguments,
    )
    proposal, _, _ = store_proposal(gw, target, draft, actor=requester.user_id)
    gw.auditor.record(
        "rollback.proposed",
        "pending_approval",
        user_id=requester.user_id,
        operation_key=operation_key,
        proposal_id=proposal.proposal_id,
        tool=op.tool,
        detail={"rollback_operation_key": proposal.operation_key, "rollback_tool": target.name},
    )
    return proposal


def _rollback_call(gw: Gateway, operation_key: str, requester: Principal) -> tuple[ToolSpec, dict[str, Any]]:
    """The rollback tool and its judged arguments, or the reason there is none for ``requester``."""
    op = gw.store.operations.get(operation_key)
    original = gw.store.proposals.get(op.proposal_id) if op is not None and op.proposal_id else None
    if op is None or original is None:
        raise NotFoundError(f"no operation {operation_key}")
    if requester.tenant_id != original.tenant_id:
        raise ApprovalError("cross_tenant", "the rollback must be requested within the operation's tenant")
    spec = gw.registry.get(op.tool)
    if op.status != "succeeded":
        raise ApprovalError(
            "not_completed", f"only a completed operation can be rolled back (it is {op.status})"
        )
    if (
        spec is None
        or not isinstance(spec.rollback, Rollback)
        or not spec.rollback.tool
        or not spec.rollback.arguments
    ):
        reason = spec.rollback_text() if spec else "tool not in this release"
        raise ApprovalError("no_rollback", f"{op.tool} declares no rollback operation: {reason}")
    target = gw.registry.get_for(spec.rollback.tool, original.tenant_id)
    if target is None:
        raise ApprovalError("no_rollback", f"rollback tool {spec.rollback.tool!r} is not in this release")
    verdict = gw.authority.at_dispatch(
        requester,
        ProposedCall(
            f"rollback-{operation_key[3:15]}", target.name, spec.rollback.arguments(original.arguments), None
        ),
        counts={},
        max_identical_calls=Context().max_identical_calls,
        now=gw.store.now(),
    )
    if verdict.rejection is not None:
        raise ApprovalError(verdict.rejection.code, f"rollback refused: {verdict.rejection.message}")
    return target, verdict.arguments


__all__ = ["propose_rollback"]
