"""Business rules as data, evaluated by a pure engine.

Rules live in the release's versioned policy file (its ``policy.json``, beside it); a limit
change is a data change, reviewed like code and pinned by its hash in the release manifest. The
engine is pure: principal, tool, validated arguments and the current time in, a `Decision` out.
The first violated rule wins, with its stable id and a reason that says what is allowed without
hinting how to get around it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, time
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from toolgate.canonical import digest
from toolgate.errors import ConfigurationError
from toolgate.policy.cost_limits import CostLimits
from toolgate.policy.decisions import Decision, Rejection
from toolgate.policy.escalation import Escalation, EscalationRule, escalate, parse_escalation
from toolgate.policy.principal import Principal
from toolgate.tools.spec import MAX_WINDOW_S, ApprovalClass

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
    limits_by_role: Mapping[str, int | float]
    default_limit: int | float
    reason: str

    def limit_for(self, principal: Principal) -> int | float:
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
        """Parse a policy document, refusing unknown schema versions and rule kinds, and any field
        a rule or limit would trip over when a call is judged (a zero window, a limit that is not
        a number, a time zone that does not exist, a reason that cannot be formatted): a malformed
        policy is refused with `ConfigurationError` naming the field when its release loads, never
        when a call meets it."""
        if not isinstance(data, Mapping):
            raise ConfigurationError("a policy document must be an object")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ConfigurationError(f"unsupported policy schema_version {data.get('schema_version')!r}")
        version = data.get("policy_version")
        if not isinstance(version, str | int) or isinstance(version, bool) or not str(version).strip():
            raise ConfigurationError("policy policy_version must be a non-empty string")
        minutes = data.get("approval_minutes", 15)
        if not _number(minutes) or minutes <= 0:
            raise ConfigurationError(f"policy approval_minutes must be a number > 0 (got {minutes!r})")
        raws = data.get("rules", [])
        if not isinstance(raws, list) or not all(isinstance(raw, Mapping) for raw in raws):
            raise ConfigurationError("policy rules must be a list of objects")
        limits = data.get("rate_limits", {})
        if not isinstance(limits, Mapping):
            raise ConfigurationError("policy rate_limits must be an object of window: {limit, window_s}")
        return cls(
            policy_version=str(version),
            sha256=digest(data),
            approval_minutes=float(minutes),
            rules=tuple(_rule(raw) for raw in raws if raw.get("kind") != "escalate"),
            rate_limits=_rate_limits(limits),
            escalations=tuple(parse_escalation(raw) for raw in raws if raw.get("kind") == "escalate"),
            cost_limits=CostLimits.from_mapping(data.get("cost_limits", {})),
        )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _text(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{where}: {key} must be a non-empty string (got {value!r})")
    return value


def _role_map(raw: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = raw.get(key)
    if not isinstance(value, Mapping) or not all(isinstance(role, str) for role in value):
        raise ConfigurationError(f"{where}: {key} must be an object of role: value")
    return value


def _clock_time(raw: Mapping[str, Any], key: str, where: str) -> time:
    value = _text(raw, key, where)
    try:
        return time.fromisoformat(value)
    except ValueError as exc:
        raise ConfigurationError(f"{where}: {key} must be a time of day like 09:00 (got {value!r})") from exc


def _rule(raw: Mapping[str, Any]) -> Rule:
    kind = raw.get("kind")
    where = f"policy rule {raw.get('id')!r}"
    common = {
        "id": _text(raw, "id", where),
        "tool": _text(raw, "tool", where),
        "reason": _text(raw, "reason", where),
    }
    if kind == "max_value":
        limits = _role_map(raw, "limits_by_role", where)
        default = raw.get("default_limit")
        if not isinstance(default, int | float) or not all(_number(v) for v in (*limits.values(), default)):
            raise ConfigurationError(f"{where}: limits_by_role and default_limit must be numbers")
        try:  # the reason a violation shows: only {limit} and {limit_cents} are filled in
            common["reason"].format(limit=0, limit_cents=0)
        except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
            raise ConfigurationError(
                f"{where}: reason may only name {{limit}} and {{limit_cents}} ({exc!r})"
            ) from exc
        return MaxValueRule(
            field=_text(raw, "field", where),
            limits_by_role=dict(limits),
            default_limit=default,
            **common,
        )
    if kind == "allowlist":
        values = _role_map(raw, "values_by_role", where)
        if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in values.values()):
            raise ConfigurationError(f"{where}: values_by_role must map each role to a list of strings")
        return AllowlistRule(
            field=_text(raw, "field", where),
            values_by_role={k: tuple(v) for k, v in values.items()},
            **common,
        )
    if kind == "allowed_hours":
        zone = raw.get("timezone", "UTC")
        try:
            ZoneInfo(zone)
        except (ValueError, TypeError, ZoneInfoNotFoundError) as exc:
            raise ConfigurationError(f"{where}: timezone {zone!r} is not a known time zone") from exc
        start, end = _clock_time(raw, "start", where), _clock_time(raw, "end", where)
        if start == end:
            raise ConfigurationError(f"{where}: start and end are the same time (no hours, or every hour?)")
        exempt = raw.get("exempt_roles", [])
        if not isinstance(exempt, list) or not all(isinstance(role, str) for role in exempt):
            raise ConfigurationError(f"{where}: exempt_roles must be a list of role names")
        return AllowedHoursRule(timezone=zone, start=start, end=end, exempt_roles=frozenset(exempt), **common)
    raise ConfigurationError(f"unknown policy rule kind {kind!r} in rule {raw.get('id')!r}")


def _rate_limits(raw: Mapping[str, Any]) -> RateLimits:
    def one(key: str) -> RateLimit | None:
        item = raw.get(key)
        if item is None:
            return None
        limit = item.get("limit") if isinstance(item, Mapping) else None
        window = item.get("window_s") if isinstance(item, Mapping) else None
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigurationError(
                f"policy rate_limits.{key}.limit must be an integer >= 1 (got {limit!r})"
            )
        if not isinstance(window, int) or isinstance(window, bool) or not 1 <= window <= MAX_WINDOW_S:
            raise ConfigurationError(
                f"policy rate_limits.{key}.window_s must be an integer 1..{MAX_WINDOW_S} (got {window!r})"
            )
        return RateLimit(limit=limit, window_s=window)

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
