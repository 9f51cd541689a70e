"""Per-tenant overrides: one tool name, a tenant's own implementation and credential.

In a multi-tenant deployment the integration behind a tool can differ by tenant: one tenant's
``crm_lookup_contact`` talks to one CRM, another tenant's to a different one, with a different
credential (chapter §5.4, "the registry resolves crm_lookup_contact to a different implementation,
with a different credential, per tenant, transparently to the agent's prompt").

A `TenantOverride` replaces exactly what runs and what it may hold: the handler (and its revision),
the status check, the user's forwarded credentials it declares, its service credential, its
egress hosts, and the lookup of the facts its reviewer sees (in the tenant's own system).
Everything the model, policy and the reviewer judge by stays the tool's own: name, argument and
result contract, risk, approval class, scopes, resources and limits. So the prompt
never changes by tenant, and an override cannot lower a tool's approval or widen its arguments.

An override is resolved only from the authenticated tenant (the request's principal, or the
tenant the store recorded on a proposal and operation), never from a model argument or from
checkpointed state: `toolgate.tools.registry.Registry.get_for`. A service credential an override
declares is bound to its tenant (`ServiceScope.tenant`, signed into the token), so one tenant's
credential is never issued for, cached for or accepted as another's. The overrides are part of the
release's reviewed manifest (``tenant_overrides``): adding one or changing its code is a reviewed
change, and a process refuses to start on an unreviewed one.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolgate.errors import RegistryError
from toolgate.tools.credentials import ServiceScope
from toolgate.tools.handler import Handler, Reconcile
from toolgate.tools.spec import HandlerContext, ToolSpec

ReviewDetails = Callable[[Any, HandlerContext], dict[str, Any]]
"""A tool's lookup of the facts its reviewer sees (`ToolSpec.review_details`)."""

TENANT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""What a tenant id in an override may look like (it is a key, never free text)."""

TenantSpecs = Mapping[str, Mapping[str, ToolSpec]]
"""Resolved overrides: tenant id to tool name to the spec as it runs for that tenant."""

OVERRIDABLE = frozenset(
    {
        "handler",
        "handler_revision",
        "reconcile",
        "forwarded_credentials",
        "service_credential",
        "egress_hosts",
        "review_details",
    }
)
"""The only `ToolSpec` fields in which a tenant's implementation may differ from the tool's."""


def changed_contract(base: ToolSpec, spec: ToolSpec) -> list[str]:
    """The fields outside `OVERRIDABLE` in which ``spec`` differs from ``base`` (empty: the same
    contract, so the model, policy and reviewers see the same tool whatever the tenant)."""
    return [
        f.name
        for f in dataclasses.fields(ToolSpec)
        if f.init and f.name not in OVERRIDABLE and getattr(spec, f.name) != getattr(base, f.name)
    ]


@dataclass(frozen=True, kw_only=True)
class TenantOverride:
    """One tenant's own implementation of one of the release's tools."""

    tenant_id: str
    """The tenant it applies to (exactly; there are no wildcards)."""
    tool: str
    """The real name of the release's tool it replaces for that tenant."""
    handler: Handler = field(repr=False)
    """The tenant's implementation: same arguments, same result model."""
    handler_revision: str
    """Its revision, distinct from the shared one: proposals pin it and audit events name it."""
    reconcile: Reconcile | None = field(default=None, repr=False)
    """Its status check; required when the shared tool has one (an unknown outcome of this
    tenant's write must be checked in this tenant's system)."""
    forwarded_credentials: frozenset[str] = frozenset()
    """The user's own tokens it needs (replaces the shared tool's list; none are inherited)."""
    service_credential: ServiceScope | None = None
    """Its own service credential (audience and scopes); issued bound to ``tenant_id``."""
    egress_hosts: frozenset[str] = frozenset()
    """The hosts it may reach (replaces the shared tool's; none are inherited)."""
    review_details: ReviewDetails | None = field(default=None, repr=False)
    """The facts its reviewer sees, looked up in the tenant's own system; required when the shared
    tool has such a lookup (the shared system does not hold this tenant's records)."""


def apply_override(base: ToolSpec, override: TenantOverride) -> ToolSpec:
    """``base`` as it runs for ``override.tenant_id``: a full `ToolSpec`, checked like any other."""
    scope = override.service_credential
    return dataclasses.replace(
        base,
        handler=override.handler,
        handler_revision=override.handler_revision,
        reconcile=override.reconcile,
        forwarded_credentials=frozenset(override.forwarded_credentials),
        service_credential=dataclasses.replace(scope, tenant=override.tenant_id) if scope else None,
        egress_hosts=frozenset(override.egress_hosts),
        review_details=override.review_details,
    )


def resolve_overrides(
    release: str, tools: Mapping[str, ToolSpec], overrides: Iterable[TenantOverride]
) -> dict[str, dict[str, ToolSpec]]:
    """Every override applied to its tool; `RegistryError` for an override of a tool the release
    does not have, a malformed tenant id, a second override of one tool for one tenant, a reused
    revision or a write override without the status check its tool has."""
    resolved: dict[str, dict[str, ToolSpec]] = {}
    for override in overrides:
        where = f"override of {override.tool!r} for tenant {override.tenant_id!r} in {release}"
        base = tools.get(override.tool)
        if base is None:
            raise RegistryError(f"{where}: the release has no such tool", tool=override.tool)
        if not TENANT_ID.match(override.tenant_id):
            raise RegistryError(f"{where}: malformed tenant id", tool=override.tool)
        if override.tool in resolved.get(override.tenant_id, {}):
            raise RegistryError(f"{where}: the tenant already overrides this tool", tool=override.tool)
        if override.handler_revision == base.handler_revision:
            raise RegistryError(
                f"{where}: needs its own handler_revision (proposals and audit events name it)",
                tool=override.tool,
            )
        if base.reconcile is not None and override.reconcile is None:
            raise RegistryError(
                f"{where}: the tool has a status check, so the tenant's implementation needs its own",
                tool=override.tool,
            )
        if base.review_details is not None and override.review_details is None:
            raise RegistryError(
                f"{where}: the tool shows its reviewer facts from its system, so the tenant's "
                "implementation needs its own review_details",
                tool=override.tool,
            )
        if override.service_credential is not None and override.service_credential.tenant is not None:
            raise RegistryError(f"{where}: its service credential is bound to its tenant, not set here")
        resolved.setdefault(override.tenant_id, {})[base.name] = apply_override(base, override)
    return resolved


__all__ = [
    "OVERRIDABLE",
    "TENANT_ID",
    "TenantOverride",
    "TenantSpecs",
    "apply_override",
    "changed_contract",
    "resolve_overrides",
]
