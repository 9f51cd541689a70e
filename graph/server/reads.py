"""The approval API's read-only views: who am I, the proposal list, one proposal, an operation,
its trace.

They describe the store's records for a reviewer (what the console shows before a decision, and
what a requester follows after it) and change nothing but the audit log of refused requests. They
are apart from the decision views because nothing here has authority: a read can be wrong only
by showing too much, which `toolgate.graph.server.access` decides.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, get_args

from toolgate.clock import parse_iso
from toolgate.forensics import trace
from toolgate.graph.gateway import Gateway
from toolgate.graph.review.decisions import handler_timeout_s
from toolgate.graph.review.facts import review_facts
from toolgate.graph.review.related import Related, neighbours
from toolgate.graph.review.warnings import CHECKED_STATUSES, review_warnings
from toolgate.graph.server.access import audited_operation, visible, visible_operation, visible_proposal
from toolgate.graph.server.serving import Refusal, Reply, ViewInput
from toolgate.policy.audit_readers import audit_scope
from toolgate.policy.principal import Principal
from toolgate.store.proposals import PAGE_MAX, PAGE_SIZE, InvalidCursor
from toolgate.store.records import OperationRecord, OperationStatus, ProposalRecord

STATUSES: tuple[str, ...] = get_args(OperationStatus)
"""Values of the list route's ``status`` filter (besides ``all``)."""


# ---- what a reviewer sees ------------------------------------------------------------------


def _seconds_left(proposal: ProposalRecord, now: Any) -> int:
    return max(0, int((parse_iso(proposal.expires_at) - now).total_seconds()))


def _summary(proposal: ProposalRecord, operation: OperationRecord, now: Any) -> dict[str, Any]:
    return {
        "proposal_id": proposal.proposal_id,
        "tool": proposal.tool,
        "risk": proposal.risk,
        "requester": proposal.requester_id,
        "expires_at": proposal.expires_at,
        "seconds_left": _seconds_left(proposal, now),
        "status": operation.status,
        "digest": proposal.digest,
        "authentic": proposal.authentic,  # False: forged or from before proposals carried a MAC
    }


RELATED_SHOWN = 20
"""How many related proposals a view lists (newest first); the warnings count every live one found."""


def _related_view(related: Related) -> dict[str, Any]:
    return {
        "proposal_id": related.proposal.proposal_id,
        "status": related.operation.status,
        "requester": related.proposal.requester_id,
        "arguments": related.proposal.arguments,
        "created_at": related.proposal.created_at,
        "resources": [{"kind": kind, "id": rid} for kind, rid in related.resources],
        "authentic": related.proposal.authentic,
    }


def _detail(
    gw: Gateway, proposal: ProposalRecord, operation: OperationRecord, *, caller: Principal | None = None
) -> dict[str, Any]:
    """The proposal as a reviewer weighs it; the related proposals only those ``caller`` could
    open themselves (a customer her own, a reviewer the tenant's; None: every one found)."""
    details, details_error = review_facts(gw.registry, proposal)
    superseded_by = gw.store.proposals.superseding(proposal.proposal_id)

    def shown(found: list[Related]) -> list[Related]:
        return [r for r in found if caller is None or visible(gw, caller, r.proposal)]

    # the warnings count the live ones, as the approval pause does (`add_shown`): also those older
    # than the listing's newest `SCAN_LIMIT` of every status (both read in one statement)
    checked = operation.status in CHECKED_STATUSES
    found = neighbours(gw.store, gw.registry, proposal, listed=True, live=checked)
    related, live = shown(found.listed), shown(found.live)
    warnings = review_warnings(gw.registry, proposal, operation.status, live, details)
    return {
        **_summary(proposal, operation, gw.store.now()),
        "operation_key": proposal.operation_key,
        "arguments": proposal.arguments,
        "arguments_sha256": proposal.arguments_sha256,
        "tool_version": proposal.tool_version,
        "handler_revision": proposal.handler_revision,
        "release": proposal.release,
        "effect": proposal.effect,
        "rollback": proposal.rollback,
        "timeout_s": handler_timeout_s(gw, proposal),
        "approval_class": proposal.approval_class,
        "escalation": proposal.escalation(),
        "created_at": proposal.created_at,
        "supersedes": proposal.supersedes,
        "superseded_by": superseded_by.proposal_id if superseded_by else None,
        "editors": list(proposal.editors),
        "decisions": [
            {
                "reviewer": d.reviewer_id,
                "decision": d.decision,
                "authentic": d.authentic,
                "digest_bound": d.digest == proposal.digest,
                "decided_at": d.decided_at,
                "reason": d.reason,
            }
            for d in gw.store.approvals.for_proposal(proposal.proposal_id)
        ],
        "review_details": details,
        "review_details_error": details_error,
        "requester_text": proposal.requester_text,  # the requester's words (redacted), not a fact
        "warnings": [w.view() for w in warnings],
        "related": [_related_view(r) for r in related[:RELATED_SHOWN]],
        "related_total": len(related),
    }


# ---- views ---------------------------------------------------------------------------------


def me(gw: Gateway, caller: Principal, inp: ViewInput) -> Reply:
    """``GET /toolgate/me``: who the token says the caller is."""
    return Reply(
        {
            "user_id": caller.user_id,
            "tenant": caller.tenant_id,
            "roles": sorted(caller.roles),
            "display_name": caller.display_name,
        }
    )


def list_proposals(gw: Gateway, caller: Principal, inp: ViewInput) -> Reply:
    """``GET /toolgate/proposals?status=&limit=&after=``: one page of the visible proposals (default:
    pending approval), oldest first, and ``next_after`` to ask for the next page (absent on the last).

    A page reads at most ``limit`` proposals (`toolgate.store.proposals.PAGE_SIZE` by default,
    at most ``PAGE_MAX``) whatever the number pending; those the caller may not see are left out of
    it, so a page may hold fewer than ``limit`` while ``next_after`` is still set."""
    status = inp.query.get("status", "pending_approval")
    if status != "all" and status not in STATUSES:
        raise Refusal(422, "invalid_status", f"status must be 'all' or one of {', '.join(STATUSES)}")
    limit_text = inp.query.get("limit", str(PAGE_SIZE))
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= PAGE_MAX:
        raise Refusal(422, "invalid_page", f"limit must be a whole number from 1 to {PAGE_MAX}")
    try:
        page = gw.store.proposals.page(
            None if status == "all" else status, after=inp.query.get("after") or None, limit=int(limit_text)
        )
    except InvalidCursor as exc:
        raise Refusal(422, "invalid_page", f"{exc}: pass the next_after of the previous page") from None
    now = gw.store.now()
    shown = [_summary(p, op, now) for p, op in page.rows if visible(gw, caller, p)]
    return Reply({"proposals": shown, **({"next_after": page.next_after} if page.next_after else {})})


def show_proposal(gw: Gateway, caller: Principal, inp: ViewInput) -> Reply:
    """``GET /toolgate/proposals/{proposal_id}``: everything a reviewer weighs before deciding."""
    proposal, operation = visible_proposal(gw, caller, inp.path["proposal_id"], "proposal")
    return Reply(_detail(gw, proposal, operation, caller=caller))


def show_operation(gw: Gateway, caller: Principal, inp: ViewInput) -> Reply:
    """``GET /toolgate/operations/{operation_key}``: where the approved call stands, its result."""
    operation, proposal = visible_operation(gw, caller, inp.path["operation_key"], "operation")
    return Reply(
        {
            "operation_key": operation.operation_key,
            "proposal_id": proposal.proposal_id,
            "tool": operation.tool,
            "status": operation.status,
            "result": operation.result,
            "error": operation.error,
            "attempts": operation.attempts,
            "updated_at": operation.updated_at,
        }
    )


def show_trace(gw: Gateway, caller: Principal, inp: ViewInput) -> Reply:
    """``GET /toolgate/operations/{operation_key}/trace``: the operation's audit trail, checked;
    for auditors only, as on the CLI (`audited_operation`)."""
    operation = audited_operation(gw, caller, inp.path["operation_key"], "trace")
    report = trace(gw.store, gw.auditor, operation_key=operation.operation_key)
    scope = audit_scope(caller)
    gw.auditor.record(  # a read of the audit log is itself evidence (as the CLI's `audit trace`)
        "audit.read",
        "read",
        user_id=caller.user_id,
        tenant_id=caller.tenant_id,
        detail={
            "command": "GET trace",
            "scope": scope.label if scope else caller.tenant_id,
            "subject": operation.operation_key,
        },
    )
    return Reply(
        {
            "operation_key": operation.operation_key,
            "final": report.final,
            "missing": report.missing,
            "approver": report.approver,
            "tamper_check": report.tamper_check,
            # the proposing task turn's tokens; a figure no response reported is null, never 0
            "tokens": asdict(report.tokens) if report.tokens is not None else None,
            "events": [
                {
                    "seq": e.seq,
                    "event": e.event,
                    "result": e.result,
                    "code": e.code,
                    "at": e.occurred_at,
                    "actor": e.actor_id,
                    "release": e.tool_release,
                    "handler": e.handler_revision,
                }
                for e in report.events
            ],
        }
    )


__all__ = ["STATUSES", "list_proposals", "me", "show_operation", "show_proposal", "show_trace"]
