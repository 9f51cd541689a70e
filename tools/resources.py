"""The resources a call names, and who owns them: checked for the authenticated caller before
anything touches them.

A tool declares a `ResourceRef` per argument that carries a resource id; authorization
(`toolgate.policy.authorization`) resolves each one at dispatch and again at execute, through the
reference's own `OwnerCheck` or the release's `ResourceResolver`, and refuses what is not the
caller's. This vocabulary is shared by tool specs, the release's resolver and the system-of-record
code behind both (`ownership` reads one looked-up row), which is why it stands on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from toolgate.tools.handler import HandlerContext

ResourceStatus = Literal["owned", "foreign", "missing", "not_owner"]
"""Where a named resource stands relative to the caller: theirs (``owned``), another tenant's
(``foreign``), absent (``missing``), or their tenant's but another user's (``not_owner``)."""


OwnerCheck = Callable[[str, HandlerContext], ResourceStatus]
"""Who owns one resource id, asked of the system of record with the caller's tenant and user
(a `HandlerContext` without keys or deadline); returns a `ResourceStatus`."""


@dataclass(frozen=True, kw_only=True)
class ResourceRef:
    """A resource a call names, resolved for the authenticated caller before anything touches it.

    A tool declares one per argument that names a resource (``order_id``, ``payment.method_id``,
    ``items[].sku``: every value found there is checked). Checked at dispatch and again at execute.
    """

    kind: str
    """Resource type, e.g. ``order`` or ``service``."""
    argument: str
    """Path of the argument that carries the resource identifier (see `toolgate.tools.argpaths`)."""
    conflict: bool = True
    """Calls on the same (kind, id) never run concurrently: in one batch they run in order, and a
    write holds the store's lease on (tenant, kind, id) across threads and processes."""
    owner: OwnerCheck | None = field(default=None, compare=False)
    """Resolves ownership with tenant and user (e.g. an order belongs to one customer). Without
    it the registry's resolver decides per tenant."""
    staff_roles: frozenset[str] = frozenset()
    """Holders of these roles act on any user's resource of their own tenant (support staff);
    other tenants' resources stay out of reach."""


class ResourceResolver(Protocol):
    """Resolves a resource under the authenticated tenant, reading the system of record only."""

    def resource_status(self, kind: str, resource_id: str, tenant_id: str) -> ResourceStatus:
        """Ownership of ``(kind, resource_id)`` relative to ``tenant_id``."""
        ...


def ownership(row: Any, tenant_id: str, user_id: str | None = None, owner_column: str = "") -> ResourceStatus:
    """Status of a looked-up resource row relative to ``tenant_id`` (its ``tenant_id`` column)
    and, when ``owner_column`` is given, to ``user_id`` (a null owner is the tenant's)."""
    if row is None:
        return "missing"
    if row["tenant_id"] != tenant_id:
        return "foreign"
    if owner_column and row[owner_column] is not None and row[owner_column] != user_id:
        return "not_owner"
    return "owned"


__all__ = ["OwnerCheck", "ResourceRef", "ResourceResolver", "ResourceStatus", "ownership"]
