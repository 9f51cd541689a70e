"""Authorization from the authenticated context: scopes, then resource ownership under the tenant.

A scope check answers "may this principal ever call the tool"; the resource check answers
"may it call it on this resource" (the IDOR gap, chapter §6.2). Both read only trusted data:
the principal and the system of record. Neither ever reads an identity from arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgate.policy.decisions import Rejection
from toolgate.policy.principal import Principal
from toolgate.tools.spec import ResourceResolver, ToolSpec


def exposed(spec: ToolSpec, principal: Principal) -> bool:
    """Whether ``principal`` may see ``spec``: all its scopes, and its role and tenant restrictions."""
    if not principal.has_scopes(spec.required_scopes):
        return False
    if spec.exposed_to_roles is not None and not (principal.roles & spec.exposed_to_roles):
        return False
    return spec.exposed_to_tenants is None or principal.tenant_id in spec.exposed_to_tenants


def check_scopes(spec: ToolSpec, principal: Principal) -> Rejection | None:
    """Refuse a tool the principal may not see (scopes, roles, tenant). Not retryable."""
    if exposed(spec, principal):
        return None
    return Rejection(
        code="unauthorized",
        message=f"You are not authorized to use {spec.name}. Tell the user this action is not available to them.",
        retryable=False,
    )


def check_resource(
    spec: ToolSpec, principal: Principal, args: Mapping[str, Any], resolver: ResourceResolver
) -> Rejection | None:
    """Resolve the call's resource under the principal's tenant before anything else touches it.

    A resource of another tenant and a missing one get the same model-facing message, so the
    refusal is no oracle for other tenants' ids; the audit log keeps the precise code.
    """
    if spec.resource is None:
        return None
    resource_id = str(args[spec.resource.argument])
    status = resolver.resource_status(spec.resource.kind, resource_id, principal.tenant_id)
    if status == "owned":
        return None
    message = f"No {spec.resource.kind} with that id exists for this account."
    if status == "foreign":
        return Rejection(code="cross_tenant", message=message, retryable=False)
    return Rejection(
        code="semantic_invalid",
        message=message,
        retryable=True,
        suggestion=f"check the {spec.resource.argument} with the user",
    )


__all__ = ["check_resource", "check_scopes", "exposed"]
