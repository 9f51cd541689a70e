"""The facts a tool adds to a proposal for its reviewer (`ToolSpec.review_details`), looked up once.

What a preview token will create, what a refund's order holds: a reviewer should see them before
approving. Both doors that show a proposal, the approval node's interrupt payload and the API's
proposal view, ask here, so they show the same facts and fail the same way.

The lookup runs as the proposal's tenant's implementation (`Registry.get_for` with the stored
proposal's tenant, never a thread's): a tenant whose tool runs on its own system has its facts
looked up there. A failing lookup never hides the rest of the proposal and never stops the
thread: the facts are None and the reason is shown, so the reviewer is warned not to approve
blind. The lookup is loaded code: it runs through `toolgate.tools.loaded_code.lookup` (a worker
thread, a deadline, any `BaseException` contained), what it returns is made JSON there too, and
what it raises is redacted before a reviewer or a log sees it. A lookup runs as the requester
with no credential (the declared ones are named, none given): it reads what the tool's own
service shows for the tenant.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from toolgate.errors import ToolExecutionError
from toolgate.policy.output import redact_text, redacted_traceback
from toolgate.store.records import ProposalRecord
from toolgate.tools import loaded_code
from toolgate.tools.registry import Registry
from toolgate.tools.spec import HandlerContext

log = logging.getLogger(__name__)

UNAVAILABLE = "review details unavailable"

MAX_FACTS_BYTES = 16_384
"""The most a tool's review facts may take: they travel in the interrupt and every proposal view."""


def review_facts(registry: Registry, proposal: ProposalRecord) -> tuple[dict[str, Any] | None, str | None]:
    """(facts, None), ({}, None) when the tool adds none, or (None, why) when the lookup failed."""
    spec = registry.get_for(proposal.tool, proposal.tenant_id)
    if spec is None or spec.review_details is None:
        return {}, None
    try:
        text, unshowable = loaded_code.lookup(
            _as_json,
            spec.review_details,
            spec.handler_arguments(proposal.arguments),
            HandlerContext(
                tenant_id=proposal.tenant_id,
                user_id=proposal.requester_id,
                declared_credentials=spec.forwarded_credentials,  # declared, never given here
            ),
        )
    except ToolExecutionError as exc:
        return None, f"{UNAVAILABLE}: {redact_text(exc.message)[:200]}"
    except TimeoutError:
        return None, f"{UNAVAILABLE}: the lookup did not answer in time"
    except Exception as exc:  # any other failure of a tool's lookup: logged redacted, never shown raw
        log.warning("review details of %s failed:\n%s", proposal.proposal_id, redacted_traceback(exc))
        return None, f"{UNAVAILABLE} (see the server log)"
    if text is None:  # bytes, a cycle, 50,000 levels (RecursionError), not a dict
        log.warning("review details of %s cannot be shown: %s", proposal.proposal_id, unshowable)
        return None, f"{UNAVAILABLE}: the lookup's answer cannot be shown"
    if len(text.encode("utf-8")) > MAX_FACTS_BYTES:
        return None, f"{UNAVAILABLE}: the lookup's answer is over {MAX_FACTS_BYTES} bytes"
    shown: dict[str, Any] = json.loads(text)
    return shown, None


def _as_json(lookup: Callable[..., Any], *args: Any) -> tuple[str | None, str]:
    """On the lookup's worker, under its deadline: what it returned as redacted JSON text, or None
    and why not (the exception's class). What it returned is its own objects: a dict subclass's
    ``items``, a key's ``__str__`` are its code, and run here, never in the caller's thread."""
    facts = lookup(*args)
    try:  # what it returned is shown to reviewers and checkpointed: JSON, redacted, bounded
        if not isinstance(facts, dict):
            raise TypeError("not a dict")
        return json.dumps(_redacted(facts), ensure_ascii=False, allow_nan=False), ""
    except Exception as exc:
        return None, type(exc).__name__


def _redacted(value: Any) -> Any:
    """``value`` with every secret-looking text redacted (keys included). By value, not by key
    name: the facts are written for a reviewer, who needs a field called ``token_prefix``, while a
    password or an API key the lookup put anywhere never reaches them, a checkpoint or a log."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {redact_text(str(k)): _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]
    return value


__all__ = ["UNAVAILABLE", "review_facts"]
