"""Failed sign-ins: throttled per source and per claimed identity, audited as counted events.

Why: every door that checks a token is a guessing oracle, and a door that appends one audit row
per failure lets anyone who reaches its port grow the audit table at will. So:

* Failures count in the store's rate counters (fixed windows of the store's clock, one atomic
  upsert per bucket), shared by every process on the store: one bucket per source (the client's
  address at a network door) and one per claimed identity (a user id the caller named, as on the
  CLI). Bucket names hold a hash, never the attacker's raw string.
* Once a source or an identity has `SignInLimits.per_source` / ``per_identity`` failures in the
  window, its further attempts are refused ``sign_in_throttled`` *before* any token is checked
  (a correct token too: otherwise the guess that hits is accepted) until the window ends. Each
  throttled attempt still counts.
* Audit rows are counted, not one per failure: each failure up to a key's limit writes its row
  (an ordinary mistyped token is audited as before), then only every tenfold of the limit (10x,
  100x...), each with the running count (``detail.failures``) and the window. Rows per key per
  window grow with the logarithm of the attempts past the limit. Many sources at once (a
  botnet, or one host rotating IPv6 addresses, which count per /64 network) write per-source
  rows only until every source together has failed `SignInLimits.detailed_rows` times in the
  window; after that a row only at each tenfold of that total. The total never throttles
  anyone: one guesser must not lock everybody out.

A successful sign-in pays nothing here unless its source or identity failed in this process
(`_suspects`): only then is the store's count read, and a key whose window the store shows empty
is forgotten. No process clock decides anything (a skewed one cannot end a throttle early). A
source another process saw failing is caught at its first failure here. Behind a proxy every client shares the proxy's
address: a guesser there throttles everyone behind it for one window, the price of stopping it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from toolgate.errors import IdentityError
from toolgate.settings import setting
from toolgate.store.audit import Auditor
from toolgate.store.base import Store

Scope = Literal["source", "identity"]


@dataclass(frozen=True)
class SignInLimits:
    """How many failures a source or an identity may have in one window before it is throttled."""

    per_source: int = 30
    per_identity: int = 10
    window_s: int = 60
    detailed_rows: int = 100
    """Failures (of every source together) per window that may each write their own row."""

    @classmethod
    def from_settings(cls) -> SignInLimits:
        """The limits the ``TOOLGATE_SIGN_IN_*`` settings give now."""
        return cls(
            per_source=setting("sign_in_failures_per_source"),
            per_identity=setting("sign_in_failures_per_person"),
            window_s=setting("sign_in_window_s"),
        )


DEFAULT_LIMITS = SignInLimits()

MAX_SUSPECTS = 65_536
"""Buckets remembered per process; the oldest is forgotten first (its next failure marks it again,
and it is throttled only after failing again anyway)."""

_suspects: OrderedDict[str, None] = OrderedDict()
"""Buckets that failed in this process and whose window the store has not yet shown empty."""
_suspects_lock = threading.Lock()


def _suspect(bucket: str) -> None:
    with _suspects_lock:
        _suspects[bucket] = None
        _suspects.move_to_end(bucket)
        while len(_suspects) > MAX_SUSPECTS:
            _suspects.popitem(last=False)


BUCKET_PREFIX = "signin:"
"""Every bucket of this module starts so (`Counters.forget_ended`)."""
ALL_SOURCES = "signin:all"
"""The bucket of every failed sign-in of the store (bounds the rows, throttles nobody)."""


def _bucket(scope: Scope, value: str) -> str:
    if scope == "source":
        value = source_group(value)
    return f"signin:{scope}:{hashlib.sha256(value.encode('utf-8', 'replace')).hexdigest()[:32]}"


def source_group(source: str) -> str:
    """What counts as one source: an IPv4 address, or an IPv6 address's /64 network (one host
    gets a whole /64 and picks addresses from it at will); anything else as given."""
    try:
        address = ipaddress.ip_address(source)
    except ValueError:
        return source
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{address}/64", strict=False))
    return str(address)


def _counted(failures: int, limit: int) -> bool:
    """True for the counts that write a row: up to the limit, then every tenfold of the limit."""
    if failures <= limit:
        return True
    if failures % limit:
        return False
    multiple = failures // limit
    while multiple % 10 == 0:
        multiple //= 10
    return multiple == 1


class SignInThrottled(IdentityError):
    """Too many failed sign-ins from this source or for this identity in the current window."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message, code="sign_in_throttled")
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class SignInThrottle:
    """The throttle of one store's doors (stateless here: the counts live in the store)."""

    store: Store
    auditor: Auditor | None
    limits: SignInLimits = DEFAULT_LIMITS

    def _keys(self, source: str | None, identity: str | None) -> list[tuple[Scope, str, int]]:
        keys: list[tuple[Scope, str, int]] = []
        if source:
            keys.append(("source", _bucket("source", source), self.limits.per_source))
        if identity:
            keys.append(("identity", _bucket("identity", identity), self.limits.per_identity))
        return keys

    def _active(self) -> bool:
        return not self.store.read_only

    def check(self, *, source: str | None, identity: str | None) -> None:
        """Refuse (`SignInThrottled`, counted) when ``source`` or ``identity`` is over its limit."""
        if not self._active():
            return
        keys = self._keys(source, identity)
        with _suspects_lock:
            suspect = [k for k in keys if k[1] in _suspects]
        for scope, bucket, limit in suspect:
            failures = self.store.counters.value(bucket, self.limits.window_s)
            if failures == 0:  # a new window on the store's clock: nothing to hold against it
                with _suspects_lock:
                    _suspects.pop(bucket, None)
            elif failures >= limit:
                failures = self.store.counters.increment(bucket, self.limits.window_s)
                if _counted(failures, limit):
                    self._audit(None, "sign_in_throttled", {scope: failures}, source=source, claimed=identity)
                raise SignInThrottled(
                    f"too many failed sign-ins from this {scope}; try again in up to "
                    f"{self.limits.window_s} s",
                    retry_after_s=self.limits.window_s,
                )

    def failed(self, code: str, *, source: str | None, identity: str | None, user_id: str | None) -> None:
        """Count one failed sign-in (``code``) for ``source`` and the claimed ``identity``; audit it
        (as ``user_id``, the person the token proved, or None; the claimed identity as
        ``detail.claimed``) when the count is one that writes a row."""
        if not self._active():
            return
        keys = self._keys(source, identity)
        if not keys:  # nothing to count by (a local bearer token): every failure is its own row
            self._audit(user_id, code, {}, source=source, claimed=identity)
            return
        window = self.limits.window_s
        counts: dict[str, int] = {}
        counted = False
        for scope, bucket, limit in keys:
            counts[scope] = failures = self.store.counters.increment(bucket, window)
            counted = counted or _counted(failures, limit)
            _suspect(bucket)
        everyone = self.store.counters.increment(ALL_SOURCES, window)
        if everyone == 1:  # the window's first failure: the ended windows' counts go (bounded table)
            self.store.counters.forget_ended(BUCKET_PREFIX, window)
        detailed = self.limits.detailed_rows
        if (counted and everyone <= detailed) or (everyone > detailed and _counted(everyone, detailed)):
            self._audit(user_id, code, {**counts, "all": everyone}, source=source, claimed=identity)

    def _audit(
        self,
        user_id: str | None,
        code: str,
        counts: dict[str, int],
        *,
        source: str | None,
        claimed: str | None = None,
    ) -> None:
        """One ``identity.refused`` row: ``user_id`` its actor (only a person a token proved),
        ``claimed`` the user id the caller named (anyone may name anyone), as a keyed hash."""
        if self.auditor is None:
            return
        detail: dict[str, object] = {"window_s": self.limits.window_s}
        if counts:
            detail["failures"] = counts
        if source:
            detail["source"] = source[:64]
        if claimed:
            detail["claimed"] = self.auditor.actor(claimed)
        self.auditor.record("identity.refused", "refused", user_id=user_id or "", code=code, detail=detail)


def forget_suspects() -> None:
    """Forget this process's suspects (tests that share a process between stores)."""
    with _suspects_lock:
        _suspects.clear()


__all__ = [
    "ALL_SOURCES",
    "BUCKET_PREFIX",
    "DEFAULT_LIMITS",
    "SignInLimits",
    "SignInThrottle",
    "SignInThrottled",
    "forget_suspects",
    "source_group",
]
