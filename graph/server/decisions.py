"""The approval API's deciding views: approve, reject, and edit a proposal.

They parse what the reviewer sent and hand it to `decide` and `edit_proposal`, the same code as
the CLI, so this door adds no authority of its own; what is left here is choosing the release
whose rules decide (`deciding_gateway`) and turning an already-audited refusal into its HTTP
status (403 for who the caller is, 422 for what they sent, 409 for the proposal's state). They are
apart from the read views because these change the store and wake the waiting thread.
"""

from __future__ import annotations

from toolgate.errors import REJECTION_CODES, ApprovalError
from toolgate.graph.gateway import Gateway
from toolgate.graph.review.decisions import ReviewOutcome, decide
from toolgate.graph.review.edits import edit_proposal
from toolgate.graph.server.access import visible_proposal
from toolgate.graph.server.serving import Refusal, Reply, ViewInput, body_fields
from toolgate.policy.principal import Principal
from toolgate.store.records import ProposalRecord

_FORBIDDEN = frozenset({"missing_role", "cross_tenant", "reviewer_inactive", "unauthorized"})
"""Refusal codes about who the caller is (403); other decision refusals are conflicts (409)."""
_UNPROCESSABLE = (frozenset(REJECTION_CODES) | {"reason_required"}) - _FORBIDDEN
"""Refusal codes about what the caller sent: a missing reason, edited arguments dispatch refused."""


def deciding_gateway(gw: Gateway, proposal: ProposalRecord, inp: ViewInput) -> Gateway:
    """The gateway whose rules decide ``proposal``: this process's for its own release, the
    proposal's release's while release control serves it (the store's records say which), else
    this process's, which refuses another release's proposal (``wrong_release``)."""
    if proposal.release == gw.registry.release:
        return gw
    return inp.reviewing(proposal.release) or gw


def _refused_decision(gw: Gateway, proposal: ProposalRecord, exc: ApprovalError) -> Refusal:
    """The HTTP form of a refusal `decide` or `edit_proposal` already audited."""
    status = 403 if exc.code in _FORBIDDEN else 422 if exc.code in _UNPROCESSABLE else 409
    operation = gw.store.operations.get(proposal.operation_key)
    return Refusal(status, exc.code, str(exc), status_now=operation.status if operation else None)


def _decided(outcome: ReviewOutcome) -> Reply:
    status = outcome.operation.status
    return Reply(
        {
            "proposal_id": outcome.proposal.proposal_id,
            "operation_key": outcome.proposal.operation_key,
            "decision": outcome.record.decision,
            "status": status,
            "verdict": outcome.verdict.status,
            "approvers": list(outcome.verdict.approvers),
            "still_needed": outcome.verdict.reason if outcome.verdict.status == "pending" else "",
        },
        wake=outcome.proposal.thread_id if status in ("approved", "rejected") else None,
    )


def approve(gw: Gateway, caller: Principal, inp: ViewInput) -> Reply:
    """``POST .../approve`` with ``{"digest"}``: an approval bound to the digest the reviewer saw."""
    proposal, _ = visible_proposal(gw, caller, inp.path["proposal_id"], "approve")
    gw = deciding_gateway(gw, proposal, inp)
    digest = body_fields(inp.raw_body, {"digest": str}, required=["digest"])["digest"]
    if not digest.strip():
        raise Refusal(422, "invalid_body", "digest must be the proposal digest you reviewed")
    try:
        outcome = decide(gw, proposal.proposal_id, caller, "approve", seen_digest=digest)
    except ApprovalError as exc:
        raise _refused_decision(gw, proposal, exc) from exc
    return _decided(outcome)


def reject(gw: Gateway, caller: Principal, inp: ViewInput) -> Reply:
    """``POST .../reject`` with ``{"reason"}``: a rejection (the reason is required by `decide`)."""
    proposal, _ = visible_proposal(gw, caller, inp.path["proposal_id"], "reject")
    gw = deciding_gateway(gw, proposal, inp)
    reason = body_fields(inp.raw_body, {"reason": str}, required=[]).get("reason", "")
    try:  # an empty reason is refused (and audited) by decide itself
        outcome = decide(gw, proposal.proposal_id, caller, "reject", reason=reason)
    except ApprovalError as exc:
        raise _refused_decision(gw, proposal, exc) from exc
    return _decided(outcome)


def edit(gw: Gateway, caller: Principal, inp: ViewInput) -> Reply:
    """``POST .../edit`` with ``{"arguments", "tool"?}``: replace this proposal with the edited
    call, a new proposal pending approval."""
    proposal, _ = visible_proposal(gw, caller, inp.path["proposal_id"], "edit")
    gw = deciding_gateway(gw, proposal, inp)
    body = body_fields(inp.raw_body, {"arguments": dict, "tool": str}, required=["arguments"])
    spec = gw.registry.get(proposal.tool)
    if spec is None or not caller.roles & spec.approval.roles:
        # checked before the edited call is judged: judging it counts against the requester's limits
        gw.auditor.record(
            "api.refused",
            "refused",
            user_id=caller.user_id,
            code="missing_role",
            proposal_id=proposal.proposal_id,
            operation_key=proposal.operation_key,
            tool=proposal.tool,
            detail={"route": "edit", "status": 403},
        )
        raise Refusal(403, "missing_role", f"editing {proposal.tool} needs a reviewer role of its approval")
    try:
        edited = edit_proposal(
            gw,
            proposal.proposal_id,
            caller,
            tool=body.get("tool", proposal.tool),
            arguments=body["arguments"],
        )
    except ApprovalError as exc:
        raise _refused_decision(gw, proposal, exc) from exc
    return Reply(
        {
            "proposal_id": edited.proposal_id,
            "supersedes": proposal.proposal_id,
            "operation_key": edited.operation_key,
            "status": "pending_approval",
            "digest": edited.digest,
        },
        status=201,
        wake=proposal.thread_id,  # the original was rejected: the thread re-interrupts on the new one
    )


__all__ = ["approve", "deciding_gateway", "edit", "reject"]
