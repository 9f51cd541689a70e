"""Verifying the evidence: the hash-chained audit log (any modified, deleted, reordered or forged
event breaks it), the MACs of approval and identity rows (a row written with database access
alone does not verify), and the versions of rows whose order matters (release pointers, rollouts,
pins, identities): a row older than the latest version the chain bound was copied back."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from toolgate.canonical import sha256_hex
from toolgate.store.audit_records import GENESIS_HASH, AuditEvent, audit_hash, audit_row_content
from toolgate.store.base import Store
from toolgate.store.record_versions import EVENT, VersionedRow
from toolgate.store.rollout import RolloutStore
from toolgate.store.thread_releases import ThreadReleases


@dataclass(frozen=True, kw_only=True)
class ChainReport:
    """Result of walking the whole chain."""

    events: int
    ok: bool
    first_bad_seq: int | None = None
    first_bad_event_id: str | None = None
    reason: str = ""
    head_seq: int = 0
    """The sequence number of the last event walked (0: none), for the operator to keep."""
    head_hash: str = GENESIS_HASH
    """Its hash: with ``head_seq``, the head a later verify is given (``expect_head``)."""


def verify_chain(store: Store, *, expect_head: tuple[int, str] | None = None) -> ChainReport:
    """Recompute every hash in sequence order; name the first event that does not fit.

    A chain whose newest events were cut off still links whole, so the database alone cannot
    show it: ``expect_head`` is a head an earlier verify reported (``head_seq``, ``head_hash``),
    kept outside the database by the operator; the chain must still hold that very event."""
    previous = GENESIS_HASH
    last_seq = 0
    chain = store.audit.with_payloads()
    events = [event for event, _ in chain]
    for event, payload in chain:
        row = dataclasses.asdict(event)
        problem = ""
        if event.seq <= last_seq:
            problem = "sequence out of order"
        elif event.prev_hash != previous:
            problem = "previous-hash link broken (an event before it was removed, reordered or forged)"
        elif audit_hash(audit_row_content(row), event.prev_hash, store.keys.key("audit-chain")) != event.hash:
            problem = "content does not match its hash (modified)"
        elif event.detail_sha256 and payload is not None and sha256_hex(payload) != event.detail_sha256:
            # the stored text itself, not what it parses to: another key order, number form or a
            # duplicate key reads back as the same detail here, and differently elsewhere
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
    if expect_head is not None and expect_head != (0, GENESIS_HASH):
        seq, expected = expect_head
        held = next((event for event in events if event.seq == seq), None)
        if held is None or held.hash != expected:
            return ChainReport(
                events=len(events),
                ok=False,
                first_bad_seq=seq,
                first_bad_event_id=held.event_id if held else None,
                reason="the head recorded earlier is gone (events at the chain's end were removed)"
                if held is None
                else "differs from the head recorded earlier (the chain was rewritten)",
            )
    return ChainReport(events=len(events), ok=True, head_seq=last_seq, head_hash=previous)


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


@dataclass(frozen=True, kw_only=True)
class ReplayedRow:
    """A row whose MAC verifies but which is not the latest version the audit chain bound."""

    kind: str
    """``release_pointer``, ``release_rollout``, ``rollout_pin``, ``thread_release`` or ``identity``."""
    key: str
    """The row's key (configured release, rollout id, ``rollout:thread``, thread id, user id)."""
    version: int
    """The version the row holds."""
    audited_version: int | None
    """The version the chain's latest binding names (None: its payload was purged and the index
    has no entry for it)."""
    tenant_id: str | None = None
    """The tenant the row belongs to (None: process-level)."""

    def describe(self) -> str:
        """``kind:key@v<row>!=v<audited>``, as `toolgate audit verify` prints it."""
        audited = "?" if self.audited_version is None else str(self.audited_version)
        return f"{self.kind}:{self.key}@v{self.version}!=v{audited}"


@dataclass(frozen=True, kw_only=True)
class VersionsReport:
    """Result of judging every versioned row against the chain's latest binding of its key."""

    rows: int
    """Rows judged."""
    unbound: int
    """Rows with no binding yet (written before bindings existed and unchanged since)."""
    replayed: list[ReplayedRow]

    @property
    def ok(self) -> bool:
        """True when no row was copied back."""
        return not self.replayed


def verify_versions(store: Store, events: list[AuditEvent] | None = None) -> VersionsReport:
    """Judge every release-control, pin and identity row whose MAC verifies against the latest
    ``record.versioned`` event of its key in the chain itself (the index is not trusted here);
    ``events``: the chain, when the caller read it already."""
    rows: list[VersionedRow] = list(store.identities.versioned_rows())
    rollouts = RolloutStore(store)
    if rollouts.installed():
        rows += rollouts.versioned_rows() + ThreadReleases(store).versioned_rows()
    with store.transaction(write=False) as tx:
        indexed = {
            int(r["seq"]): (str(r["kind"]), str(r["record_key"]), int(r["version"]))
            for r in tx.execute("SELECT kind, record_key, seq, version FROM record_versions")
        }
    audited_keys: dict[tuple[str, str], str] = {(row.kind, row.audited_key): row.key for row in rows}
    latest: dict[tuple[str, str], tuple[AuditEvent, int | None]] = {}
    for event in store.audit.events() if events is None else events:
        if event.event != EVENT:
            continue
        if event.payload_retained and event.detail:
            kind, audited = str(event.detail.get("kind")), str(event.detail.get("key"))
            key = audited_keys.get((kind, audited), audited)
            version: int | None = int(event.detail.get("version", 0))
        elif event.seq in indexed:
            kind, key, version = indexed[event.seq]
        else:
            continue
        latest[(kind, key)] = (event, version)
    replayed, unbound = [], 0
    for row in rows:
        if not row.mac_ok:
            continue  # forged, not replayed: named by the MAC checks
        found = latest.get((row.kind, row.key))
        if found is None:
            unbound += 1
        elif found[0].detail_sha256 != row.bound_sha256:
            replayed.append(
                ReplayedRow(
                    kind=row.kind,
                    key=row.key,
                    version=row.version,
                    audited_version=found[1],
                    tenant_id=row.tenant_id,
                )
            )
    return VersionsReport(rows=len(rows), unbound=unbound, replayed=replayed)


__all__ = [
    "ChainReport",
    "RecordsReport",
    "ReplayedRow",
    "VersionsReport",
    "verify_chain",
    "verify_records",
    "verify_versions",
]
