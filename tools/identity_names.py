"""Names that carry identity or authority. They never belong in a model-facing schema.

Tenant, user, account and privilege come from the authenticated context. A schema that lets
the model fill ``approved_by`` or ``tenant_id`` hands it authority it must never have; the registry
audit refuses such schemas, and dispatch refuses such arguments with ``identity_in_arguments``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

IDENTITY_TOKENS = frozenset(
    {
        "tenant",
        "tenants",
        "user",
        "users",
        "userid",
        "username",
        "owner",
        "owners",
        "role",
        "roles",
        "approver",
        "approvers",
        "approved",
        "approval",
        "admin",
        "is_admin",
        "superuser",
        "sudo",
        "permission",
        "permissions",
        "privilege",
        "privileges",
        "scope",
        "scopes",
        "principal",
        "authorized",
        "authorization",
        "requester",
        "account",
        "accounts",
        "customer",
        "impersonate",
        "acting",
        "auth",
        "credential",
        "credentials",
        "apikey",
        "api_key",
        "password",
        "secret",
        "bearer",
    }
)
"""Lower-case words; a field whose name contains one of them (split on ``_``, ``-`` or case) is identity."""

_SPLIT = re.compile(r"[_\-\s.]+|(?<=[a-z0-9])(?=[A-Z])")


def is_identity_name(name: str) -> bool:
    """True when ``name`` (e.g. ``tenant_id``, ``approvedBy``, ``is_admin``) carries identity or authority."""
    lowered = name.casefold()
    if lowered in IDENTITY_TOKENS:
        return True
    return any(part.casefold() in IDENTITY_TOKENS for part in _SPLIT.split(name) if part)


def identity_keys(value: Any, prefix: str = "", depth: int = 0) -> Iterator[str]:
    """Paths of identity-like keys anywhere in a JSON value supplied by the model (bounded depth)."""
    if depth > 32:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if is_identity_name(str(key)):
                yield path
            yield from identity_keys(item, path, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value[:1000]):
            yield from identity_keys(item, f"{prefix}.{index}", depth + 1)


__all__ = ["IDENTITY_TOKENS", "identity_keys", "is_identity_name"]
