"""Sealed delegations: the requesting user's own credentials, kept for one approved write.

When a write is proposed, the user's forwarded credentials its tool declares are sealed (AES-GCM,
`toolgate.graph.delivery.delegation`) and stored under the operation key, so the write and its status
checks later act as that user, whoever resumes the thread. The store only keeps the opaque sealed
text: it never sees a credential. A record expires with its proposal and is deleted once the
operation is terminal (`purge_delegations`); so does the copy a claimed write seals for its
status checks under ``reconcile:<operation key>``, which may outlive the proposal. A durable
wait's status checks keep theirs under ``wait:<operation key>`` until the wait ends
(`toolgate.graph.waits.delegation`).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class DelegationRecord:
    """One sealed delegation as stored (``sealed`` is opaque ciphertext, never shown)."""

    operation_key: str
    sealed: str = field(repr=False)
    expires_at: str
    created_at: str


class SealedDelegations(abc.ABC):
    """The sealed-delegation part of the `Store` contract."""

    @abc.abstractmethod
    def put_delegation(self, operation_key: str, sealed: str, expires_at: str) -> DelegationRecord:
        """Store (or replace) the sealed delegation of ``operation_key``, created by the store's clock."""

    @abc.abstractmethod
    def get_delegation(self, operation_key: str) -> DelegationRecord | None:
        """The sealed delegation of ``operation_key`` (expired or not: the caller judges), or None."""

    @abc.abstractmethod
    def delete_delegation(self, operation_key: str) -> bool:
        """Delete the delegation of ``operation_key``; True when there was one."""

    @abc.abstractmethod
    def purge_delegations(self) -> int:
        """Delete every delegation past its expiry (store clock), whose operation is terminal
        (keys: the operation key, or ``reconcile:`` + operation key), or whose durable wait
        (keys ``wait:``/``wait-pending:`` + operation key) has ended; how many were deleted."""


__all__ = ["DelegationRecord", "SealedDelegations"]
