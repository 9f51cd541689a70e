"""The local trusted identities file: who the reviewers and demo users are.

Embedded mode authenticates reviewers from this file (the LangGraph server's auth handler
replaces it in server mode). It is trusted configuration, written by an administrator, never
by a model. Format (JSON)::

    {"schema_version": 1,
     "identities": [{"user_id": "rita", "tenant_id": "acme", "roles": ["support"],
                     "scopes": ["orders:read"], "display_name": "Rita (support)"}]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgate.errors import ConfigurationError, IdentityError
from toolgate.policy.principal import Principal

SCHEMA_VERSION = 1

DEMO_IDENTITIES: dict[str, Any] = {
    "schema_version": SCHEMA_VERSION,
    "identities": [
        {
            "user_id": "cust-ada",
            "tenant_id": "acme",
            "roles": ["customer"],
            "scopes": ["orders:read", "refunds:request"],
            "display_name": "Ada (customer)",
        },
        {
            "user_id": "rita",
            "tenant_id": "acme",
            "roles": ["support"],
            "scopes": ["orders:read", "refunds:request"],
            "display_name": "Rita (support)",
        },
        {
            "user_id": "fiona",
            "tenant_id": "acme",
            "roles": ["finance"],
            "scopes": ["orders:read"],
            "display_name": "Fiona (finance)",
        },
        {
            "user_id": "omar",
            "tenant_id": "acme",
            "roles": ["operator"],
            "scopes": ["ops:read", "ops:restart"],
            "display_name": "Omar (operator)",
        },
        {
            "user_id": "sam",
            "tenant_id": "acme",
            "roles": ["support"],
            "scopes": ["orders:read", "refunds:request", "ops:read", "ops:restart"],
            "display_name": "Sam (support)",
        },
        {
            "user_id": "gina",
            "tenant_id": "globex",
            "roles": ["finance"],
            "scopes": ["orders:read"],
            "display_name": "Gina (globex finance)",
        },
    ],
}


@dataclass(frozen=True)
class Identities:
    """Principals by user id, loaded from the trusted file."""

    principals: dict[str, Principal]

    def get(self, user_id: str) -> Principal:
        """The principal for ``user_id``, or `IdentityError`."""
        try:
            return self.principals[user_id]
        except KeyError:
            raise IdentityError(
                f"unknown identity {user_id!r} (not in the trusted identities file)"
            ) from None

    @classmethod
    def load(cls, path: Path) -> Identities:
        """Parse the identities file, refusing unknown schema versions and duplicates."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigurationError(f"identities file {path} does not exist") from exc
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"identities file {path} is not valid JSON: {exc}") from exc
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ConfigurationError(f"identities file {path}: unsupported schema_version")
        principals: dict[str, Principal] = {}
        for raw in data.get("identities", []):
            principal = Principal.from_dict(raw)
            if principal.user_id in principals:
                raise ConfigurationError(f"identities file {path}: duplicate user {principal.user_id!r}")
            principals[principal.user_id] = principal
        return cls(principals)

    @staticmethod
    def write_demo(path: Path) -> None:
        """Write the demo identities file (used by ``toolgate demo`` when none exists)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(DEMO_IDENTITIES, indent=2) + "\n", encoding="utf-8")


__all__ = ["DEMO_IDENTITIES", "Identities"]
