"""Admission slots shared by every process on one store: a cluster-wide cap on work in flight.

A scope (e.g. ``model:acme``, a kind of work of one tenant) has slots numbered ``0 .. cap-1``;
a holder takes one by inserting its row, and the primary key ``(scope, slot)`` decides: two
processes racing for slot ``k`` never both get it. A slot lapses on its own once its
``expires_at`` passes on the store's clock (its holder died or hung), so a crashed process never
keeps a tenant's share forever; only its holder gives it back earlier, and only its holder keeps
it longer, by renewing it before it lapses (`toolgate.policy.cluster_slots` renews a held slot
while its call runs; `toolgate.policy.admission` is the cap on top of these rows).
"""

from __future__ import annotations

from dataclasses import dataclass

from toolgate.clock import later
from toolgate.store.tx import Database


@dataclass(frozen=True)
class SlotRow:
    """One live slot of a scope."""

    scope: str
    slot: int
    holder: str
    expires_at: str
    """When it lapses, on the store's clock (`toolgate.clock.iso` text)."""


class AdmissionSlots:
    """The shared admission slots of one store (``store.slots``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def take(self, scope: str, holder: str, cap: int, ttl_s: float) -> int | None:
        """Give ``holder`` a free slot of ``scope`` below ``cap`` for ``ttl_s`` seconds of the
        store's clock, in one transaction (the scope's lapsed slots are cleared first): the slot
        number, or None, with nothing changed, when all ``cap`` are held. ``ValueError`` for
        ``cap < 1`` or ``ttl_s <= 0``."""
        if cap < 1 or not ttl_s > 0:
            raise ValueError(f"a slot needs a cap >= 1 and a positive time to live, got {cap!r}, {ttl_s!r}")
        with self._db.transaction() as tx:
            now = self._db._tx_now(tx)
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

    def release(self, scope: str, slot: int, holder: str) -> bool:
        """Give slot ``slot`` of ``scope`` back; True when ``holder`` held it (another holder's
        slot, or one already lapsed and taken over, is never touched)."""
        with self._db.transaction() as tx:
            released = tx.execute(
                "DELETE FROM admission_slots WHERE scope = ? AND slot = ? AND holder = ? RETURNING slot",
                (scope, slot, holder),
            )
        return bool(released)

    def renew(self, scope: str, slot: int, holder: str, ttl_s: float) -> bool:
        """Keep slot ``slot`` of ``scope`` for ``ttl_s`` more seconds from the store's clock now;
        True when ``holder`` still holds it live. A lapsed slot, one another holder took over, or
        an unknown one is never revived: False, with nothing changed. ``ValueError`` for
        ``ttl_s <= 0``."""
        if not ttl_s > 0:
            raise ValueError(f"a slot needs a positive time to live, got {ttl_s!r}")
        with self._db.transaction() as tx:
            now = self._db._tx_now(tx)
            # one conditional update: a row another holder took over, or one already lapsed (which
            # a taker may be about to take over), stays as it is
            renewed = tx.execute(
                "UPDATE admission_slots SET expires_at = ?"
                " WHERE scope = ? AND slot = ? AND holder = ? AND expires_at > ? RETURNING slot",
                (later(now, ttl_s), scope, slot, holder, now),
            )
        return bool(renewed)

    def held(self, scope: str) -> list[SlotRow]:
        """The live (unexpired, by the store's clock) slots of ``scope``, by slot number."""
        with self._db.transaction(write=False) as tx:
            now = self._db._tx_now(tx)
            rows = tx.execute(
                "SELECT scope, slot, holder, expires_at FROM admission_slots"
                " WHERE scope = ? AND expires_at > ? ORDER BY slot",
                (scope, now),
            )
        return [
            SlotRow(str(r["scope"]), int(r["slot"]), str(r["holder"]), str(r["expires_at"])) for r in rows
        ]


__all__ = ["AdmissionSlots", "SlotRow"]
