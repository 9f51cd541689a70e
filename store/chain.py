"""Verifying the hash-chained audit log: any modified, deleted, reordered or forged event breaks it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from toolgate.canonical import digest
from toolgate.store._sql import GENESIS_HASH, audit_hash, audit_row_content
from toolgate.store.base import Store


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
        elif (
            audit_hash(audit_row_content(row), event.prev_hash, getattr(store, "chain_key", b""))
            != event.hash
        ):
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


__all__ = ["ChainReport", "verify_chain"]
