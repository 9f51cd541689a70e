"""The approval node: it only pauses the thread with `interrupt()`.

LangGraph re-runs this node from its start on resume, so nothing here may have a side effect.
The payload follows LangChain's human-in-the-loop request shape (``action_requests`` and
``review_configs``) with toolgate's proposal facts alongside. The resume value is a wake-up,
not authority: decisions count only when an authenticated reviewer recorded them in the store,
and the execute node re-checks them before the claim.
"""

from __future__ import annotations

from typing import Any

from langgraph.types import interrupt

from toolgate.graph.deps import Gateway
from toolgate.graph.state import GatewayState
from toolgate.tools.spec import HandlerContext

ALLOWED_DECISIONS = ["approve", "reject"]


def hitl_request(gw: Gateway, state: GatewayState) -> dict[str, Any]:
    """The interrupt payload for every proposal of this turn that awaits approval (reads only)."""
    calls = state.get("calls", {})
    actions: list[dict[str, Any]] = []
    configs: list[dict[str, Any]] = []
    proposals: list[dict[str, Any]] = []
    for call_id in state.get("awaiting", []):
        proposal = gw.store.get_proposal(calls[call_id]["proposal_id"])
        if proposal is None:
            continue
        actions.append(
            {
                "name": proposal.tool,
                "args": proposal.arguments,
                "description": (
                    f"{proposal.tool} ({proposal.risk}): {proposal.effect} Rollback: {proposal.rollback}. "
                    f"Approve with: toolgate approve {proposal.proposal_id} --as REVIEWER"
                ),
            }
        )
        configs.append({"action_name": proposal.tool, "allowed_decisions": ALLOWED_DECISIONS})
        spec = gw.registry.get(proposal.tool)
        details: dict[str, Any] = {}
        if spec is not None and spec.review_details is not None:
            details = spec.review_details(
                spec.args_model.model_validate(proposal.arguments),
                HandlerContext(tenant_id=proposal.tenant_id, user_id=proposal.requester_id),
            )
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
                "risk": proposal.risk,
                "effect": proposal.effect,
                "rollback": proposal.rollback,
                "approval_class": proposal.approval_class,
                "expires_at": proposal.expires_at,
                "status": "pending_approval",
                "execution_started": False,
                "details": details,
            }
        )
    return {"action_requests": actions, "review_configs": configs, "toolgate": {"proposals": proposals}}


def make_approval_node(gw: Gateway) -> Any:
    """Build the ``approval`` node."""

    def approval(state: GatewayState) -> dict[str, Any]:
        interrupt(hitl_request(gw, state))
        return {}

    return approval


__all__ = ["hitl_request", "make_approval_node"]
