"""Resource leases in SQL: one row per resource, taken by a conditional upsert on the store's clock."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolgate.clock import later

if TYPE_CHECKING:
    from toolgate.store.base import Tx


class _Held(Exception):
    """One of the wanted resources is leased to another holder: roll the whole acquisition back."""


class LeaseRows:
    """The resource-lease part of `SqlStore` (mixed in; uses its transactions and clock)."""

    if TYPE_CHECKING:

        def transaction(self, *, write: bool = True) -> Any: ...

        def _tx_now(self, tx: Tx) -> str: ...

    def acquire_resources(self, keys: Sequence[str], holder: str, lease_s: float) -> bool:
        if lease_s <= 0:
            raise ValueError(f"a resource lease needs a positive duration, got {lease_s!r}")
        wanted = sorted(set(keys))
        if not wanted:
            return True
        try:
            with self.transaction() as tx:
                now = self._tx_now(tx)
                for key in wanted:  # sorted: two acquirers lock shared rows in the same order
                    taken = tx.execute(
                        "INSERT INTO resource_leases (resource_key, holder, acquired_at, expires_at)"
                        " VALUES (?, ?, ?, ?) ON CONFLICT (resource_key) DO UPDATE SET"
                        " holder = excluded.holder, acquired_at = excluded.acquired_at,"
                        " expires_at = excluded.expires_at"
                        " WHERE resource_leases.expires_at <= ? OR resource_leases.holder = excluded.holder"
                        " RETURNING resource_key",
                        (key, holder, now, later(now, lease_s), now),
                    )
                    if not taken:
                        raise _Held(key)
        except _Held:
            return False
        return True

    def renew_resources(self, keys: Sequence[str], holder: str, lease_s: float) -> bool:
        wanted = sorted(set(keys))
        if not wanted:
            return True
        with self.transaction() as tx:
            renewed = tx.execute(
                "UPDATE resource_leases SET expires_at = ? WHERE holder = ? AND resource_key IN ("
                + ", ".join("?" for _ in wanted)
                + ") RETURNING resource_key",
                (later(self._tx_now(tx), lease_s), holder, *wanted),
            )
        return len(renewed) == len(wanted)

    def release_resources(self, keys: Sequence[str], holder: str) -> int:
        wanted = sorted(set(keys))
        if not wanted:
            return 0
        with self.transaction() as tx:
            released = tx.execute(
                "DELETE FROM resource_leases WHERE holder = ? AND resource_key IN ("
                + ", ".join("?" for _ in wanted)
                + ") RETURNING resource_key",
                (holder, *wanted),
            )
        return len(released)


__all__ = ["LeaseRows"]
