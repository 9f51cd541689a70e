"""Business rules as data, evaluated by a pure engine (chapter §7.3).

Rules live in the release's versioned policy file (``policy/rules/<release>.json``); a limit
change is a data change. The engine is pure: principal, tool and validated arguments in, a
`Decision` out. The first violated rule wins, with its stable id and a reason that says what is
allowed without hinting how to get around it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from toolgate.errors import ConfigurationError
from toolgate.policy.decisions import Decision, Rejection
from toolgate.policy.principal import Principal

SCHEMA_VERSION = 1


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

    def evaluate(self, principal: Principal, args: Mapping[str, Any]) -> Rejection | None:
        value = args.get(self.field)
        if not isinstance(value, int | float):
            return None
        limit = self.limit_for(principal)
        if value <= limit:
            return None
        return Rejection(
            code="policy_violation",
            message=self.reason.format(limit_cents=limit, limit=limit),
            retryable=False,
            rule_id=self.id,
        )


@dataclass(frozen=True, kw_only=True)
class PolicyRules:
    """One release's rules, with their version."""

    policy_version: str
    """Version string of the policy file."""
    approval_minutes: int
    """Validity of an unchanged proposal awaiting approval (the seeds' ``approvalMinutes``)."""
    rules: Sequence[MaxValueRule]
    """Rules in evaluation order."""

    def evaluate(self, tool: str, is_write: bool, principal: Principal, args: Mapping[str, Any]) -> Decision:
        """First violation wins; otherwise writes need approval and reads are allowed."""
        for rule in self.rules:
            if rule.tool != tool:
                continue
            rejection = rule.evaluate(principal, args)
            if rejection is not None:
                return Decision.deny(rejection)
        return Decision.require_approval() if is_write else Decision.allow()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> PolicyRules:
        """Parse a policy document, refusing unknown schema versions and rule kinds."""
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ConfigurationError(f"unsupported policy schema_version {data.get('schema_version')!r}")
        rules: list[MaxValueRule] = []
        for raw in data.get("rules", []):
            if raw.get("kind") != "max_value":
                raise ConfigurationError(
                    f"unknown policy rule kind {raw.get('kind')!r} in rule {raw.get('id')!r}"
                )
            rules.append(
                MaxValueRule(
                    id=raw["id"],
                    tool=raw["tool"],
                    field=raw["field"],
                    limits_by_role=dict(raw["limits_by_role"]),
                    default_limit=int(raw["default_limit"]),
                    reason=raw["reason"],
                )
            )
        return cls(
            policy_version=str(data["policy_version"]),
            approval_minutes=int(data.get("approval_minutes", 15)),
            rules=tuple(rules),
        )

    @classmethod
    def for_release(cls, release: str) -> PolicyRules:
        """The packaged policy file of ``release`` (``ops-tools/1.0.0`` -> ``ops-tools-1.0.0.json``)."""
        name = release.replace("/", "-") + ".json"
        try:
            text = resources.files("toolgate.policy").joinpath("rules", name).read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise ConfigurationError(f"no policy file for release {release!r}") from exc
        return cls.from_mapping(json.loads(text))


__all__ = ["MaxValueRule", "PolicyRules"]
