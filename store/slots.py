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

import abc
from dataclasses import dataclass


@dataclass(frozen=True)
class SlotRow:
    """One live slot of a scope."""

    scope: str
    slot: int
    holder: str
    expires_at: str
    """When it lapses, on the store's clock (`toolgate.clock.iso` text)."""


class AdmissionSlots(abc.ABC):
    """The shared admission-slot part of the `Store` contract."""

    @abc.abstractmethod
    def take_slot(self, scope: str, holder: str, cap: int, ttl_s: float) -> int | None:
        """Give ``holder`` a free slot of ``scope`` below ``cap`` for ``ttl_s`` seconds of the
        store's clock, in one transaction (the scope's lapsed slots are cleared first): the slot
        number, or None, with nothing changed, when all ``cap`` are held. ``ValueError`` for
        ``cap < 1`` or ``ttl_s <= 0``."""

    @abc.abstractmethod
    def release_slot(self, scope: str, slot: int, holder: str) -> bool:
        """Give slot ``slot`` of ``scope`` back; True when ``holder`` held it (another holder's
        slot, or one already lapsed and taken over, is never touched)."""

    @abc.abstractmethod
    def renew_slot(self, scope: str, slot: int, holder: str, ttl_s: float) -> bool:
        """Keep slot ``slot`` of ``scope`` for ``ttl_s`` more seconds from the store's clock now;
        True when ``holder`` still holds it live. A lapsed slot, one another holder took over, or
        an unknown one is never revived: False, with nothing changed. ``ValueError`` for
        ``ttl_s <= 0``."""

    @abc.abstractmethod
    def held_slots(self, scope: str) -> list[SlotRow]:
        """The live (unexpired, by the store's clock) slots of ``scope``, by slot number."""


__all__ = ["AdmissionSlots", "SlotRow"]
