"""Verifying the evidence: the hash-chained audit log (any modified, deleted, reordered or forged
event breaks it) and the MACs of approval and identity rows (a row written with database access
alone does not verify)."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any

from toolgate.canonical import canonical_json, digest
from toolgate.errors import ConfigurationError
from toolgate.store.base import Store

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
    return hmac.new(key, message, hashlib.sha256).hexdigest()


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


@dataclass(frozen=True, kw_only=True)
class ChainReport:
    """Result of walking the whole chain."""

    events: int
    ok: bool
    first_bad_seq: int | None = None
    first_bad_event_id: str | None = None
    reason: str = ""


def verify_chain(store: Store) -> ChainReport:
    """Recompute every hash in sequence order; name the first event that does not fit."""
    previous = GENESIS_HASH
    last_seq = 0
    events = store.audit_events()
    for event in events:
        row = dataclasses.asdict(event)
        problem = ""
        if event.seq <= last_seq:
            problem = "sequence out of order"
        elif event.prev_hash != previous:
            problem = "previous-hash link broken (an event before it was removed, reordered or forged)"
        elif audit_hash(audit_row_content(row), event.prev_hash, store.keys.key("audit-chain")) != event.hash:
            problem = "content does not match its hash (modified)"
        elif event.detail_sha256 and event.payload_retained and digest(event.detail) != event.detail_sha256:
            problem = "payload does not match the digest in the chain (modified)"
        if problem:
            return ChainReport(
                events=len(events),
                ok=False,
                first_bad_seq=event.seq,
                first_bad_event_id=event.event_id,
                reason=problem,
            )
        previous, last_seq = event.hash, event.seq
    return ChainReport(events=len(events), ok=True)


@dataclass(frozen=True, kw_only=True)
class RecordsReport:
    """Result of checking the MAC of every proposal, approval and identity row."""

    approvals: int
    identities: int
    forged_approvals: list[str]
    """Approval ids whose MAC does not verify (written or changed with database access alone)."""
    forged_identities: list[str]
    """User ids whose row MAC does not verify."""
    proposals: int = 0
    forged_proposals: list[str] = field(default_factory=list)
    """Proposal ids (of proposals with an operation) whose MAC does not verify: inserted with
    database access alone, or written before proposals carried a MAC."""

    @property
    def ok(self) -> bool:
        """True when every row verifies."""
        return not self.forged_approvals and not self.forged_identities and not self.forged_proposals


def verify_records(store: Store) -> RecordsReport:
    """Name every proposal, approval and identity row that was not written by toolgate with the
    store's secret."""
    approvals = store.all_decisions()
    identities = store.list_identities()
    proposals = [p for p, _ in store.list_proposals()]
    return RecordsReport(
        approvals=len(approvals),
        identities=len(identities),
        proposals=len(proposals),
        forged_proposals=[p.proposal_id for p in proposals if not p.authentic],
        forged_approvals=[a.approval_id for a in approvals if not a.authentic],
        forged_identities=[i.user_id for i in identities if not i.authentic],
    )


__all__ = [
    "AUDIT_FIELDS",
    "GENESIS_HASH",
    "ChainReport",
    "RecordsReport",
    "audit_hash",
    "audit_row_content",
    "verify_chain",
    "verify_records",
]
