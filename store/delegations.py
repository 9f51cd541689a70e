"""Sealed delegations: the requesting user's own credentials, kept for one approved write.

When a write is proposed, the user's forwarded credentials its tool declares are sealed (AES-GCM,
`toolgate.graph.delivery.delegation`) and stored under the operation key, so the write and its status
checks later act as that user, whoever resumes the thread. The store only keeps the opaque sealed
text: it never sees a credential. A record expires with its proposal and is deleted once the
operation is terminal (`SealedDelegations.purge`); so does the copy a claimed write seals for its
status checks under ``reconcile:<operation key>``, which may outlive the proposal. A durable
wait's status checks keep theirs under ``wait:<operation key>`` until the wait ends
(`toolgate.graph.waits.delegation`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolgate.store.records import TERMINAL_STATUSES
from toolgate.store.tx import Database


@dataclass(frozen=True, kw_only=True)
class DelegationRecord:
    """One sealed delegation as stored (``sealed`` is opaque ciphertext, never shown)."""

    operation_key: str
    sealed: str = field(repr=False)
    expires_at: str
    created_at: str


def _record(row: dict[str, Any]) -> DelegationRecord:
    return DelegationRecord(
        operation_key=row["operation_key"],
        sealed=row["sealed"],
        expires_at=row["expires_at"],
        created_at=row["created_at"],
    )


class SealedDelegations:
    """The sealed delegations of one store (``store.delegations``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def put(self, operation_key: str, sealed: str, expires_at: str) -> DelegationRecord:
        """Store (or replace) the sealed delegation of ``operation_key``, created by the store's clock."""
        with self._db.transaction() as tx:
            row = tx.one(
                "INSERT INTO sealed_delegations (operation_key, sealed, expires_at, created_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (operation_key) DO UPDATE SET"
                " sealed = excluded.sealed, expires_at = excluded.expires_at, created_at = excluded.created_at"
                " RETURNING *",
                (operation_key, sealed, expires_at, self._db._tx_now(tx)),
            )
        assert row is not None
        return _record(row)

    def get(self, operation_key: str) -> DelegationRecord | None:
        """The sealed delegation of ``operation_key`` (expired or not: the caller judges), or None."""
        with self._db.transaction(write=False) as tx:
            row = tx.one("SELECT * FROM sealed_delegations WHERE operation_key = ?", (operation_key,))
        return _record(row) if row else None

    def delete(self, operation_key: str) -> bool:
        """Delete the delegation of ``operation_key``; True when there was one."""
        with self._db.transaction() as tx:
            gone = tx.execute(
                "DELETE FROM sealed_delegations WHERE operation_key = ? RETURNING operation_key",
                (operation_key,),
            )
        return bool(gone)

    def purge(self) -> int:
        """Delete every delegation past its expiry (store clock), whose operation is terminal
        (keys: the operation key, or ``reconcile:`` + operation key), or whose durable wait
        (keys ``wait:``/``wait-pending:`` + operation key) has ended; how many were deleted."""
        terminal = sorted(TERMINAL_STATUSES)
        with self._db.transaction() as tx:
            gone = tx.execute(
                "DELETE FROM sealed_delegations WHERE expires_at <= ? OR operation_key IN ("
                " SELECT operation_key FROM operations WHERE status IN ("
                + ", ".join("?" for _ in terminal)
                + "))"
                # a claimed write's seal for its status checks (`toolgate.graph.delivery.delegation`) goes with it
                " OR operation_key IN (SELECT 'reconcile:' || operation_key FROM operations WHERE status IN ("
                + ", ".join("?" for _ in terminal)
                + "))"
                # a wait's sealed credentials (`toolgate.graph.waits.delegation`) go when the wait ends
                " OR operation_key IN (SELECT 'wait:' || operation_key FROM job_waits WHERE state <> 'waiting')"
                " OR operation_key IN ("
                " SELECT 'wait-pending:' || operation_key FROM job_waits WHERE state <> 'waiting')"
                " RETURNING operation_key",
                (self._db._tx_now(tx), *terminal, *terminal),
            )
        return len(gone)


__all__ = ["DelegationRecord", "SealedDelegations"]
