"""The store's secret and the keys derived from it, one per purpose.

Records that carry authority once stored (proposals, approval decisions, identities, the audit chain) and
the call records a thread keeps in checkpointed state are bound by an HMAC. Database write access
or a client's ``update_state`` can change the bytes, but without the secret nobody can make a
changed record verify. Each purpose has its own derived key, so a MAC made for one kind of record
never verifies as another.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Any, Literal

from toolgate.canonical import canonical_json
from toolgate.errors import ConfigurationError

MIN_SECRET_BYTES = 16
"""Shorter secrets are refused: a guessable key makes every MAC forgeable."""

Purpose = Literal[
    "audit-chain",
    "actor",
    "approval",
    "capture",
    "identity",
    "identity-token",
    "proposal",
    "release",
    "state",
    "wait",
]
"""What a derived key may sign; one key per kind of record."""


@dataclass(frozen=True)
class Keyring:
    """One configured secret and the purpose keys derived from it (HMAC-SHA256 with a label)."""

    secret: bytes = field(repr=False)
    """The configured secret (``TOOLGATE_AUDIT_KEY`` or the generated ``audit.key``)."""

    _derived: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Purpose keys already derived (a key is derived once, not once per MAC)."""

    def __post_init__(self) -> None:
        if not isinstance(self.secret, bytes) or len(self.secret) < MIN_SECRET_BYTES:
            raise ConfigurationError(
                f"the store needs a secret of at least {MIN_SECRET_BYTES} bytes "
                "(TOOLGATE_AUDIT_KEY, or the audit.key file in the data directory)"
            )

    def key(self, purpose: Purpose) -> bytes:
        """The key for ``purpose``."""
        found = self._derived.get(purpose)
        if found is None:
            found = hmac.digest(self.secret, b"toolgate/" + purpose.encode("ascii"), "sha256")
            self._derived[purpose] = found
        return found

    def mac(self, purpose: Purpose, value: Any) -> str:
        """Hex HMAC of the canonical JSON form of ``value`` under the key for ``purpose``."""
        return hmac.digest(self.key(purpose), canonical_json(value).encode("utf-8"), "sha256").hex()

    def mac_text(self, purpose: Purpose, text: str) -> str:
        """Hex HMAC of ``text`` (an encoding the caller makes deterministic) for ``purpose``."""
        return hmac.digest(self.key(purpose), text.encode("utf-8", "surrogatepass"), "sha256").hex()

    def verify(self, purpose: Purpose, value: Any, mac: str | None) -> bool:
        """True when ``mac`` is the MAC of ``value`` for ``purpose`` (constant-time compare)."""
        if not mac:
            return False
        try:
            expected = self.mac(purpose, value)
        except (TypeError, ValueError):
            return False
        return hmac.compare_digest(expected, mac)


__all__ = ["MIN_SECRET_BYTES", "Keyring", "Purpose"]
