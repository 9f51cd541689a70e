"""The demo's people: who they are, and their well-known tokens (demo and tests only).

Real deployments add identities with ``toolgate identities add`` or ``identities import``, which
issue random tokens and print each once; only keyed hashes of tokens are ever stored.
"""

from __future__ import annotations

from typing import Any

from toolgate.policy.identities import SCHEMA_VERSION, IdentityDirectory
from toolgate.policy.principal import Principal

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
            "user_id": "cust-bob",
            "tenant_id": "acme",
            "roles": ["customer"],
            "scopes": ["orders:read", "refunds:request"],
            "display_name": "Bob (customer)",
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
            "user_id": "lee",
            "tenant_id": "acme",
            "roles": ["support"],
            "scopes": [
                "orders:read",
                "inventory:read",
                "inventory:write",
                "purchasing:read",
                "purchasing:write",
                "reports:read",
                "reports:write",
                "filings:write",
                "crm:read",
            ],
            "display_name": "Lee (operations requester)",
        },
        {
            "user_id": "wanda",
            "tenant_id": "acme",
            "roles": ["warehouse"],
            "scopes": ["inventory:read"],
            "display_name": "Wanda (warehouse reviewer)",
        },
        {
            "user_id": "paul",
            "tenant_id": "acme",
            "roles": ["purchasing_manager"],
            "scopes": ["purchasing:read"],
            "display_name": "Paul (purchasing manager)",
        },
        {
            "user_id": "ana",
            "tenant_id": "acme",
            "roles": ["analyst"],
            "scopes": ["reports:read"],
            "display_name": "Ana (analyst)",
        },
        {
            "user_id": "tara",
            "tenant_id": "acme",
            "roles": ["tax_preparer"],
            "scopes": [],
            "display_name": "Tara (tax preparer)",
        },
        {
            "user_id": "ivy",
            "tenant_id": "acme",
            "roles": ["admin"],
            "scopes": [],
            "display_name": "Ivy (acme identity administrator)",
        },
        {
            "user_id": "audrey",
            "tenant_id": "acme",
            "roles": ["auditor"],
            "scopes": [],
            "display_name": "Audrey (acme auditor)",
        },
        {
            "user_id": "glen",
            "tenant_id": "globex",
            "roles": ["auditor"],
            "scopes": [],
            "display_name": "Glen (globex auditor)",
        },
        {
            "user_id": "otto",
            "tenant_id": "toolgate-staff",
            "roles": ["auditor:all"],
            "scopes": [],
            "display_name": "Otto (staff auditor of every tenant)",
        },
        {
            "user_id": "stella",
            "tenant_id": "toolgate-staff",
            "roles": ["finance", "support"],
            "scopes": [],
            "review_tenants": ["acme"],
            "display_name": "Stella (staff reviewer for acme)",
        },
        {
            "user_id": "cust-gina",
            "tenant_id": "globex",
            "roles": ["customer"],
            "scopes": ["orders:read", "refunds:request"],
            "display_name": "Gina Hopper (globex customer)",
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


def demo_token(user_id: str) -> str:
    """The well-known token of a demo identity. Demo only: real identities get random tokens."""
    return f"demo-token-{user_id}"


def demo_principals() -> dict[str, Principal]:
    """The demo identities as principals, by user id."""
    return {raw["user_id"]: Principal.from_dict(raw) for raw in DEMO_IDENTITIES["identities"]}


def seed_demo_identities(directory: IdentityDirectory) -> int:
    """Add every demo identity that is missing, with its demo token; returns how many were added."""
    return sum(
        directory.add(principal, by=None, token=demo_token(user_id)) is not None
        for user_id, principal in demo_principals().items()
        if directory.store.identities.get(user_id) is None
    )


__all__ = ["DEMO_IDENTITIES", "demo_principals", "demo_token", "seed_demo_identities"]
