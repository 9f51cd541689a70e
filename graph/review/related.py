"""Other proposals shown beside the one a reviewer is deciding: those that touch the same
resource, and the identical ones of its task.

Five refunds of one order, pending at once, look identical one by one; side by side they are
a warning. "Same resource" is what the tool declares (`ToolSpec.resource_refs`): another proposal
of the same tool and tenant naming one of the same (kind, id) values. The search is bounded (the
newest `SCAN_LIMIT` proposals of the tool in the tenant), so a busy tool costs one page of rows.
Whatever a view shows beside a proposal is read in one statement (`Proposals.beside`): the
approval pause's live ones and identical ones, the console's listing and live ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolgate.store.base import Store
from toolgate.store.records import OperationRecord, ProposalRecord
from toolgate.tools.argpaths import values_at
from toolgate.tools.registry import Registry

SCAN_LIMIT = 200
"""How many of the tool's newest proposals in the tenant are searched."""

ACTIVE_STATUSES: frozenset[str] = frozenset({"pending_approval", "approved", "executing"})
"""Statuses of a proposal that may still move the resource: decided-for or waiting for a decision."""


@dataclass(frozen=True, kw_only=True)
class Related:
    """Another proposal on a resource of the one being decided."""

    proposal: ProposalRecord
    """The other proposal."""
    operation: OperationRecord
    """Its operation (its status)."""
    resources: tuple[tuple[str, str], ...]
    """The (kind, id) pairs it shares with the proposal being decided."""

    @property
    def active(self) -> bool:
        """Whether it is waiting for a decision, approved or running."""
        return self.operation.status in ACTIVE_STATUSES


def resources_of(registry: Registry, proposal: ProposalRecord) -> tuple[tuple[str, str], ...]:
    """The (kind, id) pairs ``proposal`` names, as its tool declares them (none when the release
    has no such tool or it declares no resource)."""
    spec = registry.get_for(proposal.tool, proposal.tenant_id)
    if spec is None:
        return ()
    return tuple(
        sorted(
            {
                (ref.kind, str(value))
                for ref in spec.resource_refs
                for value in values_at(proposal.arguments, ref.argument)
            }
        )
    )


@dataclass(frozen=True, kw_only=True)
class Neighbours:
    """The other proposals shown beside one (`neighbours`); a kind not asked for is empty."""

    listed: list[Related]
    """Those on its resources among the newest `SCAN_LIMIT` of its tool in its tenant, of every
    status, newest first: what the console lists."""
    live: list[Related]
    """Those on its resources among the newest `SCAN_LIMIT` of its tool in its tenant in
    `ACTIVE_STATUSES`, chosen by the database, newest first: what a warning counts. A busy tool's
    finished history is then neither read nor MAC-verified, and a live proposal older than its
    newest `SCAN_LIMIT` is still counted."""
    identical: list[tuple[ProposalRecord, OperationRecord]]
    """Those of its task for the same tool and arguments, oldest first, authentic or not
    (`Proposals.same_effect`)."""


def neighbours(
    store: Store,
    registry: Registry,
    proposal: ProposalRecord,
    *,
    listed: bool = False,
    live: bool = False,
    identical: bool = False,
) -> Neighbours:
    """The other proposals shown beside ``proposal``, the kinds asked for, in one read of the
    store (none when nothing is asked for or could be found: a tool that declares no resource
    has no listing)."""
    mine = set(resources_of(registry, proposal))
    found = store.proposals.beside(
        proposal,
        SCAN_LIMIT,
        newest=listed and bool(mine),
        live=ACTIVE_STATUSES if live and mine else (),
        same_effect=identical,
    )
    return Neighbours(
        listed=_sharing(registry, mine, found.newest),
        live=_sharing(registry, mine, found.live),
        identical=found.same_effect,
    )


def _sharing(
    registry: Registry, mine: set[tuple[str, str]], others: list[tuple[ProposalRecord, OperationRecord]]
) -> list[Related]:
    """Those of ``others`` that name one of the resources ``mine``, in their order."""
    found: list[Related] = []
    for other, operation in others:
        shared = mine & set(resources_of(registry, other))
        if shared:
            found.append(Related(proposal=other, operation=operation, resources=tuple(sorted(shared))))
    return found


__all__ = ["ACTIVE_STATUSES", "SCAN_LIMIT", "Neighbours", "Related", "neighbours", "resources_of"]
