"""A reviewer's edit: never a change to a proposal, always a new one that needs its own approval.

The edited call must name the same tool (an edit cannot switch tools), its arguments pass the
same dispatch checks as a model's call made by the requester (schema, identity fields, resource
ownership, cross-field validation, policy), and the original is rejected as superseded. The new
proposal carries ``supersedes`` so the thread finds it on resume, and ``editors``: whoever shaped
its arguments can never count as its approver.
"""

from __future__ import annotations

from typing import Any

from toolgate.errors import ApprovalError, NotFoundError
from toolgate.graph.context import Context
from toolgate.graph.deps import Gateway
from toolgate.graph.nodes.dispatch import ProposedCall, judge
from toolgate.graph.proposals import draft_proposal, store_proposal
from toolgate.graph.review import decide
from toolgate.policy.principal import Principal
from toolgate.store.records import ProposalRecord


def edit_proposal(
    gw: Gateway,
    proposal_id: str,
    reviewer: Principal,
    *,
    tool: str,
    arguments: dict[str, Any],
) -> ProposalRecord:
    """Replace a pending proposal with an edited one; returns the new, pending proposal.

    The edited call is judged as the original requester would be judged now (their identity as
    the store records it)."""
    original = gw.store.get_proposal(proposal_id)
    if original is None:
        raise NotFoundError(f"no proposal {proposal_id}")
    common = {"proposal_id": proposal_id, "operation_key": original.operation_key, "tool": original.tool}
    refusal: ApprovalError | None = None
    requester = gw.directory.active(original.requester_id, original.tenant_id)
    if reviewer.tenant_id != original.tenant_id:
        refusal = ApprovalError("cross_tenant", "reviewer belongs to another tenant")
    elif tool != original.tool:
        refusal = ApprovalError("tool_switch", "an edit cannot switch to another tool")
    elif requester is None:
        refusal = ApprovalError("requester_inactive", "the requester is no longer an active identity")
    else:
        verdict = judge(
            gw,
            requester,
            ProposedCall(original.call_id, tool, arguments, None),
            ctx=Context(),
            counts={},
            now=gw.store.now(),
        )
        if verdict.rejection is not None:
            refusal = ApprovalError(
                verdict.rejection.code, f"edited arguments refused: {verdict.rejection.message}"
            )
    if refusal is not None:
        gw.auditor.record(
            "approval.refused",
            "refused",
            user_id=reviewer.user_id,
            code=refusal.code,
            detail={"reason": str(refusal)[:300], "edit": True},
            **common,
        )
        raise refusal
    spec = gw.registry.get(tool)
    assert spec is not None
    validated = spec.args_model.model_validate(arguments).model_dump(mode="json")
    draft = draft_proposal(
        gw,
        spec,
        tenant_id=original.tenant_id,
        requester_id=original.requester_id,
        thread_id=original.thread_id,
        call_id=original.call_id,
        arguments=validated,
        supersedes=proposal_id,
        trace_id=original.trace_id,
        editors=(*original.editors, reviewer.user_id),
    )
    if draft.operation_key == original.operation_key:
        raise ApprovalError("no_change", "the edited arguments are identical; approve the original instead")
    decide(
        gw, proposal_id, reviewer, "reject", reason=f"edited by reviewer; superseded by {draft.proposal_id}"
    )
    stored, _, _ = store_proposal(gw, spec, draft, actor=reviewer.user_id)
    gw.auditor.record(
        "proposal.edited",
        "superseded",
        user_id=reviewer.user_id,
        detail={"superseded_by": stored.proposal_id, "new_digest": stored.digest},
        **common,
    )
    return stored


def current_proposal(gw: Gateway, proposal_id: str) -> ProposalRecord | None:
    """Follow edits from ``proposal_id`` to the newest proposal that supersedes it (or itself)."""
    current = gw.store.get_proposal(proposal_id)
    seen = {proposal_id}
    while current is not None:
        newer = gw.store.superseding(current.proposal_id)
        if newer is None or newer.proposal_id in seen:
            return current
        seen.add(newer.proposal_id)
        current = newer
    return None


__all__ = ["current_proposal", "edit_proposal"]
