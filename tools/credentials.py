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

`AsymmetricCredentialProvider` is the option for a downstream that must not hold a signing key:
tokens signed with an Ed25519 (``EdDSA``) or RSA (``RS256``) private key that only toolgate holds,
whose public keys it publishes as a JWKS (`AsymmetricCredentialProvider.jwks`). The downstream
verifies with `verify_service_token` and the JWKS alone: the key is chosen by the token's ``kid``
(the RFC 7638 thumbprint of the public key) and the algorithm by the published key, never by the
token's header, so neither ``alg: none`` nor an HS256 token keyed with the public key passes.
Rotation adds a new signing key and keeps the old public key published until its tokens expire.
Both providers issue the same claims (`token_claims`).
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
from pathlib import Path
from typing import Any, Literal, Protocol

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa

from toolgate.errors import ConfigurationError, ToolExecutionError

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


def token_claims(tool: str, scope: ServiceScope, now: datetime, ttl: timedelta) -> dict[str, Any]:
    """The claims of a service credential for ``tool`` (``iss``, ``sub``, ``aud``, ``scope``, the
    ``tenant`` it is bound to, ``iat``, ``exp``, ``jti``), whichever provider signs them."""
    return {
        "iss": "toolgate",
        "sub": f"tool:{tool}",
        "aud": scope.audience,
        "scope": " ".join(sorted(scope.scopes)),
        **({"tenant": scope.tenant} if scope.tenant is not None else {}),
        "iat": int(now.timestamp()),
        "exp": int((now + ttl).timestamp()),
        "jti": secrets.token_hex(12),
    }


def _signing_input(header: dict[str, Any], claims: dict[str, Any]) -> str:
    return ".".join(_b64(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims))


def _credential(
    scope: ServiceScope, kid: str, now: datetime, claims: dict[str, Any], token: str
) -> ServiceCredential:
    return ServiceCredential(
        audience=scope.audience,
        scopes=scope.scopes,
        key_id=kid,
        issued_at=now.replace(microsecond=0),
        expires_at=datetime.fromtimestamp(int(claims["exp"]), UTC),
        token=token,
    )


def _check_claims(claims: dict[str, Any], audience: str, tenant: str | None, now: datetime) -> None:
    """What every downstream checks beyond the signature: audience, expiry and tenant."""
    if claims.get("aud") != audience or int(claims.get("exp", 0)) <= now.timestamp():
        raise ToolExecutionError("credential_refused", "service credential expired or for another audience")
    if tenant is not None and claims.get("tenant") != tenant:
        raise ToolExecutionError("credential_refused", "service credential bound to another tenant")


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
        claims = token_claims(tool, scope, now, self.ttl)
        signing = _signing_input({"alg": "HS256", "typ": "JWT", "kid": kid}, claims)
        signature = hmac.digest(self._key(kid), signing.encode("ascii"), hashlib.sha256)
        return _credential(scope, kid, now, claims, f"{signing}.{_b64(signature)}")

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
        _check_claims(claims, audience, tenant, now)
        return dict(claims)


SigningKey = ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey
"""A private key toolgate signs asymmetric service credentials with."""
Algorithm = Literal["EdDSA", "RS256"]
MIN_RSA_BITS = 2048


def _int_b64(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


def public_jwk(key: ed25519.Ed25519PublicKey | rsa.RSAPublicKey) -> dict[str, str]:
    """The public JWK of ``key`` with ``kid`` (its RFC 7638 thumbprint), ``alg`` and ``use``."""
    if isinstance(key, ed25519.Ed25519PublicKey):
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        members = {"crv": "Ed25519", "kty": "OKP", "x": _b64(raw)}
        alg = "EdDSA"
    else:
        numbers = key.public_numbers()
        members = {"e": _int_b64(numbers.e), "kty": "RSA", "n": _int_b64(numbers.n)}
        alg = "RS256"
    thumbprint = hashlib.sha256(json.dumps(members, separators=(",", ":"), sort_keys=True).encode()).digest()
    return {**members, "kid": _b64(thumbprint), "alg": alg, "use": "sig"}


def load_signing_key(pem: bytes) -> SigningKey:
    """An Ed25519 or RSA (at least 2048-bit) private key from PKCS#8 or traditional PEM, unencrypted;
    `ValueError` for anything else (the key itself is never shown)."""
    key = serialization.load_pem_private_key(pem, password=None)
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size < MIN_RSA_BITS:
        raise ValueError(f"an RSA signing key needs at least {MIN_RSA_BITS} bits")
    if not isinstance(key, ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey):
        raise ValueError("a service-credential signing key must be Ed25519 or RSA")
    return key


def signing_key_file(path: Path) -> SigningKey:
    """`load_signing_key` of the PEM file at ``path`` (``TOOLGATE_SERVICE_SIGNING_KEY_FILE``);
    `ConfigurationError` naming the file, never the key, when it cannot serve."""
    try:
        return load_signing_key(path.expanduser().read_bytes())
    except (OSError, ValueError, TypeError, UnsupportedAlgorithm) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc).splitlines()[0][:120]
        raise ConfigurationError(
            f"TOOLGATE_SERVICE_SIGNING_KEY_FILE {path}: not a usable signing key ({reason})"
        ) from None


class AsymmetricCredentialProvider:
    """Service credentials signed with a private key (Ed25519 or RSA) toolgate alone holds; the
    downstream verifies them against the published public keys (`jwks`, `verify_service_token`)."""

    def __init__(
        self,
        key: SigningKey,
        *,
        ttl_s: float = 300.0,
        refresh_s: float = 60.0,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if ttl_s <= refresh_s or refresh_s < 0:
            raise ValueError("a service credential needs ttl_s > refresh_s >= 0")
        self.ttl = timedelta(seconds=ttl_s)
        self.refresh = timedelta(seconds=refresh_s)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._keys: list[tuple[SigningKey, dict[str, str], datetime | None]] = [
            (key, public_jwk(key.public_key()), None)
        ]
        self._cache: dict[tuple[str, ServiceScope], ServiceCredential] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AsymmetricCredentialProvider(key_id={self.key_id()!r}, alg={self._keys[0][1]['alg']!r})"

    def key_id(self) -> str:
        """The ``kid`` new credentials are signed under (the current key's thumbprint)."""
        return self._keys[0][1]["kid"]

    def rotate(self, key: SigningKey) -> str:
        """Sign with ``key`` from now on; the previous public key stays in `jwks` until every token
        it signed has expired (``ttl_s`` from now). Cached credentials are reissued. The new kid."""
        now = self._clock()
        with self._lock:
            current, jwk, _ = self._keys[0]
            self._keys[0] = (current, jwk, now + self.ttl)
            self._keys.insert(0, (key, public_jwk(key.public_key()), None))
            self._cache.clear()
        return self.key_id()

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        """The public keys a downstream verifies with (``{"keys": [...]}``, current first); a
        retired key is dropped once its last token has expired. No private material."""
        now = self._clock()
        with self._lock:
            self._keys = [k for k in self._keys if k[2] is None or k[2] > now]
            return {"keys": [dict(jwk) for _, jwk, _ in self._keys]}

    def credential_for(self, tool: str, scope: ServiceScope) -> ServiceCredential:
        now = self._clock()
        with self._lock:
            cached = self._cache.get((tool, scope))
            if cached is not None and cached.expires_at - self.refresh > now:
                return cached
            key, jwk, _ = self._keys[0]
            claims = token_claims(tool, scope, now, self.ttl)
            signing = _signing_input({"alg": jwk["alg"], "typ": "JWT", "kid": jwk["kid"]}, claims)
            if isinstance(key, ed25519.Ed25519PrivateKey):
                signature = key.sign(signing.encode("ascii"))
            else:
                signature = key.sign(signing.encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
            fresh = _credential(scope, jwk["kid"], now, claims, f"{signing}.{_b64(signature)}")
            self._cache[(tool, scope)] = fresh
            return fresh


def _public_key(jwk: dict[str, Any]) -> tuple[Algorithm, ed25519.Ed25519PublicKey | rsa.RSAPublicKey]:
    if jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519":
        return "EdDSA", ed25519.Ed25519PublicKey.from_public_bytes(_unb64(str(jwk["x"])))
    if jwk.get("kty") == "RSA":
        numbers = rsa.RSAPublicNumbers(
            int.from_bytes(_unb64(str(jwk["e"])), "big"), int.from_bytes(_unb64(str(jwk["n"])), "big")
        )
        return "RS256", numbers.public_key()
    raise ValueError("unsupported key")


def verify_service_token(
    token: str,
    jwks: dict[str, Any],
    audience: str,
    *,
    tenant: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """What a downstream holding only toolgate's public keys checks: the claims of ``token`` when
    its signature verifies under the JWKS key its ``kid`` names, with that key's own algorithm, and
    it is for ``audience`` (and ``tenant``), unexpired; `ToolExecutionError` (``credential_refused``)
    otherwise: tampered, unknown key, another algorithm in the header, expired, other audience."""
    try:
        head, body, signature = token.split(".")
        header = json.loads(_unb64(head))
        claims = json.loads(_unb64(body))
        kid = str(header["kid"])
        if not isinstance(claims, dict):
            raise TypeError("claims")
        jwk = next(k for k in jwks.get("keys", []) if isinstance(k, dict) and k.get("kid") == kid)
        alg, key = _public_key(jwk)
        raw = _unb64(signature)
    except (ValueError, KeyError, TypeError, StopIteration):
        raise ToolExecutionError(
            "credential_refused", "malformed service credential or unknown key"
        ) from None
    if header.get("alg") != alg:
        raise ToolExecutionError("credential_refused", "service credential algorithm refused")
    data = f"{head}.{body}".encode("ascii")
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(raw, data)
        else:
            key.verify(raw, data, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        raise ToolExecutionError("credential_refused", "service credential signature refused") from None
    _check_claims(claims, audience, tenant, now or datetime.now(UTC))
    return dict(claims)


__all__ = [
    "AsymmetricCredentialProvider",
    "CredentialProvider",
    "HmacCredentialProvider",
    "ServiceCredential",
    "ServiceScope",
    "SigningKey",
    "load_signing_key",
    "public_jwk",
    "signing_key_file",
    "token_claims",
    "verify_service_token",
]
