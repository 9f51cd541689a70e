"""Service credentials: short-lived, narrowly scoped, one per tool, rotated and refreshed.

A tool that calls an internal service for itself (not for the user, whose own forwarded token it
uses instead, see `toolgate.tools.spec.ToolSpec.forwarded_credentials`) declares a `ServiceScope`:
the downstream it talks to (the audience) and the scopes it needs there. Trusted code asks a
`CredentialProvider` for a `ServiceCredential` per call and hands it in the handler's context, so
no tool holds a standing key and no credential is shared between tools.

`HmacCredentialProvider` is the built-in one: HS256 JWTs (``aud``, ``scope``, ``iat``, ``exp``,
``jti``, header ``kid``) signed with a key derived from the store's secret and the key id. Keys
rotate on a schedule (every ``rotation_s``, the same key id in every process sharing the secret)
or on demand (`HmacCredentialProvider.rotate`); a token signed under an older key stays valid
until its own expiry, never longer. A cached credential is refreshed once it is within
``refresh_s`` of expiry. The token never appears in a repr, log line or error message.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from toolgate.errors import ToolExecutionError

AUDIENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
"""What an audience or scope may be: a plain service name (never a secret, never free text)."""


@dataclass(frozen=True)
class ServiceScope:
    """What a tool's service credential may do: one downstream (``audience``) and its scopes."""

    audience: str
    """The downstream service the credential is for (it refuses a credential for anyone else)."""
    scopes: frozenset[str] = frozenset()
    """The narrowest scopes the tool needs there (e.g. ``inventory:read``)."""
    tenant: str | None = None
    """The tenant the credential is bound to (a tenant's own implementation of a tool,
    `toolgate.tools.tenant_overrides`): signed in as the ``tenant`` claim, so the downstream can
    refuse it for any other tenant, and never cached for another. Set by trusted code only."""

    def problems(self) -> list[str]:
        """Why this scope is malformed (empty when fine)."""
        names = (self.audience, *sorted(self.scopes), *([self.tenant] if self.tenant is not None else []))
        bad = [name for name in names if not AUDIENCE.match(name)]
        return [f"service credential audience or scope is malformed: {name!r}" for name in bad]


@dataclass(frozen=True)
class ServiceCredential:
    """One short-lived credential for one tool and downstream (the token is never shown)."""

    audience: str
    scopes: frozenset[str]
    key_id: str
    """Id of the signing key (changes with every rotation)."""
    issued_at: datetime
    expires_at: datetime
    token: str = field(repr=False)

    def authorization(self) -> str:
        """The ``Authorization`` header value."""
        return f"Bearer {self.token}"


class CredentialProvider(Protocol):
    """Gives a tool a short-lived service credential scoped to its declared `ServiceScope`."""

    def credential_for(self, tool: str, scope: ServiceScope) -> ServiceCredential:
        """A valid credential for ``tool`` (a cached one until it nears expiry, then a fresh one)."""
        ...


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class HmacCredentialProvider:
    """Built-in provider: HS256 tokens under keys derived from the store's secret per key id."""

    def __init__(
        self,
        secret: bytes,
        *,
        ttl_s: float = 300.0,
        refresh_s: float = 60.0,
        rotation_s: float = 86400.0,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if ttl_s <= refresh_s or refresh_s < 0 or rotation_s <= 0:
            raise ValueError("a service credential needs ttl_s > refresh_s >= 0 and rotation_s > 0")
        self._root = hmac.digest(secret, b"toolgate/service-credential", "sha256")
        self.ttl = timedelta(seconds=ttl_s)
        self.refresh = timedelta(seconds=refresh_s)
        self.rotation_s = rotation_s
        self._clock = clock or (lambda: datetime.now(UTC))
        self._extra = 0
        self._cache: dict[tuple[str, ServiceScope], ServiceCredential] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"HmacCredentialProvider(key_id={self.key_id()!r})"

    def _generation(self, now: datetime) -> int:
        return int(now.timestamp() // self.rotation_s) + self._extra

    def key_id(self, now: datetime | None = None) -> str:
        """The id of the key new credentials are signed with."""
        return f"sc{self._generation(now or self._clock())}"

    def _key(self, key_id: str) -> bytes:
        return hmac.digest(self._root, key_id.encode("ascii"), "sha256")

    def rotate(self) -> str:
        """Sign with a new key from now on (cached credentials are reissued); the new key id."""
        with self._lock:
            self._extra += 1
            self._cache.clear()
        return self.key_id()

    def credential_for(self, tool: str, scope: ServiceScope) -> ServiceCredential:
        now = self._clock()
        with self._lock:
            cached = self._cache.get((tool, scope))
            if cached is not None and cached.expires_at - self.refresh > now:
                return cached
            fresh = self._issue(tool, scope, now)
            self._cache[(tool, scope)] = fresh
            return fresh

    def _issue(self, tool: str, scope: ServiceScope, now: datetime) -> ServiceCredential:
        kid = self.key_id(now)
        expires = now + self.ttl
        exp = int(expires.timestamp())
        header = {"alg": "HS256", "typ": "JWT", "kid": kid}
        claims = {
            "iss": "toolgate",
            "sub": f"tool:{tool}",
            "aud": scope.audience,
            "scope": " ".join(sorted(scope.scopes)),
            **({"tenant": scope.tenant} if scope.tenant is not None else {}),
            "iat": int(now.timestamp()),
            "exp": exp,
            "jti": secrets.token_hex(12),
        }
        signing = ".".join(
            _b64(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
        )
        signature = hmac.digest(self._key(kid), signing.encode("ascii"), hashlib.sha256)
        return ServiceCredential(
            audience=scope.audience,
            scopes=scope.scopes,
            key_id=kid,
            issued_at=now.replace(microsecond=0),
            expires_at=datetime.fromtimestamp(exp, UTC),
            token=f"{signing}.{_b64(signature)}",
        )

    def verify(self, token: str, audience: str, tenant: str | None = None) -> dict[str, Any]:
        """The claims of a valid token for ``audience`` (and, when given, bound to ``tenant``);
        `ToolExecutionError` (``credential_refused``) for a forged, expired, future-keyed, other
        audience's or other tenant's token (what a downstream checks)."""
        try:
            head, body, signature = token.split(".")
            header = json.loads(_unb64(head))
            claims = json.loads(_unb64(body))
            kid = str(header["kid"])
            generation = int(kid.removeprefix("sc"))
        except (ValueError, KeyError, TypeError):
            raise ToolExecutionError("credential_refused", "malformed service credential") from None
        now = self._clock()
        expected = hmac.digest(self._key(kid), f"{head}.{body}".encode("ascii"), hashlib.sha256)
        if not hmac.compare_digest(expected, _unb64(signature)) or generation > self._generation(now):
            raise ToolExecutionError("credential_refused", "service credential signature refused")
        if claims.get("aud") != audience or int(claims.get("exp", 0)) <= now.timestamp():
            raise ToolExecutionError(
                "credential_refused", "service credential expired or for another audience"
            )
        if tenant is not None and claims.get("tenant") != tenant:
            raise ToolExecutionError("credential_refused", "service credential bound to another tenant")
        return dict(claims)


__all__ = ["CredentialProvider", "HmacCredentialProvider", "ServiceCredential", "ServiceScope"]
