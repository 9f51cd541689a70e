"""Who is asking: the authenticated principal, built by trusted code, never by the model."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Principal:
    """An authenticated caller on whose behalf the agent acts.

    Built from the trusted identities file, the LangGraph server's auth handler or test code.
    Tool arguments never contribute to any field here.
    """

    user_id: str
    """Stable identifier of the end user (hashed before it reaches the audit log)."""
    tenant_id: str
    """Tenant the user belongs to; every resource lookup is scoped to it."""
    roles: frozenset[str] = field(default_factory=frozenset)
    """Roles, e.g. ``support``, ``operator``, ``finance``; used by policy and approval rules."""
    scopes: frozenset[str] = field(default_factory=frozenset)
    """Granted scopes, e.g. ``orders:read``; a tool is exposed only if all its scopes are granted."""
    display_name: str = ""
    """Human-readable name for reviewer screens; not used for any decision."""
    review_tenants: frozenset[str] = field(default_factory=frozenset)
    """Further tenants this person reviews proposals for (staff reviewers), from their identity
    row; they request, read and act only in ``tenant_id``."""

    def reviews_for(self, tenant_id: str) -> bool:
        """True when this person may review proposals of ``tenant_id`` (their own, or as staff)."""
        return tenant_id == self.tenant_id or tenant_id in self.review_tenants

    def has_scopes(self, required: Iterable[str]) -> bool:
        """True when every scope in ``required`` is granted."""
        return set(required) <= self.scopes

    def to_dict(self) -> dict[str, Any]:
        """Plain form for checkpointed state and JSON."""
        return {
            "user_id": self.user_id,
            "tenant_id": self.tenant_id,
            "roles": sorted(self.roles),
            "scopes": sorted(self.scopes),
            "display_name": self.display_name,
        } | ({"review_tenants": sorted(self.review_tenants)} if self.review_tenants else {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Principal:
        """Inverse of `to_dict`; unknown keys are refused."""
        allowed = {"user_id", "tenant_id", "roles", "scopes", "display_name", "review_tenants"}
        extra = set(data) - allowed
        if extra:
            raise ValueError(f"unknown principal fields: {sorted(extra)}")
        return cls(
            user_id=str(data["user_id"]),
            tenant_id=str(data["tenant_id"]),
            roles=frozenset(data.get("roles", ())),
            scopes=frozenset(data.get("scopes", ())),
            display_name=str(data.get("display_name", "")),
            review_tenants=frozenset(data.get("review_tenants", ())),
        )


__all__ = ["Principal"]
