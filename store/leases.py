"""Resource leases: one holder at a time per resource, across threads and processes.

A write that declares a conflicting resource (e.g. an inventory SKU) runs only while its
delivery holds the lease on that resource (`toolgate.graph.delivery.same_resource`). A lease is a row
keyed by resource, taken or taken over in one conditional upsert judged by the store's clock, so
two processes on one PostgreSQL never both hold it; it lapses on its own when its holder dies, and
only its holder can renew or release it.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence


class ResourceLeases(abc.ABC):
    """The resource-lease part of the `Store` contract."""

    @abc.abstractmethod
    def acquire_resources(self, keys: Sequence[str], holder: str, lease_s: float) -> bool:
        """Lease every resource in ``keys`` to ``holder`` for ``lease_s`` seconds of the store's
        clock, all or none, in one transaction (keys taken in sorted order, so two callers never
        deadlock). True when each was free, lapsed or already ``holder``'s; False, with nothing
        changed, when any is held by another live lease. ``ValueError`` for ``lease_s <= 0``."""

    @abc.abstractmethod
    def renew_resources(self, keys: Sequence[str], holder: str, lease_s: float) -> bool:
        """Extend ``holder``'s leases on ``keys`` to ``lease_s`` from now; True when ``holder``
        still holds every one (a lease another holder took over is never touched)."""

    @abc.abstractmethod
    def release_resources(self, keys: Sequence[str], holder: str) -> int:
        """Give up ``holder``'s leases on ``keys``; how many it held (another's lease stays)."""


__all__ = ["ResourceLeases"]
