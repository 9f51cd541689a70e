"""The store's secret and the keys derived from it, one per purpose.

Records that carry authority once stored (proposals, approval decisions, identities, the audit chain) and
the call records a thread keeps in checkpointed state are bound by an HMAC. Database write access
or a client's ``update_state`` can change the bytes, but without the secret nobody can make a
changed record verify. Each purpose has its own derived key, so a MAC made for one kind of record
never verifies as another.

A MAC is computed from the key's prepared HMAC state (`hmac_sha256`): under half the cost of a
one-shot `hmac.digest` for a short message, which on OpenSSL 3 sets the digest up again and
releases the GIL on every call (under load a released GIL can be a thread switch; a node computes
dozens of MACs).

A row read from the store is judged once per exact content (`Keyring.verify_row`): a reviewer's
listing and every approval node read the same proposals again, and the same bytes under the same
MAC and key get the same answer.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
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


class VerifiedRows:
    """What `Keyring.verify_row` answered for the rows it judged lately, by purpose, row as stored
    and MAC (bounded: the least recently used are forgotten first; shared by threads)."""

    SIZE = 4096

    def __init__(self) -> None:
        self._items: OrderedDict[Hashable, bool] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> bool | None:
        """The answer for ``key``, or None when it is not remembered."""
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: Hashable, verified: bool) -> None:
        """Remember ``verified`` for ``key``."""
        with self._lock:
            self._items[key] = verified
            self._items.move_to_end(key)
            while len(self._items) > self.SIZE:
                self._items.popitem(last=False)


@dataclass(frozen=True)
class Keyring:
    """One configured secret and the purpose keys derived from it (HMAC-SHA256 with a label)."""

    secret: bytes = field(repr=False)
    """The configured secret (``TOOLGATE_AUDIT_KEY`` or the generated ``audit.key``)."""

    _derived: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Purpose keys already derived (a key is derived once, not once per MAC)."""

    _rows: VerifiedRows = field(default_factory=VerifiedRows, init=False, repr=False, compare=False)
    """Stored rows whose MAC this keyring judged lately (`verify_row`)."""

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
        return hmac_sha256(self.key(purpose), canonical_json(value).encode("utf-8")).hex()

    def mac_text(self, purpose: Purpose, text: str) -> str:
        """Hex HMAC of ``text`` (an encoding the caller makes deterministic) for ``purpose``."""
        return hmac_sha256(self.key(purpose), text.encode("utf-8", "surrogatepass")).hex()

    def verify(self, purpose: Purpose, value: Any, mac: str | None) -> bool:
        """True when ``mac`` is the MAC of ``value`` for ``purpose`` (constant-time compare)."""
        if not mac:
            return False
        try:
            expected = self.mac(purpose, value)
        except (TypeError, ValueError):
            return False
        return hmac.compare_digest(expected, mac)

    def verify_row(
        self, purpose: Purpose, stored: Hashable, mac: str | None, value: Callable[[], Any]
    ) -> bool:
        """`verify` of ``value()`` for a row read from the store, judged once per row as stored:
        ``stored`` is everything the row holds but its MAC (as read, before decoding), from which
        ``value`` makes what the MAC covers. A reviewer's listing reads the same proposals again
        and again; the same bytes under the same MAC and key get the same answer, so it is
        remembered (`VerifiedRows`) instead of encoding and MACing the row again. A row changed
        in any byte, or under another MAC, is judged afresh."""
        try:
            seen = self._rows.get((purpose, stored, mac))
        except TypeError:  # a column the driver gave as an unhashable value: judged every time
            return self.verify(purpose, value(), mac)
        if seen is None:
            seen = self.verify(purpose, value(), mac)
            self._rows.put((purpose, stored, mac), seen)
        return seen


_BLOCK = 64
"""SHA-256's block size in bytes: the HMAC key pads (RFC 2104) are one block."""


class _PreparedKey:
    """HMAC-SHA256 under one key with the key's two padded blocks already hashed (RFC 2104:
    ``H((K ^ opad) || H((K ^ ipad) || message))``, the construction `hmac` uses), so a MAC costs
    two hash-state copies and the message. Computed with `hashlib`, which keeps the GIL for
    messages under 2 kB; the states are only ever copied, never updated, so threads may share them."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > _BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    def digest(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


@functools.lru_cache(maxsize=64)
def _prepared(key: bytes) -> _PreparedKey:
    """``key`` prepared (the last 64 keys used: a process uses a handful, its tests one per store)."""
    return _PreparedKey(key)


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """HMAC-SHA256 of ``message`` under ``key`` (equal to ``hmac.digest(key, message, "sha256")``)."""
    return _prepared(key).digest(message)


__all__ = ["MIN_SECRET_BYTES", "Keyring", "Purpose", "VerifiedRows", "hmac_sha256"]
