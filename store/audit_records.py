"""The audit log's records: an event as appended, as stored in the hash chain, and its hash.

Separate from the proposal and operation records because the log is its own idea with its own
readers: graph nodes, the review path and benchmarks append events without touching a proposal,
forensics and exports read them back as evidence, and a stored event is trusted through its place
in the keyed hash chain (sequence, previous hash, payload digest) rather than a MAC of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from toolgate.canonical import canonical_json
from toolgate.errors import ConfigurationError
from toolgate.store.keys import hmac_sha256


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
class KeyedEventIn(AuditEventIn):
    """An event to append at most once, whoever appends it: its id is fixed by its maker (e.g. a
    model turn's ``model.response``, linked by whichever step of the thread commits next, which a
    resumed thread may run again), and linking leaves it out when the chain holds that id already
    (checked under the chain's lock, `toolgate.store.audit_log.AuditLog.link`)."""

    event_id: str
    """The id the event is stored under (``evt_`` and hex, like a random one)."""

    @classmethod
    def of(cls, event: AuditEventIn, event_id: str) -> KeyedEventIn:
        """``event`` to be stored once, under ``event_id``."""
        return cls(**{f.name: getattr(event, f.name) for f in fields(AuditEventIn)}, event_id=event_id)


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


GENESIS_HASH = "0" * 64
"""The previous hash of the first event."""


def audit_hash(event: dict[str, Any], prev_hash: str, key: bytes) -> str:
    """HMAC-SHA256 of one audit event's canonical encoding joined with the previous hash.

    Keyed by the store's audit-chain key, so someone with write access to the database but not
    the store's secret cannot forge or re-chain events.
    """
    if not key:
        raise ConfigurationError("the audit chain needs a key")
    message = (prev_hash + "\n" + canonical_json(event)).encode("utf-8")
    return hmac_sha256(key, message).hex()


AUDIT_FIELDS = (
    "event_id",
    "occurred_at",
    "event",
    "result",
    "code",
    "request_id",
    "response_id",
    "call_id",
    "proposal_id",
    "operation_key",
    "thread_id",
    "tool",
    "tool_release",
    "handler_revision",
    "actor_id",
    "trace_id",
)


def audit_row_content(row: dict[str, Any]) -> dict[str, Any]:
    """The part of an audit row covered by its hash (everything but seq and the hashes).

    Events carry the digest of their detail, not the detail itself, so retention can delete the
    protected payload while the chain stays verifiable. (Events written before the payload split
    hash the detail inline.) The tenant is covered when the event has one: rows written before
    events carried a tenant have none and hash as they always did, and adding or removing a
    tenant later changes the content, so either breaks the chain.
    """
    content = {name: row.get(name) for name in AUDIT_FIELDS}
    if row.get("tenant_id") is not None:  # chain format 2: events with a tenant hash it too
        content["tenant_id"] = row["tenant_id"]
    if row.get("detail_sha256"):
        content["detail_sha256"] = row["detail_sha256"]
    else:
        detail = row.get("detail")
        content["detail"] = json.loads(detail) if isinstance(detail, str) else (detail or {})
    return content


__all__ = [
    "AUDIT_FIELDS",
    "GENESIS_HASH",
    "AuditEvent",
    "AuditEventIn",
    "KeyedEventIn",
    "audit_hash",
    "audit_row_content",
]
