"""Sealed delegations in SQL: one row per operation key, opaque ciphertext only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolgate.store.delegations import DelegationRecord
from toolgate.store.records import TERMINAL_STATUSES

if TYPE_CHECKING:
    from toolgate.store.base import Tx


def _record(row: dict[str, Any]) -> DelegationRecord:
    return DelegationRecord(
        operation_key=row["operation_key"],
        sealed=row["sealed"],
        expires_at=row["expires_at"],
        created_at=row["created_at"],
    )


class DelegationRows:
    """The sealed-delegation part of `SqlStore` (mixed in; uses its transactions and clock)."""

    if TYPE_CHECKING:

        def transaction(self, *, write: bool = True) -> Any: ...

        def _tx_now(self, tx: Tx) -> str: ...

    def put_delegation(self, operation_key: str, sealed: str, expires_at: str) -> DelegationRecord:
        with self.transaction() as tx:
            row = tx.one(
                "INSERT INTO sealed_delegations (operation_key, sealed, expires_at, created_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (operation_key) DO UPDATE SET"
                " sealed = excluded.sealed, expires_at = excluded.expires_at, created_at = excluded.created_at"
                " RETURNING *",
                (operation_key, sealed, expires_at, self._tx_now(tx)),
            )
        assert row is not None
        return _record(row)

    def get_delegation(self, operation_key: str) -> DelegationRecord | None:
        with self.transaction(write=False) as tx:
            row = tx.one("SELECT * FROM sealed_delegations WHERE operation_key = ?", (operation_key,))
        return _record(row) if row else None

    def delete_delegation(self, operation_key: str) -> bool:
        with self.transaction() as tx:
            gone = tx.execute(
                "DELETE FROM sealed_delegations WHERE operation_key = ? RETURNING operation_key",
                (operation_key,),
            )
        return bool(gone)

    def purge_delegations(self) -> int:
        terminal = sorted(TERMINAL_STATUSES)
        with self.transaction() as tx:
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
                (self._tx_now(tx), *terminal, *terminal),
            )
        return len(gone)


__all__ = ["DelegationRows"]
