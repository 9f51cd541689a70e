"""Shared admission slots in SQL: one row per held slot, taken by a conditional upsert on the
store's clock (`toolgate.store.slots`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolgate.clock import later
from toolgate.store.slots import SlotRow

if TYPE_CHECKING:
    from toolgate.store.base import Tx


class SlotRows:
    """The admission-slot part of `SqlStore` (mixed in; uses its transactions and clock)."""

    if TYPE_CHECKING:

        def transaction(self, *, write: bool = True) -> Any: ...

        def _tx_now(self, tx: Tx) -> str: ...

    def take_slot(self, scope: str, holder: str, cap: int, ttl_s: float) -> int | None:
        if cap < 1 or not ttl_s > 0:
            raise ValueError(f"a slot needs a cap >= 1 and a positive time to live, got {cap!r}, {ttl_s!r}")
        with self.transaction() as tx:
            now = self._tx_now(tx)
            rows = tx.execute("SELECT slot, expires_at FROM admission_slots WHERE scope = ?", (scope,))
            live = {int(r["slot"]) for r in rows if r["expires_at"] > now}
            # ascending: racing takers lock the rows they try in the same order (no deadlock); the
            # primary key decides each slot, and a lapsed row is taken over only while still lapsed
            for slot in (k for k in range(cap) if k not in live):
                taken = tx.execute(
                    "INSERT INTO admission_slots (scope, slot, holder, expires_at) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (scope, slot) DO UPDATE SET"
                    " holder = excluded.holder, expires_at = excluded.expires_at"
                    " WHERE admission_slots.expires_at <= ? RETURNING slot",
                    (scope, slot, holder, later(now, ttl_s), now),
                )
                if taken:
                    return slot
        return None

    def release_slot(self, scope: str, slot: int, holder: str) -> bool:
        with self.transaction() as tx:
            released = tx.execute(
                "DELETE FROM admission_slots WHERE scope = ? AND slot = ? AND holder = ? RETURNING slot",
                (scope, slot, holder),
            )
        return bool(released)

    def renew_slot(self, scope: str, slot: int, holder: str, ttl_s: float) -> bool:
        if not ttl_s > 0:
            raise ValueError(f"a slot needs a positive time to live, got {ttl_s!r}")
        with self.transaction() as tx:
            now = self._tx_now(tx)
            # one conditional update: a row another holder took over, or one already lapsed (which
            # a taker may be about to take over), stays as it is
            renewed = tx.execute(
                "UPDATE admission_slots SET expires_at = ?"
                " WHERE scope = ? AND slot = ? AND holder = ? AND expires_at > ? RETURNING slot",
                (later(now, ttl_s), scope, slot, holder, now),
            )
        return bool(renewed)

    def held_slots(self, scope: str) -> list[SlotRow]:
        with self.transaction(write=False) as tx:
            now = self._tx_now(tx)
            rows = tx.execute(
                "SELECT scope, slot, holder, expires_at FROM admission_slots"
                " WHERE scope = ? AND expires_at > ? ORDER BY slot",
                (scope, now),
            )
        return [
            SlotRow(str(r["scope"]), int(r["slot"]), str(r["holder"]), str(r["expires_at"])) for r in rows
        ]


__all__ = ["SlotRows"]
