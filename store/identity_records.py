"""The identity record: a person who may act through toolgate, as the store keeps them.

Separate from the proposal and operation records because it has its own life: the operator
creates, re-roles and revokes identities (``toolgate identities``), and every decision reads them
as they are *now*, whatever happened to the proposals they touch. Like the approval records, its
content is covered by the row's MAC, so a row changed with database access alone does not count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

IdentityStatus = Literal["active", "revoked"]


@dataclass(frozen=True, kw_only=True)
class IdentityRecord:
    """A person who may act through toolgate: requester, reviewer or administrator."""

    user_id: str
    """Stable identifier of the person."""
    tenant_id: str
    """Tenant the person acts in."""
    roles: tuple[str, ...]
    """Roles (sorted), e.g. ``support``, ``finance``, ``admin``."""
    scopes: tuple[str, ...]
    """Granted scopes (sorted)."""
    display_name: str
    """Name for reviewer screens; never used for a decision."""
    token_hash: str | None = field(default=None, repr=False)
    """Keyed hash of the person's secret token (None: cannot authenticate until a token is issued)."""
    status: IdentityStatus = "active"
    """``revoked`` identities cannot act, and their pending decisions stop counting."""
    review_tenants: tuple[str, ...] = ()
    """Further tenants (sorted) this person reviews for, as staff; granted by the operator only."""
    created_at: str = ""
    """ISO-8601 UTC creation time (the store's clock)."""
    updated_at: str = ""
    """ISO-8601 UTC time of the last change (the store's clock)."""
    version: int = 0
    """Bumped by every change and bound into the audit chain with the row's digest
    (`toolgate.store.record_versions`); 0 for rows written before identities had a version."""
    authentic: bool = False
    """Set by the store on read: whether the row's MAC verified and it is the latest version the
    audit chain bound (a row changed or copied back with database access alone is not)."""
    replayed: bool = False
    """Set by the store on read: the MAC verifies but the row is older than its latest audited
    version (an older row copied back); never authentic then."""

    def content(self) -> dict[str, Any]:
        """Everything the record's MAC covers."""
        return (
            {
                "user_id": self.user_id,
                "tenant_id": self.tenant_id,
                "roles": sorted(self.roles),
                "scopes": sorted(self.scopes),
                "display_name": self.display_name,
                "token_hash": self.token_hash,
                "status": self.status,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
            }
            | ({"review_tenants": sorted(self.review_tenants)} if self.review_tenants else {})
            | ({"version": self.version} if self.version else {})
        )


__all__ = ["IdentityRecord", "IdentityStatus"]
