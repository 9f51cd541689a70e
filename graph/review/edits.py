"""A reviewer's edit: never a change to a proposal, always a new one that needs its own approval.

The edited call must name the same tool (an edit cannot switch tools), its arguments pass the
same dispatch checks as a model's call made by the requester (schema, identity fields, resource
ownership, cross-field validation, policy), and the original is rejected as superseded. The new
proposal carries ``supersedes`` so the thread finds it on resume, and ``editors``: whoever shaped
its arguments can never count as its approver.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from toolgate.clock import parse_iso
from toolgate.errors import ApprovalError, InvalidTransitionError, NotFoundError
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.review.decisions import decide
from toolgate.graph.review.proposals import carry_delegation, draft_proposal, store_proposal
from toolgate.graph.waits.delegation import carry_for_wait
from toolgate.policy.approvals import check_reviewer
from toolgate.policy.authority import ProposedCall
from toolgate.policy.principal import Principal
from toolgate.store.records import OperationRecord, ProposalRecord
from toolgate.tools.spec import ToolSpec

SUPERSEDED_BY = "edited by reviewer; superseded by "
"""How the rejection of an edited proposal starts; the replacement's id follows. That signed
record names the edit that replaced it, whatever other edits were stored beside it."""


def edit_proposal(
    gw: Gateway,
    proposal_id: str,
    reviewer: Principal,
    *,
    tool: str,
    arguments: dict[str, Any],
) -> ProposalRecord:
    """Replace a pending proposal with an edited one; returns the new, pending proposal.

    The editor must be someone who could decide the original (active identity, tenant, role, not
    the requester), and the edited call is judged as the original requester would be judged now
    (their identity as the store records it). Every refusal is audited."""
    original = gw.store.proposals.get(proposal_id)
    if original is None:
        raise NotFoundError(f"no proposal {proposal_id}")
    common = {"proposal_id": proposal_id, "operation_key": original.operation_key, "tool": original.tool}
    try:
        if not original.authentic:  # never edited into an authentic replacement
            raise ApprovalError(
                "forged_proposal", f"proposal {proposal_id} is not authentic; propose it again"
            )
        editor, spec, validated = _judge_edit(gw, original, reviewer, tool, arguments)
    except ApprovalError as refusal:
        gw.auditor.record(
            "approval.refused",
            "refused",
            user_id=reviewer.user_id,
            code=refusal.code,
            detail={"reason": str(refusal)[:300], "edit": True},
            **common,
        )
        raise
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
        editors=(*original.editors, editor.user_id),
        requester_text=original.requester_text,  # the requester's words, not the editor's
    )
    # the replacement exists before the original is rejected: a failure in between leaves a pending
    # proposal that expires, never an original rejected with nothing in its place
    stored, _, _ = store_proposal(gw, spec, draft, actor=editor.user_id)
    carry_delegation(gw, spec, original, stored)  # the requester's sealed credentials, not the editor's
    carry_for_wait(gw.store, gw.auditor, original, stored)  # and those sealed for its job's wait
    try:
        decide(gw, proposal_id, editor, "reject", reason=SUPERSEDED_BY + draft.proposal_id)
    except ApprovalError:  # the original was decided meanwhile: it stands, its replacement may never run
        _void(gw, stored, editor)
        raise
    gw.auditor.record(
        "proposal.edited",
        "superseded",
        user_id=editor.user_id,
        detail={"superseded_by": stored.proposal_id, "new_digest": stored.digest},
        **common,
    )
    return stored


def _void(gw: Gateway, replacement: ProposalRecord, editor: Principal) -> None:
    """Reject ``replacement`` (audited ``proposal.rejected``, code ``edit_lost_race``) when the
    original it replaces could not be rejected: it was approved or decided first. (Nobody can have
    approved the replacement meanwhile: `decide` approves an edit only once its original is
    rejected.)"""
    with contextlib.suppress(InvalidTransitionError):  # already decided: it cannot have been approved
        gw.store.operations.transition(
            replacement.operation_key,
            "pending_approval",
            "rejected",
            audit=[
                gw.auditor.event(
                    "proposal.rejected",
                    "rejected",
                    user_id=editor.user_id,
                    code="edit_lost_race",
                    proposal_id=replacement.proposal_id,
                    operation_key=replacement.operation_key,
                    tool=replacement.tool,
                    detail={"supersedes": replacement.supersedes},
                )
            ],
        )


def _judge_edit(
    gw: Gateway, original: ProposalRecord, reviewer: Principal, tool: str, arguments: dict[str, Any]
) -> tuple[Principal, ToolSpec, dict[str, Any]]:
    """The editor (as the store records them), the tool and the judged arguments of an edit; the
    first rule it breaks as an `ApprovalError` otherwise."""
    editor = gw.directory.active(reviewer.user_id, reviewer.tenant_id)
    if editor is None:
        raise ApprovalError("reviewer_inactive", f"{reviewer.user_id!r} is not an active identity")
    spec = gw.registry.get_for(original.tool, original.tenant_id)
    operation = gw.store.operations.get(original.operation_key)
    if spec is None or operation is None or operation.status != "pending_approval":
        raise ApprovalError("not_pending", "only a pending proposal of this release can be edited")
    check_reviewer(
        original,
        spec.approval,
        editor,
        seen_digest=None,
        now=gw.store.now(),
        expires_at=parse_iso(original.expires_at),
    )
    if tool != original.tool:
        raise ApprovalError("tool_switch", "an edit cannot switch to another tool")
    requester = gw.directory.active(original.requester_id, original.tenant_id)
    if requester is None:
        raise ApprovalError("requester_inactive", "the requester is no longer an active identity")
    verdict = gw.authority.at_dispatch(
        requester,
        ProposedCall(original.call_id, tool, arguments, None),
        counts={},
        max_identical_calls=Context().max_identical_calls,
        now=gw.store.now(),
    )
    if verdict.rejection is not None:
        raise ApprovalError(verdict.rejection.code, f"edited arguments refused: {verdict.rejection.message}")
    if verdict.arguments == original.arguments:
        raise ApprovalError("no_change", "the edited arguments are identical; approve the original instead")
    return editor, spec, verdict.arguments


def _replacement(gw: Gateway, proposal: ProposalRecord) -> ProposalRecord | None:
    """The edit that replaced ``proposal``: the one its rejection names (two edits at once store two
    replacements, and the one whose rejection lost was voided), else the newest (an edit whose
    rejection never happened: it stays pending until it expires)."""
    newer = gw.store.proposals.superseding(proposal.proposal_id)
    if newer is None:
        return None
    for decision in gw.store.approvals.for_proposal(proposal.proposal_id):
        if decision.authentic and decision.decision == "reject" and decision.reason.startswith(SUPERSEDED_BY):
            named = gw.store.proposals.get(decision.reason[len(SUPERSEDED_BY) :])
            if named is not None and named.supersedes == proposal.proposal_id:
                return named
    return newer


def current_proposal(gw: Gateway, proposal_id: str) -> ProposalRecord | None:
    """Follow edits from ``proposal_id`` to the newest proposal that supersedes it (or itself)."""
    found = current_write(gw, proposal_id)
    return found[0] if found is not None else None


def current_write(
    gw: Gateway,
    proposal_id: str,
    read: Callable[[str], OperationRecord | None] | None = None,
) -> tuple[ProposalRecord, OperationRecord | None] | None:
    """`current_proposal` with its operation as read to judge it, so a step that goes on to look
    at that operation (the execute node) needs no second read of it. ``read``: how the step reads
    an operation by key (the execute node reads the store's time with its first one); else
    `Operations.get`."""
    read = read or gw.store.operations.get
    current = gw.executor.proposal(proposal_id)  # immutable: read once per process
    seen = {proposal_id}
    while current is not None:
        operation = read(current.operation_key)
        if operation is not None and operation.status not in ("pending_approval", "rejected", "expired"):
            return current, operation  # decided and not replaced: an edit that lost the race does not count
        newer = _replacement(gw, current)
        if newer is None or newer.proposal_id in seen:
            return current, operation
        seen.add(newer.proposal_id)
        current = newer
    return None


__all__ = ["SUPERSEDED_BY", "current_proposal", "current_write", "edit_proposal"]
