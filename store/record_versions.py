"""Which version of a MAC'd row is the latest: every change of a row whose order matters is bound
into the audit chain.

A row's MAC proves that trusted code once wrote it, not that it is the newest: an older, validly
MAC'd release pointer, rollout, pin or identity row copied back with database access alone would
verify. So every change of such a row links, in the transaction that writes it, one
``record.versioned`` audit event whose payload names the row (kind and key), its new version and
the digest of the row's signed content (`binding`). The chain covers the payload's digest, so the
binding holds after retention purged the payload, and nobody without the store's secret can add
a later one.

On read, trusted code compares a row with the latest binding of its key (`freshness`): a row
whose MAC verifies but which is not the audited latest is ``replayed`` and treated exactly like
a row that does not verify. The look-up is one indexed subquery of the same statement that reads
the row (`bound_sql`), so the row and its binding come from one snapshot on both backends: the
``record_versions`` table maps (kind, key) to the sequence numbers of their events, append-only
like the chain, and is only an index: `toolgate.store.chain.verify_versions` judges every row
against the chain itself.

A row with no binding yet (written before bindings existed, unchanged since) is accepted; its
next change records one. A fresh store has no such rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from toolgate.canonical import canonical_json, sha256_hex
from toolgate.store.audit_log import AuditLog
from toolgate.store.audit_records import AuditEventIn
from toolgate.store.tx import Tx

EVENT = "record.versioned"
"""The audit event that binds one row version."""

VersionedKind = Literal["release_pointer", "release_rollout", "rollout_pin", "thread_release", "identity"]
"""The kinds of rows bound to the chain (one per table)."""

Freshness = Literal["current", "unbound", "replayed"]
"""How a row compares with its latest binding: the bound one, none recorded yet, or another."""


def binding(kind: VersionedKind, key: str, version: int, content: dict[str, Any]) -> dict[str, Any]:
    """The payload of the event binding one version of a row: the digest of its signed content."""
    return {"kind": kind, "key": key, "version": version, "sha256": sha256_hex(canonical_json(content))}


def binding_sha256(kind: VersionedKind, key: str, version: int, content: dict[str, Any]) -> str:
    """The payload digest (``detail_sha256``) the binding event of this exact row version has."""
    return sha256_hex(canonical_json(binding(kind, key, version, content)))


def pin_key(rollout_id: str, thread_id: str) -> str:
    """The key of a rollout pin (rollout ids never hold a colon); `bound_sql` builds the same."""
    return f"{rollout_id}:{thread_id}"


MISSING = "-"
"""What `bound_sql` yields when the index names an event that is not a binding."""


def bound_sql(kind: VersionedKind, key_sql: str) -> str:
    """A subquery for a SELECT list: the payload digest of the latest binding of the row whose key
    is the SQL expression ``key_sql`` (NULL: no binding; `MISSING`: the index points elsewhere)."""
    return (
        f"(SELECT COALESCE(e.detail_sha256, '{MISSING}') FROM record_versions v"
        f" LEFT JOIN audit_events e ON e.seq = v.seq AND e.event = '{EVENT}'"
        f" WHERE v.kind = '{kind}' AND v.record_key = {key_sql} ORDER BY v.seq DESC LIMIT 1)"
    )


def freshness(
    kind: VersionedKind, key: str, version: int, content: dict[str, Any], bound: str | None
) -> Freshness:
    """Whether a row read with its latest binding digest ``bound`` (from `bound_sql`) is that one."""
    if bound is None:
        return "unbound"
    return "current" if binding_sha256(kind, key, version, content) == bound else "replayed"


@dataclass(frozen=True, kw_only=True)
class Bound:
    """One row version to bind in the transaction that writes it."""

    kind: VersionedKind
    key: str
    """The row's key in the index (``record_versions.record_key``)."""
    version: int
    content: dict[str, Any]
    """The row's signed content (what its MAC covers)."""
    audited_key: str = ""
    """The key as the audit payload names it ("": ``key``); an identity's is a keyed hash of the
    user id, as every user id in the log is."""
    tenant_id: str | None = None
    """The tenant the row belongs to (tenant auditors see its binding), when it has one."""
    thread_id: str | None = None
    """The thread the row belongs to, when it has one."""
    tool_release: str | None = None
    """The release the row names (a pin's release, a rollout's candidate), when it names one."""


@dataclass(frozen=True, kw_only=True)
class VersionedRow:
    """One stored row as `toolgate.store.chain.verify_versions` judges it against the chain."""

    kind: VersionedKind
    key: str
    """The row's key in the index."""
    audited_key: str
    """The key as the audit payload names it."""
    version: int
    content: dict[str, Any]
    """The row's signed content."""
    mac_ok: bool
    """Whether the row's MAC verifies (rows that do not are forged, not replayed)."""
    tenant_id: str | None = None
    """The tenant the row belongs to (None: process-level, e.g. release control)."""

    @property
    def bound_sha256(self) -> str:
        """The payload digest the binding event of exactly this row version has."""
        return binding_sha256(self.kind, self.audited_key, self.version, self.content)


def bind(tx: Tx, audit: AuditLog, rows: Sequence[Bound]) -> None:
    """Link one binding event per row and index it: the last step of the transaction that wrote
    ``rows`` (the chain's lock is held until it ends)."""
    if not rows:
        return
    events = [
        AuditEventIn(
            event=EVENT,
            result="written",
            tenant_id=row.tenant_id or None,
            thread_id=row.thread_id,
            tool_release=row.tool_release,
            detail=binding(row.kind, row.audited_key or row.key, row.version, row.content),
        )
        for row in rows
    ]
    linked = audit.link(tx, events)
    tx.send(  # nobody reads its answer: it goes with the COMMIT
        "INSERT INTO record_versions (kind, record_key, seq, version) VALUES "
        + ", ".join("(?, ?, ?, ?)" for _ in rows),
        tuple(
            v
            for row, event in zip(rows, linked, strict=True)
            for v in (row.kind, row.key, event.seq, row.version)
        ),
    )


__all__ = [
    "EVENT",
    "MISSING",
    "Bound",
    "Freshness",
    "VersionedKind",
    "VersionedRow",
    "bind",
    "binding",
    "binding_sha256",
    "bound_sql",
    "freshness",
    "pin_key",
]
