"""The local trusted identities file: who the reviewers and demo users are.

Embedded mode authenticates reviewers from this file (each reviewer holds a secret token whose
SHA-256 is stored here; ``TOOLGATE_REVIEWER_TOKEN`` carries it to the CLI) (the LangGraph server's auth handler
replaces it in server mode). It is trusted configuration, written by an administrator, never
by a model. Format (JSON)::

    {"schema_version": 1,
     "identities": [{"user_id": "rita", "tenant_id": "acme", "roles": ["support"],
                     "scopes": ["orders:read"], "display_name": "Rita (support)"}]}
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
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
    token_hashes: dict[str, str] = field(default_factory=dict, repr=False)
    """SHA-256 of each identity's secret token (identities without one cannot act as reviewers)."""

    def authenticate(self, user_id: str, token: str | None) -> Principal:
        """The principal for ``user_id`` when ``token`` matches its stored hash; `IdentityError` otherwise."""
        principal = self.get(user_id)
        expected = self.token_hashes.get(user_id)
        if expected is None:
            raise IdentityError(
                f"identity {user_id!r} has no credential configured; it cannot act as a reviewer"
            )
        if not token or not hmac.compare_digest(expected, token_hash(token)):
            raise IdentityError(f"authentication failed for {user_id!r}")
        return principal

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
        hashes: dict[str, str] = {}
        for entry in data.get("identities", []):
            raw = dict(entry)
            token_sha256 = raw.pop("token_sha256", None)
            principal = Principal.from_dict(raw)
            if token_sha256:
                hashes[principal.user_id] = str(token_sha256)
            if principal.user_id in principals:
                raise ConfigurationError(f"identities file {path}: duplicate user {principal.user_id!r}")
            principals[principal.user_id] = principal
        return cls(principals, hashes)

    @staticmethod
    def write_demo(path: Path) -> None:
        """Write the demo identities file, each identity with the hash of its demo token."""
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = [
            {**e, "token_sha256": token_hash(demo_token(e["user_id"]))} for e in DEMO_IDENTITIES["identities"]
        ]
        document = {"schema_version": SCHEMA_VERSION, "identities": entries}
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def token_hash(token: str) -> str:
    """SHA-256 hex of a secret token (tokens are long random strings, so no slow hash is needed)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def demo_token(user_id: str) -> str:
    """The well-known token of a demo identity. Demo only: real files hold hashes of random tokens."""
    return f"demo-token-{user_id}"


__all__ = ["DEMO_IDENTITIES", "Identities", "demo_token", "token_hash"]
