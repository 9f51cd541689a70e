"""Verifying the evidence: the hash-chained audit log (any modified, deleted, reordered or forged
event breaks it) and the MACs of approval and identity rows (a row written with database access
alone does not verify)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from toolgate.canonical import digest
from toolgate.store.audit_records import GENESIS_HASH, audit_hash, audit_row_content
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
    events = store.audit.events()
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
    approvals = store.approvals.all()
    identities = store.identities.list()
    proposals = [p for p, _ in store.proposals.list()]
    return RecordsReport(
        approvals=len(approvals),
        identities=len(identities),
        proposals=len(proposals),
        forged_proposals=[p.proposal_id for p in proposals if not p.authentic],
        forged_approvals=[a.approval_id for a in approvals if not a.authentic],
        forged_identities=[i.user_id for i in identities if not i.authentic],
    )


__all__ = [
    "ChainReport",
    "RecordsReport",
    "verify_chain",
    "verify_records",
]
