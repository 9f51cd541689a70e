"""The audit log's records: an event as appended, and as stored in the hash chain.

Separate from the proposal and operation records because the log is its own idea with its own
readers: graph nodes, the review path and benchmarks append events without touching a proposal,
forensics and exports read them back as evidence, and a stored event is trusted through its place
in the keyed hash chain (sequence, previous hash, payload digest) rather than a MAC of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class AuditEventIn:
    """An audit event to append; the store assigns sequence, ids, time and hashes."""

    event: str
    """Dotted event name, e.g. ``call.rejected`` or ``operation.completed``."""
    result: str
    """Outcome word, e.g. ``rejected``, ``created``, ``completed``."""
    code: str | None = None
    """Stable rejection or refusal code, when there is one."""
    request_id: str | None = None
    """Internal request (run) id."""
    response_id: str | None = None
    """Model response id (never the prompt)."""
    call_id: str | None = None
    """Model tool call id."""
    proposal_id: str | None = None
    """Proposal id."""
    operation_key: str | None = None
    """Operation key."""
    thread_id: str | None = None
    """LangGraph thread id."""
    tool: str | None = None
    """Tool name."""
    tool_release: str | None = None
    """Release id."""
    handler_revision: str | None = None
    """Handler revision."""
    actor_id: str | None = None
    """Keyed hash of the acting user (requester, reviewer or worker)."""
    trace_id: str | None = None
    """Trace id shared with the observability spans."""
    tenant_id: str | None = None
    """Tenant the event belongs to. The store sets it from the proposal or operation the event
    names (its own records win over what the caller says); None for process-level events, which
    only all-tenant auditors see."""
    detail: dict[str, Any] = field(default_factory=dict)
    """Bounded, redacted extra facts (audit projection of arguments, digests, reasons)."""


@dataclass(frozen=True, kw_only=True)
class AuditEvent(AuditEventIn):
    """A stored audit event with its place in the hash chain."""

    seq: int
    """Position in the log."""
    event_id: str
    """``evt_...`` identifier."""
    occurred_at: str
    """ISO-8601 UTC time."""
    prev_hash: str
    """Hash of the previous event (64 zeros for the first)."""
    hash: str
    """SHA-256 over this event's canonical encoding and ``prev_hash``."""
    detail_sha256: str | None = None
    """Digest of ``detail`` (the chain covers this, so the payload itself can be retained or purged)."""
    payload_retained: bool = True
    """False once retention deleted the protected payload (``detail`` is then empty)."""


__all__ = ["AuditEvent", "AuditEventIn"]
