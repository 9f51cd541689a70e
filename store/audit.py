"""Writing audit events: privacy-safe actor ids and one call per transition.

Actor and end-user identifiers enter the log only as keyed hashes (HMAC-SHA256 under the store's
actor key), so the log can answer "was it the same person" without holding who.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolgate.store.audit_records import AuditEvent, AuditEventIn
from toolgate.store.base import Store
from toolgate.store.keys import hmac_sha256
from toolgate.telemetry import current_trace_id


@functools.lru_cache(maxsize=64)
def key_id(key: bytes) -> str:
    """Short public id of an HMAC key, stored with each hash so keys can be rotated."""
    return hashlib.sha256(b"toolgate-key-id:" + key).hexdigest()[:8]


def actor_hash(key: bytes, user_id: str) -> str:
    """Keyed hash of a user id, e.g. ``user_hmac_k1a2b3c4d_3f2a...`` (key id, then the HMAC)."""
    return f"user_hmac_k{key_id(key)}_" + hmac_sha256(key, user_id.encode("utf-8")).hex()[:32]


def audit_call_id(call_id: str) -> str:
    """The call id as the audit log may hold it: as is when it is short plain text, else its digest.

    Call ids come from the model; a NUL or a megabyte of text must not reach a database column."""
    if len(call_id) <= 128 and call_id.isprintable():
        return call_id
    return "callid_sha256_" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass(frozen=True)
class Auditor:
    """Appends audit events for one release with hashed actors."""

    store: Store
    """Where the hash-chained log lives (its keyring keys the actor hashes)."""
    release: str
    """Release id stamped on every event."""

    def actor(self, user_id: str | None) -> str | None:
        """Hashed actor id (None stays None)."""
        return actor_hash(self.store.keys.key("actor"), user_id) if user_id else None

    def event(self, event: str, result: str, *, user_id: str | None = None, **fields: Any) -> AuditEventIn:
        """One event, not yet appended: for a store method that appends it in the transaction of the
        change it records (``fields`` are `AuditEventIn` fields; detail must be redacted already)."""
        fields.setdefault("tool_release", self.release)
        detail = fields.get("detail")
        if fields.get("tenant_id") is None and isinstance(detail, dict) and detail.get("tenant_id"):
            fields["tenant_id"] = str(detail["tenant_id"])  # e.g. an identity change: its tenant
        if fields.get("trace_id") is None:  # an event written inside a span carries its trace id
            fields["trace_id"] = current_trace_id()
        return AuditEventIn(event=event, result=result, actor_id=self.actor(user_id), **fields)

    def record(self, event: str, result: str, *, user_id: str | None = None, **fields: Any) -> AuditEvent:
        """Append one event on its own (for what changes nothing else in the store: a refusal, a
        model response)."""
        return self.store.audit.append(self.event(event, result, user_id=user_id, **fields))

    def record_all(self, events: Sequence[AuditEventIn]) -> None:
        """Append ``events`` together: one transaction, one commit. Nothing is read back, so on
        PostgreSQL they link after the chain's head this process last saw, checked under the
        chain's lock in the COMMIT's script (`AuditLog.append_ahead`): one round trip."""
        self.store.audit.append_ahead(events)


__all__ = ["Auditor", "actor_hash", "audit_call_id", "key_id"]
