"""`ProposalCache`: proposals kept in memory once read, because a stored proposal never changes.

Every delivery of a write reads its proposal (to verify the approval, to name the call in the
audit trail, to build the handler's context) and the execute node reads it again to check a call
against it. Database triggers refuse any change to a stored proposal, so a copy read once stays
right for the life of the process; that argument holds for proposals only, which is why this cache
is its own module and approvals, operations and identities are never cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from toolgate.store.records import ProposalRecord


class ProposalCache:
    """A bounded map of proposals by id. Proposals are immutable once stored (database triggers
    refuse any change), so a copy read once stays right; approvals, operations and identities are
    never cached."""

    SIZE = 2048

    def __init__(self) -> None:
        self._items: OrderedDict[str, ProposalRecord] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, proposal_id: str) -> ProposalRecord | None:
        with self._lock:
            found = self._items.get(proposal_id)
            if found is not None:
                self._items.move_to_end(proposal_id)
            return found

    def put(self, proposal: ProposalRecord) -> None:
        with self._lock:
            self._items[proposal.proposal_id] = proposal
            while len(self._items) > self.SIZE:
                self._items.popitem(last=False)


__all__ = ["ProposalCache"]
