"""Inbound rate limits per principal and tool, per tool, per tenant and global; outbound limits live in downstream clients.

Counters live in the store (fixed windows of the store's clock), so the limit holds across every
process and host sharing the database, whatever their own clocks say. A small limit (under
``SHARE_FRACTION * 2`` per window) is counted one hit at a time, one atomic upsert per call. A
larger one is leased: the process takes a share of the window's allowance at once
(`share_of`: a tenth of the limit, at most ``MAX_SHARE``), which the store counts when it grants
it and never past the limit, and spends it without a store round trip; so the shares of every
process together stay within the limit, and a call whose every window has a share left costs
no transaction (issue 31: the limiter was a write transaction of its own per call). A share is
spent only while its window lasts: the window's end is the store's, turned into this process's
monotonic clock from just before the grant was asked, so a share never outlives its window
whatever the process's wall clock says. What a process did not spend it gives back
(`InboundRateLimiter.give_back`, when the app closes); what it holds meanwhile (at most one
share per window and process) is the price: another process may be refused while this one
still holds part of the allowance. Outbound limits, a property of each downstream integration,
are token buckets held by that integration's client.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

from toolgate.policy.decisions import Rejection
from toolgate.policy.principal import Principal
from toolgate.policy.rules import RateLimit, RateLimits
from toolgate.store.base import Store
from toolgate.tools.spec import ToolRateLimit

SHARE_FRACTION = 10
"""A leased share is at most this fraction of its window's limit."""
MAX_SHARE = 100
"""And at most this many hits."""


def share_of(limit: int) -> int:
    """How many hits of a window with ``limit`` a process takes at once (1: every hit asks the store)."""
    return max(1, min(limit // SHARE_FRACTION, MAX_SHARE))


@dataclass
class _Share:
    """The unspent part of one window's share held by this process."""

    window_start: float
    """The window's start on the store's clock (epoch seconds)."""
    left: int
    until: float
    """This process's monotonic time by which the window has certainly not ended yet."""


@dataclass
class _Shares:
    """The shares a limiter holds, by (bucket, window_s); guarded by ``lock``, which is also held
    while shares are asked of the store (one refill at a time per limiter)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    held: dict[tuple[str, int], _Share] = field(default_factory=dict)

    def has(self, key: tuple[str, int], now: float) -> bool:
        share = self.held.get(key)
        return share is not None and share.left > 0 and now < share.until

    def spend(self, key: tuple[str, int]) -> None:
        self.held[key].left -= 1


Window = Literal["per_principal_tool", "tool", "per_tenant", "global"]


def bucket_of(window: Window, principal: Principal, tool: str) -> str:
    """The counter ``window`` counts ``principal``'s calls of ``tool`` in (what a test world fills
    to stand for a window all but used: `toolgate.evals.case_world`). The principal-tool bucket
    names its parts as a JSON list: joined with ":", tenant "acme:ada" with user "x" shared the
    bucket of tenant "acme" with user "ada:x" (ids may hold any character)."""
    if window == "per_principal_tool":
        return "pt:" + json.dumps([principal.tenant_id, principal.user_id, tool])
    if window == "tool":
        return f"tool:{tool}"
    if window == "per_tenant":
        return f"t:{principal.tenant_id}"
    return "g:"


@dataclass(frozen=True)
class InboundRateLimiter:
    """Counts one hit per accepted-so-far call and refuses past the limit."""

    store: Store
    limits: RateLimits
    _shares: _Shares = field(default_factory=_Shares, compare=False, repr=False)

    def _windows(
        self, principal: Principal, tool: str, per_tool: ToolRateLimit | None = None
    ) -> list[tuple[str, RateLimit]]:
        limits = self.limits
        windows: list[tuple[str, RateLimit | None]] = [
            (bucket_of("per_principal_tool", principal, tool), limits.per_principal_tool),
            # the tool's own limit (its spec's ``rate_limit``): every principal of every tenant
            (
                bucket_of("tool", principal, tool),
                RateLimit(limit=per_tool.limit, window_s=per_tool.window_s) if per_tool else None,
            ),
            (bucket_of("per_tenant", principal, tool), limits.per_tenant),
            (bucket_of("global", principal, tool), limits.global_),
        ]
        return [(bucket, limit) for bucket, limit in windows if limit is not None]

    def check(
        self, principal: Principal, tool: str, per_tool: ToolRateLimit | None = None
    ) -> Rejection | None:
        """Refuse with ``rate_limited`` when the principal-tool, the tool's own (``per_tool``),
        tenant or global window is full (all counted in one store transaction, in that order; a
        call refused by one window is not counted by the windows after it)."""
        windows = self._windows(principal, tool, per_tool)
        if not windows:
            return None
        keys = [(bucket, limit.window_s) for bucket, limit in windows]
        shares = self._shares
        with shares.lock:
            need = [i for i, key in enumerate(keys) if not shares.has(key, time.monotonic())]
            refused = self._refill(windows, need) if need else None
            for i, key in enumerate(keys):  # in order: a refused window stops the count
                if i == refused:
                    return _limited(windows[i][1])
                shares.spend(key)
        return None

    def _refill(self, windows: list[tuple[str, RateLimit]], need: list[int]) -> int | None:
        """Ask the store for a share of each window in ``need`` (one transaction); the index of
        the first window that had none left, else None. Called under the shares' lock."""
        asked_at = time.monotonic()  # before the store read its time: the share ends no later
        got = self.store.counters.take_shares(
            [
                (windows[i][0], windows[i][1].window_s, windows[i][1].limit, share_of(windows[i][1].limit))
                for i in need
            ]
        )
        for i, granted, end in zip(need, got.grants, got.window_ends, strict=False):
            if not granted:
                return i
            bucket, limit = windows[i]
            self._shares.held[(bucket, limit.window_s)] = _Share(
                window_start=end - limit.window_s, left=granted, until=asked_at + (end - got.store_time)
            )
        return None

    def give_back(self) -> None:
        """Return the unspent hits of every share whose window has not ended to the store (one
        transaction), so other processes may spend them; nothing held afterwards."""
        shares = self._shares
        with shares.lock:
            now = time.monotonic()
            returns = [
                (bucket, share.window_start, share.left)
                for (bucket, _), share in shares.held.items()
                if share.left > 0 and now < share.until
            ]
            shares.held.clear()
            self.store.counters.give_back(returns)

    def peek(
        self, principal: Principal, tool: str, per_tool: ToolRateLimit | None = None
    ) -> Rejection | None:
        """What `check` would answer, counting nothing (the shadow judge of a candidate release)."""
        for bucket, limit in self._windows(principal, tool, per_tool):
            if self.store.counters.value(bucket, limit.window_s) + 1 > limit.limit:
                return _limited(limit)
        return None


def _limited(limit: RateLimit) -> Rejection:
    return Rejection(
        code="rate_limited",
        message=f"Too many calls: at most {limit.limit} per {limit.window_s} s. Wait before trying again.",
        retryable=True,
        suggestion=f"retry after up to {limit.window_s} seconds",
    )


__all__ = [
    "MAX_SHARE",
    "SHARE_FRACTION",
    "InboundRateLimiter",
    "Window",
    "bucket_of",
    "share_of",
]
