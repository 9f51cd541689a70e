"""The registry's operating fields of a tool: cost estimate, per-tool rate limit, deprecation.

Each is optional on `toolgate.tools.spec.ToolSpec`; when given, it must be complete and well
formed, or the tool does not load (`field_problems`, run with the other stop conditions):

* `CostEstimate`: what one call costs, as an amount of a unit (``0.002 usd``, ``1 credits``,
  ``30 cpu_s``). Shown in the manifest and the registry audit's inventory line; nothing is charged.
* `ToolRateLimit`: at most ``limit`` calls per ``window_s`` seconds of this tool, whoever makes
  them (the downstream's own capacity). Enforced by the store-backed inbound limiter as a window
  of its own keyed by the tool's name (``tool:<name>``), refused ``rate_limited``, across every
  process sharing the store.
* `Deprecation`: from ``since`` the tool is deprecated and stays callable for ``window``; the model
  is told so at the head of the tool's description (``DEPRECATED until <sunset_at>``, plus the
  replacement when one is named), and every accepted call's ``call.accepted`` audit event carries
  ``deprecated_tool``. From ``sunset_at`` (``since + window``) every call is refused
  ``tool_deprecated`` before its arguments are looked at. Times are the store's clock, never the
  process's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolgate.tools.spec import ToolSpec

COST_UNIT = re.compile(r"^[a-z][a-z0-9_]{0,15}$")
"""A cost unit: a short lower-case word (``usd``, ``eur``, ``credits``, ``cpu_s``)."""
MAX_WINDOW_S = 86_400
"""The longest per-tool rate window (one day)."""


@dataclass(frozen=True)
class CostEstimate:
    """The estimated cost of one call: ``amount`` of ``unit``."""

    amount: float
    unit: str

    def text(self) -> str:
        """``0.002usd/call``: the form the inventory line and the manifest show."""
        return f"{self.amount:g}{self.unit}/call"


@dataclass(frozen=True)
class ToolRateLimit:
    """At most ``limit`` calls of the tool per ``window_s`` seconds, all principals together."""

    limit: int
    window_s: int

    def text(self) -> str:
        """``30/60s``."""
        return f"{self.limit}/{self.window_s}s"


@dataclass(frozen=True)
class Deprecation:
    """Deprecated from ``since``; callable until ``since + window`` (`sunset_at`), refused after."""

    since: datetime
    window: timedelta
    replacement: str | None = None
    """The tool to use instead, named in what the model is told and in the refusal."""

    @property
    def sunset_at(self) -> datetime:
        """The first instant a call is refused ``tool_deprecated``."""
        return self.since + self.window

    def state(self, now: datetime) -> str:
        """``active`` before ``since``, ``deprecated`` during the window, ``retired`` from `sunset_at`."""
        if now < self.since:
            return "active"
        return "deprecated" if now < self.sunset_at else "retired"

    def notice(self) -> str:
        """What the model is told at the head of the tool's description."""
        instead = f"; use {self.replacement} instead" if self.replacement else ""
        return f"DEPRECATED until {self.sunset_at.isoformat()}{instead}."

    def to_mapping(self) -> dict[str, Any]:
        """The manifest and audit form."""
        return {
            "since": self.since.isoformat(),
            "window_s": int(self.window.total_seconds()),
            "sunset_at": self.sunset_at.isoformat(),
            "replacement": self.replacement,
        }


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def field_problems(spec: ToolSpec) -> list[tuple[Any, str]]:
    """Stop conditions of the three fields (codes ``invalid_cost_estimate``,
    ``invalid_rate_limit``, ``invalid_deprecation``)."""
    problems: list[tuple[Any, str]] = []
    cost = spec.cost_estimate
    if cost is not None:
        if not isinstance(cost, CostEstimate):
            problems.append(("invalid_cost_estimate", "cost_estimate must be a CostEstimate(amount, unit)"))
        elif not _number(cost.amount) or not math.isfinite(cost.amount) or cost.amount < 0:
            problems.append(("invalid_cost_estimate", "cost_estimate.amount must be a finite number >= 0"))
        elif not isinstance(cost.unit, str) or not COST_UNIT.match(cost.unit):
            problems.append(("invalid_cost_estimate", "cost_estimate.unit must match [a-z][a-z0-9_]{0,15}"))
    limit = spec.rate_limit
    if limit is not None:
        if not isinstance(limit, ToolRateLimit):
            problems.append(("invalid_rate_limit", "rate_limit must be a ToolRateLimit(limit, window_s)"))
        elif not _count(limit.limit) or limit.limit < 1:
            problems.append(("invalid_rate_limit", "rate_limit.limit must be an integer >= 1"))
        elif not _count(limit.window_s) or not 1 <= limit.window_s <= MAX_WINDOW_S:
            problems.append(
                ("invalid_rate_limit", f"rate_limit.window_s must be an integer 1..{MAX_WINDOW_S}")
            )
    problems.extend(_deprecation_problems(spec))
    return problems


def _deprecation_problems(spec: ToolSpec) -> list[tuple[Any, str]]:
    found = spec.deprecation
    if found is None:
        return []
    if not isinstance(found, Deprecation):
        return [("invalid_deprecation", "deprecation must be a Deprecation(since, window)")]
    if not isinstance(found.since, datetime) or found.since.utcoffset() is None:
        return [("invalid_deprecation", "deprecation.since must be a timezone-aware datetime")]
    if not isinstance(found.window, timedelta) or found.window <= timedelta(0):
        return [("invalid_deprecation", "deprecation.window must be a positive timedelta")]
    if found.replacement is not None and (
        not isinstance(found.replacement, str)
        or not found.replacement.strip()
        or found.replacement == spec.name
    ):
        return [("invalid_deprecation", "deprecation.replacement must name another tool")]
    return []


def is_retired(spec: ToolSpec, now: datetime) -> bool:
    """Whether ``spec``'s deprecation window has ended at ``now`` (the store's clock): it is then
    neither offered to the model nor suggested, and every call of it is refused."""
    return spec.deprecation is not None and spec.deprecation.state(now) == "retired"


def deprecated_detail(spec: ToolSpec, now: Callable[[], datetime]) -> dict[str, Any]:
    """``{"deprecated_tool": ...}`` for the audit detail of a call made while ``spec`` is deprecated
    (empty otherwise; ``now``, the store's clock, is read only for a tool that declares one)."""
    found = spec.deprecation
    if found is None or found.state(now()) == "active":
        return {}
    return {"deprecated_tool": found.to_mapping()}


def manifest_fields(spec: ToolSpec) -> dict[str, Any]:
    """The fields as the manifest records them (only those set, so manifests reviewed before the
    fields existed stay valid); changing any of them is a reviewed change."""
    out: dict[str, Any] = {}
    if spec.cost_estimate is not None:
        out["cost_estimate"] = {"amount": spec.cost_estimate.amount, "unit": spec.cost_estimate.unit}
    if spec.rate_limit is not None:
        out["rate_limit"] = {"limit": spec.rate_limit.limit, "window_s": spec.rate_limit.window_s}
    if spec.deprecation is not None:
        out["deprecation"] = spec.deprecation.to_mapping()
    return out


def inventory_text(spec: ToolSpec) -> str:
    """The inventory line's part for these fields (empty when none is set)."""
    parts = []
    if spec.cost_estimate is not None:
        parts.append(f" cost={spec.cost_estimate.text()}")
    if spec.rate_limit is not None:
        parts.append(f" rate_limit={spec.rate_limit.text()}")
    if spec.deprecation is not None:
        parts.append(f" deprecated_since={spec.deprecation.since.isoformat()}")
        parts.append(f" sunset_at={spec.deprecation.sunset_at.isoformat()}")
    return "".join(parts)


def model_description(spec: ToolSpec) -> str:
    """The description the model is told: a declared deprecation's notice first."""
    return spec.description if spec.deprecation is None else f"{spec.deprecation.notice()} {spec.description}"


__all__ = [
    "COST_UNIT",
    "CostEstimate",
    "Deprecation",
    "ToolRateLimit",
    "deprecated_detail",
    "field_problems",
    "inventory_text",
    "is_retired",
    "manifest_fields",
    "model_description",
]
