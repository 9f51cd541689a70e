"""Business rules as data, evaluated by a pure engine.

Rules live in the release's versioned policy file (its ``policy.json``, beside it); a limit
change is a data change, reviewed like code and pinned by its hash in the release manifest. The
engine is pure: principal, tool, validated arguments and the current time in, a `Decision` out.
The first violated rule wins, with its stable id and a reason that says what is allowed without
hinting how to get around it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, time
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from toolgate.canonical import digest
from toolgate.errors import ConfigurationError
from toolgate.policy.cost_limits import CostLimits
from toolgate.policy.decisions import Decision, Rejection
from toolgate.policy.escalation import Escalation, EscalationRule, escalate, parse_escalation
from toolgate.policy.principal import Principal
from toolgate.tools.spec import ApprovalClass

SCHEMA_VERSION = 1


class Rule(Protocol):
    """One business rule of one tool."""

    @property
    def id(self) -> str:
        """Stable rule id, e.g. ``refund.amount_limit``."""
        ...

    @property
    def tool(self) -> str:
        """Tool the rule applies to."""
        ...

    def evaluate(self, principal: Principal, args: Mapping[str, Any], now: datetime) -> Rejection | None:
        """A rejection when violated, else None."""
        ...


def _violation(rule_id: str, reason: str) -> Rejection:
    return Rejection(code="policy_violation", message=reason, retryable=False, rule_id=rule_id)


@dataclass(frozen=True, kw_only=True)
class MaxValueRule:
    """``args[field]`` may not exceed the highest limit among the principal's roles."""

    id: str
    tool: str
    field: str
    limits_by_role: Mapping[str, int]
    default_limit: int
    reason: str

    def limit_for(self, principal: Principal) -> int:
        """Highest limit any of the principal's roles grants."""
        limits = [self.limits_by_role[r] for r in principal.roles if r in self.limits_by_role]
        return max(limits, default=self.default_limit)

    def evaluate(self, principal: Principal, args: Mapping[str, Any], now: datetime) -> Rejection | None:
        value = args.get(self.field)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return None
        limit = self.limit_for(principal)
        return (
            None
            if value <= limit
            else _violation(self.id, self.reason.format(limit=limit, limit_cents=limit))
        )


@dataclass(frozen=True, kw_only=True)
class AllowlistRule:
    """``args[field]`` must be one of the values the principal's roles allow (union over roles)."""

    id: str
    tool: str
    field: str
    values_by_role: Mapping[str, Sequence[str]]
    reason: str

    def evaluate(self, principal: Principal, args: Mapping[str, Any], now: datetime) -> Rejection | None:
        allowed = {v for role in principal.roles for v in self.values_by_role.get(role, ())}
        return None if args.get(self.field) in allowed else _violation(self.id, self.reason)


@dataclass(frozen=True, kw_only=True)
class AllowedHoursRule:
    """The tool may only be used between ``start`` and ``end`` local time, unless a role is exempt."""

    id: str
    tool: str
    timezone: str
    start: time
    end: time
    exempt_roles: frozenset[str]
    reason: str

    def evaluate(self, principal: Principal, args: Mapping[str, Any], now: datetime) -> Rejection | None:
        if principal.roles & self.exempt_roles:
            return None
        local = now.astimezone(ZoneInfo(self.timezone)).time()
        inside = (
            self.start <= local < self.end
            if self.start < self.end
            else local >= self.start or local < self.end
        )
        return None if inside else _violation(self.id, self.reason)


@dataclass(frozen=True, kw_only=True)
class RateLimit:
    """At most ``limit`` calls per ``window_s`` seconds for one bucket."""

    limit: int
    window_s: int


@dataclass(frozen=True, kw_only=True)
class RateLimits:
    """Inbound limits: per principal and tool, per tenant, and one ``global`` window shared by every
    principal of every tenant (all counted in the store, so every process shares them)."""

    per_principal_tool: RateLimit | None = None
    per_tenant: RateLimit | None = None
    global_: RateLimit | None = None
    """policy.json ``rate_limits.global``: every call of every tenant counts here."""


@dataclass(frozen=True, kw_only=True)
class PolicyRules:
    """One release's rules, with their version and the hash of their source document."""

    policy_version: str
    """Version string of the policy file."""
    sha256: str
    """SHA-256 of the canonical policy document (pinned in the release manifest)."""
    approval_minutes: float
    """Validity of an unchanged proposal awaiting approval, in minutes; then it must be proposed again."""
    rules: Sequence[Rule]
    """Rules in evaluation order."""
    rate_limits: RateLimits = field(default_factory=RateLimits)
    """Inbound rate limits."""
    escalations: Sequence[EscalationRule] = ()
    """Rules that raise a write's approval class by its arguments (``kind: escalate``)."""
    cost_limits: CostLimits = field(default_factory=CostLimits)
    """How much more per task than its control the release gate lets a candidate spend."""

    def escalation(self, tool: str, base: ApprovalClass, args: Mapping[str, Any]) -> Escalation:
        """The approval class a proposal of ``tool`` with the judged ``args`` needs, and why."""
        return escalate(self.escalations, tool, base, args)

    def evaluate(
        self, tool: str, is_write: bool, principal: Principal, args: Mapping[str, Any], now: datetime
    ) -> Decision:
        """First violation wins; otherwise writes need approval and reads are allowed."""
        for rule in self.rules:
            if rule.tool == tool:
                rejection = rule.evaluate(principal, args, now)
                if rejection is not None:
                    return Decision.deny(rejection)
        return Decision.require_approval() if is_write else Decision.allow()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> PolicyRules:
        """Parse a policy document, refusing unknown schema versions and rule kinds."""
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ConfigurationError(f"unsupported policy schema_version {data.get('schema_version')!r}")
        raws = data.get("rules", [])
        return cls(
            policy_version=str(data["policy_version"]),
            sha256=digest(data),
            approval_minutes=float(data.get("approval_minutes", 15)),
            rules=tuple(_rule(raw) for raw in raws if raw.get("kind") != "escalate"),
            rate_limits=_rate_limits(data.get("rate_limits", {})),
            escalations=tuple(parse_escalation(raw) for raw in raws if raw.get("kind") == "escalate"),
            cost_limits=CostLimits.from_mapping(data.get("cost_limits", {})),
        )


def _rule(raw: Mapping[str, Any]) -> Rule:
    kind = raw.get("kind")
    common = {"id": str(raw["id"]), "tool": str(raw["tool"]), "reason": str(raw["reason"])}
    if kind == "max_value":
        return MaxValueRule(
            field=raw["field"],
            limits_by_role=dict(raw["limits_by_role"]),
            default_limit=int(raw["default_limit"]),
            **common,
        )
    if kind == "allowlist":
        return AllowlistRule(
            field=raw["field"],
            values_by_role={k: tuple(v) for k, v in raw["values_by_role"].items()},
            **common,
        )
    if kind == "allowed_hours":
        return AllowedHoursRule(
            timezone=raw.get("timezone", "UTC"),
            start=time.fromisoformat(raw["start"]),
            end=time.fromisoformat(raw["end"]),
            exempt_roles=frozenset(raw.get("exempt_roles", [])),
            **common,
        )
    raise ConfigurationError(f"unknown policy rule kind {kind!r} in rule {raw.get('id')!r}")


def _rate_limits(raw: Mapping[str, Any]) -> RateLimits:
    def one(key: str) -> RateLimit | None:
        item = raw.get(key)
        return RateLimit(limit=int(item["limit"]), window_s=int(item["window_s"])) if item else None

    unknown = sorted(set(raw) - {"per_principal_tool", "per_tenant", "global"})
    if unknown:
        raise ConfigurationError(f"unknown rate limit window(s) {', '.join(unknown)} in policy rate_limits")
    return RateLimits(
        per_principal_tool=one("per_principal_tool"), per_tenant=one("per_tenant"), global_=one("global")
    )


__all__ = [
    "AllowedHoursRule",
    "AllowlistRule",
    "MaxValueRule",
    "PolicyRules",
    "RateLimit",
    "RateLimits",
    "Rule",
]
