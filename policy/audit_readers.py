"""Who may read audit events: one rule for every door (the CLI's ``audit`` commands, the HTTP
API's trace route and the console that shows it).

The audit log is evidence about every tenant's people and operations, so reading it is a role,
not a consequence of being able to see a proposal: role ``auditor`` reads the events of its own
tenant; role ``auditor:all`` reads every tenant's and the events that belong to none. A reviewer
or requester who may follow an operation sees its status and result, never its audit events,
unless they also hold an auditor role. Each door records every read and refused read as
``audit.read``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from toolgate.policy.identities import ALL_TENANTS_AUDITOR_ROLE, AUDITOR_ROLE
from toolgate.policy.principal import Principal
from toolgate.store.audit_records import AuditEvent

ALL_TENANTS = "*"
"""How an all-tenant scope is written in ``audit.read`` events and output."""


@dataclass(frozen=True)
class AuditScope:
    """An authenticated auditor and the tenants whose events they may read."""

    principal: Principal
    """The person reading."""
    tenants: frozenset[str] | None
    """Tenants they may read; None for every tenant (and tenant-less events)."""

    @property
    def label(self) -> str:
        """``*`` for every tenant, else the tenants, comma-separated."""
        return ALL_TENANTS if self.tenants is None else ",".join(sorted(self.tenants))

    def covers(self, tenant_id: str | None) -> bool:
        """True when events of ``tenant_id`` are visible (None: only to all-tenant auditors)."""
        return self.tenants is None or (tenant_id is not None and tenant_id in self.tenants)

    def sees(self, event: AuditEvent) -> bool:
        """True when ``event`` is visible in this scope."""
        return self.covers(event.tenant_id)

    def visible(self, events: Iterable[AuditEvent]) -> list[AuditEvent]:
        """The visible part of ``events``, in their order."""
        return [e for e in events if self.sees(e)]


def audit_scope(principal: Principal) -> AuditScope | None:
    """What ``principal`` may read of the audit log, or None when they hold no auditor role."""
    if ALL_TENANTS_AUDITOR_ROLE in principal.roles:
        return AuditScope(principal, None)
    if AUDITOR_ROLE in principal.roles:
        return AuditScope(principal, frozenset({principal.tenant_id}))
    return None


def own_tenant_scope(principal: Principal) -> AuditScope:
    """The scope a refused read is recorded under: the reader's own tenant."""
    return AuditScope(principal, frozenset({principal.tenant_id}))


__all__ = ["ALL_TENANTS", "AuditScope", "audit_scope", "own_tenant_scope"]
