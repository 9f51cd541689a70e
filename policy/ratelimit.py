"""Inbound rate limits per principal and tool, per tool, per tenant and global; outbound limits live in downstream clients.

Counters live in the store (fixed windows of the store's clock, one atomic upsert per hit), so
the limit holds across every process and host sharing the database, whatever their own clocks
say. Outbound limits, a property of each downstream integration, are token buckets held by that
integration's client.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolgate.policy.decisions import Rejection
from toolgate.policy.principal import Principal
from toolgate.policy.rules import RateLimit, RateLimits
from toolgate.store.base import Store
from toolgate.tools.spec import ToolRateLimit


@dataclass(frozen=True)
class InboundRateLimiter:
    """Counts one hit per accepted-so-far call and refuses past the limit."""

    store: Store
    limits: RateLimits

    def _windows(
        self, principal: Principal, tool: str, per_tool: ToolRateLimit | None = None
    ) -> list[tuple[str, RateLimit]]:
        limits = self.limits
        windows: list[tuple[str, RateLimit | None]] = [
            (f"pt:{principal.tenant_id}:{principal.user_id}:{tool}", limits.per_principal_tool),
            # the tool's own limit (its spec's ``rate_limit``): every principal of every tenant
            (
                f"tool:{tool}",
                RateLimit(limit=per_tool.limit, window_s=per_tool.window_s) if per_tool else None,
            ),
            (f"t:{principal.tenant_id}", limits.per_tenant),
            ("g:", limits.global_),
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
        full = self.store.counters.count_hits([(bucket, limit.window_s, limit.limit) for bucket, limit in windows])
        return None if full is None else _limited(windows[full][1])

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


__all__ = ["InboundRateLimiter"]
