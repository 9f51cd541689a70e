"""Making an immutable proposal: shared by the proposal node and by reviewers' edits."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from toolgate.canonical import digest, operation_key, sha256_hex
from toolgate.clock import iso, parse_iso
from toolgate.graph.delivery.delegation import DelegationRefused, seal, unseal
from toolgate.graph.gateway import Gateway
from toolgate.policy.output import redact_text
from toolgate.store.audit_records import AuditEventIn
from toolgate.store.records import OperationRecord, ProposalRecord
from toolgate.tools.spec import ToolSpec

MAX_REQUESTER_TEXT = 1000
"""The most of the requester's words a proposal keeps (characters): the turn, not the transcript."""


def requester_words(messages: Sequence[BaseMessage]) -> str | None:
    """The requester's last message (the turn that led to the proposal), redacted and bounded, or
    None when there is none. A reviewer reads it as the requester's words, never as a fact: it is
    what a person typed, and may be wrong or adversarial."""
    last = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    if last is None:
        return None
    content = last.content
    if isinstance(content, str):
        text = content
    else:  # content blocks: their text parts
        text = "\n".join(
            str(block.get("text", "")) if isinstance(block, dict) else str(block) for block in content
        )
    text = redact_text(text.strip())
    if len(text) > MAX_REQUESTER_TEXT:
        text = text[: MAX_REQUESTER_TEXT - 1] + "…"
    return text or None


def draft_proposal(
    gw: Gateway,
    spec: ToolSpec,
    *,
    tenant_id: str,
    requester_id: str,
    thread_id: str,
    call_id: str,
    arguments: dict[str, Any],
    supersedes: str | None = None,
    trace_id: str | None = None,
    editors: tuple[str, ...] = (),
    requester_text: str | None = None,
) -> ProposalRecord:
    """The proposal for one intended effect; its operation key and id derive from the content.

    Its creation and expiry times (and so its digest) are left for `store_proposal` to set from
    the store's clock, in the transaction that inserts it (`stamped`). Its approval class is the
    tool's, raised by the release's escalation rules from these (judged) arguments, never lowered."""
    key = operation_key(
        tenant_id=tenant_id, task_id=thread_id, call_id=call_id, tool=spec.name, arguments=arguments
    )
    escalation = gw.policy.escalation(spec.name, spec.approval, arguments)
    draft = ProposalRecord(
        proposal_id="prop_" + sha256_hex(key)[:24],
        operation_key=key,
        thread_id=thread_id,
        call_id=call_id,
        tool=spec.name,
        tool_version=spec.version,
        handler_revision=spec.handler_revision,
        release=gw.registry.release,
        tenant_id=tenant_id,
        requester_id=requester_id,
        arguments=arguments,
        arguments_sha256=digest(arguments),
        digest="",
        risk=spec.risk,
        effect=spec.effect,
        rollback=spec.rollback_text(),
        approval_class=escalation.approval.describe(),
        created_at="",
        expires_at="",
        supersedes=supersedes,
        trace_id=trace_id,
        editors=tuple(sorted(set(editors))),
        escalation_rule_id=escalation.rule_id,
        escalation_reason=escalation.reason,
        requester_text=requester_text,
    )
    return draft


def stamped(draft: ProposalRecord, now: datetime, approval_minutes: float) -> ProposalRecord:
    """``draft`` created at ``now`` (the store's clock), expiring ``approval_minutes`` later, with
    the digest of that content."""
    timed = dataclasses.replace(
        draft, created_at=iso(now), expires_at=iso(now + timedelta(minutes=approval_minutes)), digest=""
    )
    return dataclasses.replace(timed, digest=digest(timed.content()))


def store_proposal(
    gw: Gateway,
    spec: ToolSpec,
    draft: ProposalRecord,
    *,
    actor: str,
    audit: dict[str, Any] | None = None,
    accepted: AuditEventIn | None = None,
    before: Sequence[AuditEventIn] = (),
) -> tuple[ProposalRecord, OperationRecord, bool]:
    """Insert (idempotently) and audit one proposal: ``proposal.created`` (after ``accepted``, the
    model call it came from, if any) commits with the proposal. Its times are the insert
    transaction's (`stamped` from the ``draft``: no clock read of their own). A proposal already
    stored under the same operation key is returned as stored and audited as ``proposal.reused``
    on its own. ``before``: events of the step that come first in either append (the model turn's
    ``model.response``, `toolgate.graph.nodes.response_audit`). The stored proposal goes into the
    executor's proposal cache (`toolgate.graph.review.proposal_cache`)."""

    def event(name: str, result: str, proposal: ProposalRecord) -> AuditEventIn:
        return gw.auditor.event(
            name,
            result,
            user_id=actor,
            call_id=proposal.call_id,
            proposal_id=proposal.proposal_id,
            operation_key=proposal.operation_key,
            tool=spec.name,
            handler_revision=spec.handler_revision,
            thread_id=proposal.thread_id,
            detail={
                "digest": proposal.digest,
                "arguments_sha256": proposal.arguments_sha256,
                "risk": spec.risk,
                "arguments": {
                    k: proposal.arguments[k] for k in sorted(spec.audit_fields) if k in proposal.arguments
                },
                "expires_at": proposal.expires_at,
                "supersedes": proposal.supersedes,
                **({"escalation": proposal.escalation()} if proposal.escalation_rule_id else {}),
            },
            **(audit or {}),
        )

    def at(now: str) -> tuple[ProposalRecord, list[AuditEventIn]]:
        proposal = stamped(draft, parse_iso(now), gw.policy.approval_minutes)
        return proposal, [
            *before,
            *([accepted] if accepted else []),
            event("proposal.created", "pending_approval", proposal),
        ]

    stored, operation, created = gw.store.proposals.create_at(at)
    # the row as the store returned it (inserted, or found under the key), MAC checked like any
    # read: proposals never change, so the approval node and the deliveries of this process read
    # it from the cache instead of the store
    gw.executor.proposals.put(stored)
    if not created:
        gw.store.audit.append_many([*before, event("proposal.reused", operation.status, stored)])
    return stored, operation, created


def carry_delegation(gw: Gateway, spec: ToolSpec, original: ProposalRecord, edited: ProposalRecord) -> bool:
    """Seal the requester's credentials of ``original`` again for a reviewer's ``edited`` proposal
    (same requester; never the reviewer's). A sealed record that does not open is not carried
    (audited ``delegation.refused``): the edited write then runs without the requester's credentials."""
    if not spec.forwarded_credentials or edited.requester_id != original.requester_id:
        return False
    try:
        credentials = unseal(gw.store, original)
    except DelegationRefused as exc:
        gw.auditor.record(
            "delegation.refused",
            "refused",
            code=exc.kind,
            proposal_id=original.proposal_id,
            operation_key=original.operation_key,
            tool=spec.name,
            tenant_id=original.tenant_id,
            detail={"reason": exc.message},
        )
        return False
    return seal(gw.store, edited, credentials)


__all__ = [
    "MAX_REQUESTER_TEXT",
    "carry_delegation",
    "draft_proposal",
    "requester_words",
    "stamped",
    "store_proposal",
]
