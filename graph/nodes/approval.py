"""The approval node: it pauses the thread with `interrupt()`, and records decisions sent with the resume.

LangGraph re-runs this node from its start on resume, so nothing before `interrupt()` may have a
side effect. What is shown to the reviewer beside each proposal (the tool's review facts, the
identical writes of the task, the warnings the console shows) is looked up only when the node
pauses, into the payload LangGraph then records; a resume throws the payload away, so it runs
none of those lookups (two of them are loaded code). The payload follows LangChain's
human-in-the-loop request shape (``action_requests`` and ``review_configs``) with toolgate's
proposal facts alongside, so Studio and chat UIs can answer it. A resume is a wake-up, or
carries decisions (`toolgate.graph.review.hitl`): those are recorded in the store as the
authenticated person resuming, with every approval rule applied; refusals come back in
``review`` and in the next interrupt (``toolgate.last_review``, and at the head of the refused
request's description, which chat UIs show). Authority is the store's approval records, which
the execute node re-checks before the claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphInterrupt
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.nodes._common import context_of, principal_of, thread_id
from toolgate.graph.review.facts import review_facts
from toolgate.graph.review.hitl import apply_decisions
from toolgate.graph.review.related import neighbours
from toolgate.graph.review.warnings import review_warnings
from toolgate.graph.server.access import visible
from toolgate.graph.state import GatewayState
from toolgate.policy.principal import Principal
from toolgate.store.records import OperationRecord, ProposalRecord

ALLOWED_DECISIONS = ["approve", "edit", "reject"]
UNAUDITED = frozenset({"malformed_decision", "decision_count", "missing_reviewer", "digest_required"})
"""Refusals made here, before `decide` or `edit_proposal` (which audit their own)."""


def hitl_request(gw: Gateway, state: GatewayState) -> dict[str, Any]:
    """The interrupt payload for every proposal of this turn that awaits approval (reads only),
    without what is shown to the reviewer beside each (`add_shown` fills that in once the node
    pauses): what a resume needs to record decisions."""
    calls = state.get("calls", {})
    review = state.get("review") or {}
    actions: list[dict[str, Any]] = []
    configs: list[dict[str, Any]] = []
    proposals: list[dict[str, Any]] = []
    for call_id in state.get("awaiting", []):
        proposal = gw.executor.proposal(calls[call_id]["proposal_id"])  # immutable: read once per process
        if proposal is None:
            continue
        actions.append(
            {
                "name": proposal.tool,
                "args": proposal.arguments,
                "description": (
                    refusal_note(review, proposal.proposal_id)
                    + f"{proposal.tool} ({proposal.risk}): {proposal.effect} Rollback: {proposal.rollback}. "
                    f"Approve with: toolgate approve {proposal.proposal_id} --as REVIEWER"
                ),
            }
        )
        configs.append({"action_name": proposal.tool, "allowed_decisions": ALLOWED_DECISIONS})
        proposals.append(
            {
                "call_id": call_id,
                "proposal_id": proposal.proposal_id,
                "operation_key": proposal.operation_key,
                "tool": proposal.tool,
                "handler_revision": proposal.handler_revision,
                "release": proposal.release,
                "arguments_sha256": proposal.arguments_sha256,
                "digest": proposal.digest,
                "authentic": proposal.authentic,  # False: forged or pre-MAC, `decide` refuses it
                "risk": proposal.risk,
                "effect": proposal.effect,
                "rollback": proposal.rollback,
                "approval_class": proposal.approval_class,
                "escalation": proposal.escalation(),
                "expires_at": proposal.expires_at,
                "status": "pending_approval",
                "execution_started": False,
                "details": None,
                "details_error": None,
                "identical_in_thread": [],
                "note": "",
                "warnings": [],
            }
        )
    return {
        "action_requests": actions,
        "review_configs": configs,
        "toolgate": {"proposals": proposals, "last_review": review},
    }


def identical_in_thread(
    same_effect: Sequence[tuple[ProposalRecord, OperationRecord]],
) -> list[dict[str, str]]:
    """Of ``same_effect`` (the other proposals of the same task, tool and arguments, as
    `Neighbours.identical` reads them), the authentic ones whose operation ran, runs, may have
    run or is about to (a reviewer is told that approving makes a second effect)."""
    return [
        {"operation_key": op.operation_key, "status": op.status}
        for other, op in same_effect
        if other.authentic and op.status in ("succeeded", "executing", "unknown", "approved")
    ]


def identical_note(tool: str, earlier: list[dict[str, str]]) -> str:
    """The warning shown beside a request when ``earlier`` (`identical_in_thread`) is not empty."""
    if not earlier:
        return ""
    return f"An identical {tool} already ran (or may have) in this task: approving makes a second effect."


def add_shown(gw: Gateway, request: dict[str, Any], requester: Principal | None) -> None:
    """Fill in, in place, what ``request`` (`hitl_request`) shows the reviewer beside each proposal:
    the tool's review facts (the tenant's own lookup; a failing one is shown, never raised), the
    identical writes of the task, and the warnings the console shows (`review_warnings`: the
    tool's semantic check of the stored arguments now, and the other live proposals on the same
    resource). The payload is readable by whoever may read the thread, so the other proposals a
    warning counts are only those ``requester`` (the thread's principal; None: none) could open
    themselves. Both listings of a proposal are one read of the store (`neighbours`)."""
    for shown in request["toolgate"]["proposals"]:
        proposal = gw.executor.proposal(shown["proposal_id"])  # immutable: read once per process
        if proposal is None:
            continue
        details, details_error = review_facts(gw.registry, proposal)
        found = neighbours(gw.store, gw.registry, proposal, live=True, identical=True)
        related = [r for r in found.live if requester is not None and visible(gw, requester, r.proposal)]
        warnings = review_warnings(gw.registry, proposal, "pending_approval", related, details)
        shown["details"], shown["details_error"] = details, details_error
        shown["identical_in_thread"] = identical_in_thread(found.identical)
        shown["note"] = identical_note(proposal.tool, shown["identical_in_thread"])
        shown["warnings"] = [w.view() for w in warnings]


def refusal_note(review: dict[str, Any], proposal_id: str) -> str:
    """The first line of an action request's description when the last decision sent for it was
    refused: chat UIs show the description, not ``toolgate.last_review``, so a reviewer whose
    decision changed nothing reads why next to the request they answer again. Empty otherwise."""
    for outcome in review.get("outcomes") or []:
        # an outcome without a proposal id refused the whole resume (nothing to pair it with)
        if outcome.get("result") == "refused" and outcome.get("proposal_id", proposal_id) == proposal_id:
            who = review.get("reviewer") or "an unauthenticated caller"
            return (
                f"Last decision refused ({outcome.get('decision', '')} by {who}:"
                f" {outcome.get('code', 'refused')}): {outcome.get('message', '')}\n\n"
            )
    return ""


def make_approval_node(gw: Gateway) -> Any:
    """Build the ``approval`` node."""

    def approval(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        request = hitl_request(gw, state)
        try:
            resume = interrupt(request)
        except GraphInterrupt:
            # Pausing: the payload LangGraph records and shows is this very ``request``, so what
            # the reviewer is shown (lookups, no side effect) is filled in now. On a resume
            # `interrupt` returns instead and the payload is thrown away: nothing to look up.
            # the thread's recorded principal, not the run's: a resume by anyone pauses the same
            recorded = state.get("principal")
            add_shown(gw, request, Principal.from_dict(recorded) if recorded else None)
            raise
        principal_of(state, runtime)  # someone of another tenant is refused before anything is recorded
        reviewer = context_of(runtime).principal
        outcomes = apply_decisions(gw, reviewer, request["toolgate"]["proposals"], resume)
        if outcomes is None:
            return {}  # a wake-up: decisions were recorded elsewhere (CLI, console, API)
        for outcome in outcomes:
            if outcome.result == "refused" and outcome.code in UNAUDITED:
                gw.auditor.record(
                    "approval.refused",
                    "refused",
                    user_id=reviewer.user_id if reviewer else None,
                    code=outcome.code,
                    proposal_id=outcome.proposal_id or None,
                    thread_id=thread_id(config),
                    detail={"reason": outcome.message},
                )
        return {
            "review": {
                "reviewer": reviewer.user_id if reviewer else "",
                "outcomes": [o.as_dict() for o in outcomes],
            }
        }

    return approval


__all__ = [
    "add_shown",
    "hitl_request",
    "identical_in_thread",
    "identical_note",
    "make_approval_node",
    "refusal_note",
]
