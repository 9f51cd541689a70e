"""The facts a tool adds to a proposal for its reviewer (`ToolSpec.review_details`), looked up once.

What a preview token will create, what a refund's order holds: a reviewer should see them before
approving. Both doors that show a proposal, the approval node's interrupt payload and the API's
proposal view, ask here, so they show the same facts and fail the same way.

The lookup runs as the proposal's tenant's implementation (`Registry.get_for` with the stored
proposal's tenant, never a thread's): a tenant whose tool runs on its own system has its facts
looked up there. A failing lookup never hides the rest of the proposal and never stops the
thread: the facts are None and the reason is shown, so the reviewer is warned not to approve
blind. A lookup runs as the requester with no credential (the declared ones are named, none
given): it reads what the tool's own service shows for the tenant.
"""

from __future__ import annotations

import logging
from typing import Any

from toolgate.errors import ToolExecutionError
from toolgate.policy.output import redacted_traceback
from toolgate.store.records import ProposalRecord
from toolgate.tools.registry import Registry
from toolgate.tools.spec import HandlerContext

log = logging.getLogger(__name__)

UNAVAILABLE = "review details unavailable"


def review_facts(registry: Registry, proposal: ProposalRecord) -> tuple[dict[str, Any] | None, str | None]:
    """(facts, None), ({}, None) when the tool adds none, or (None, why) when the lookup failed."""
    spec = registry.get_for(proposal.tool, proposal.tenant_id)
    if spec is None or spec.review_details is None:
        return {}, None
    try:
        return spec.review_details(
            spec.handler_arguments(proposal.arguments),
            HandlerContext(
                tenant_id=proposal.tenant_id,
                user_id=proposal.requester_id,
                declared_credentials=spec.forwarded_credentials,  # declared, never given here
            ),
        ), None
    except ToolExecutionError as exc:
        return None, f"{UNAVAILABLE}: {exc}"
    except Exception as exc:  # any other failure of a tool's lookup: logged redacted, never shown raw
        log.warning("review details of %s failed:\n%s", proposal.proposal_id, redacted_traceback(exc))
        return None, f"{UNAVAILABLE} (see the server log)"


__all__ = ["UNAVAILABLE", "review_facts"]
