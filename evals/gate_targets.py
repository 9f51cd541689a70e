"""What a release declares that the release gate must see proven: its gate targets.

A release's safety lives in its declarations, not in its prose: which tools write and who
approves them, the scopes, exposure and ownership of every tool, its business rules, its
escalations, its rate limits, its approval window and output bounds. Each declaration is a
*target*; `toolgate.evals.derived_cases` generates the cases that probe it and
`toolgate.evals.coverage` decides whether a case really demonstrated it. A write tool, rule or
escalation that no case demonstrates fails the gate (``uncovered=``): a loosening of something
no case touches could never fail it.

This module only reads declarations (a `Release` and the `Registry` it builds); it also holds the
approval-class arithmetic the generated review steps need (`satisfies`, `minimal_reviewers`),
the same semantics as `toolgate.policy.approvals.evaluate_decisions`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations_with_replacement
from typing import Literal

from toolgate.policy.principal import Principal
from toolgate.policy.rules import AllowedHoursRule, AllowlistRule, MaxValueRule, PolicyRules
from toolgate.releases.bundle import Release
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ApprovalClass, ToolSpec

TargetKind = Literal["write", "read", "rule", "escalation", "rate_limit", "output"]
"""What a target is a declaration of."""
REQUIRED_KINDS: frozenset[str] = frozenset({"write", "rule", "escalation"})
"""Targets the gate fails without (``uncovered=``); the others are reported in the coverage table."""
NO_ROLE = "gate_no_role"
"""A role no release grants anything to: the role of a reviewer who holds none of the right ones."""


@dataclass(frozen=True, order=True)
class Target:
    """One declaration the gate must see demonstrated."""

    kind: TargetKind
    name: str
    """The tool, rule id, or window (``rate_limits.per_principal_tool``) it declares."""

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True)
class Declarations:
    """What one release declares, read from its registry and policy."""

    release: str
    tools: Mapping[str, ToolSpec]
    policy: PolicyRules

    @classmethod
    def of(cls, release: Release, registry: Registry) -> Declarations:
        """The declarations of ``release`` as loaded into ``registry``."""
        return cls(release=release.id, tools=dict(registry.tools), policy=release.policy)

    @property
    def roles(self) -> frozenset[str]:
        """Every role the release names: approvers, staff, exposure, rules."""
        names: set[str] = set()
        for spec in self.tools.values():
            names |= spec.approval.roles | (spec.exposed_to_roles or frozenset())
            for ref in spec.resource_refs:
                names |= ref.staff_roles
        for rule in self.policy.rules:
            if isinstance(rule, MaxValueRule):
                names |= set(rule.limits_by_role)
            elif isinstance(rule, AllowlistRule):
                names |= set(rule.values_by_role)
            elif isinstance(rule, AllowedHoursRule):
                names |= rule.exempt_roles
        for escalation in self.policy.escalations:
            names |= escalation.approval.roles
        return frozenset(names)

    def targets(self) -> list[Target]:
        """Every target of the release, in a stable order."""
        found: list[Target] = []
        for name, spec in sorted(self.tools.items()):
            found.append(Target("write" if spec.is_write else "read", name))
            if not spec.is_write:
                found.append(Target("output", name))
            if spec.rate_limit is not None:
                found.append(Target("rate_limit", f"tool.{name}"))
        found += [Target("rule", rule.id) for rule in self.policy.rules]
        found += [Target("escalation", rule.id) for rule in self.policy.escalations]
        limits = self.policy.rate_limits
        for window, limit in (
            ("per_principal_tool", limits.per_principal_tool),
            ("per_tenant", limits.per_tenant),
            ("global", limits.global_),
        ):
            if limit is not None:
                found.append(Target("rate_limit", window))
        return found


def satisfies(approval: ApprovalClass, reviewer_roles: Sequence[frozenset[str]]) -> bool:
    """Whether distinct reviewers holding ``reviewer_roles`` (one entry each) approve under
    ``approval`` (as `toolgate.policy.approvals.evaluate_decisions` counts them)."""
    counting = [roles for roles in reviewer_roles if roles & approval.roles]
    if not counting or approval.kind == "none":
        return approval.kind == "none"
    if any(roles & approval.sole_approver_roles for roles in counting):
        return True
    return len(counting) >= approval.reviewers_required


def minimal_reviewers(approval: ApprovalClass) -> list[str]:
    """One role per reviewer of the smallest set that approves under ``approval`` (a sole
    approver when the class has one)."""
    if approval.kind == "none":
        return []
    if approval.sole_approver_roles:
        return [sorted(approval.sole_approver_roles)[0]]
    roles = sorted(approval.roles)
    return [roles[i % len(roles)] for i in range(approval.reviewers_required)]


def short_of(approval: ApprovalClass, stronger: ApprovalClass) -> list[str] | None:
    """The smallest reviewer set (a role each) that approves under ``approval`` but not under
    ``stronger``, or None when every set that satisfies the one satisfies the other."""
    roles = sorted(approval.roles)
    for size in range(1, max(approval.reviewers_required, 1) + 2):
        for chosen in combinations_with_replacement(roles, size):
            sets = [frozenset({role}) for role in chosen]
            if satisfies(approval, sets) and not satisfies(stronger, sets):
                return list(chosen)
    return None


def staff_roles(spec: ToolSpec) -> frozenset[str]:
    """Roles that act on any user's resource of their tenant, for any owner-checked resource."""
    found: set[str] = set()
    for ref in spec.resource_refs:
        found |= ref.staff_roles
    return frozenset(found)


def owner_checked(spec: ToolSpec) -> bool:
    """True when a resource of the tool belongs to one user (its own owner check)."""
    return any(ref.owner is not None for ref in spec.resource_refs)


def union_roles(declarations: Iterable[Declarations], people: Iterable[Principal] = ()) -> frozenset[str]:
    """Every role any of the releases names or any of ``people`` holds (the people the gate's
    cases act as: a widening to a role only users hold is the likeliest mistake), and `NO_ROLE`."""
    found: set[str] = {NO_ROLE}
    for one in declarations:
        found |= one.roles
    for person in people:
        found |= person.roles
    return frozenset(found)


__all__ = [
    "NO_ROLE",
    "REQUIRED_KINDS",
    "Declarations",
    "Target",
    "TargetKind",
    "minimal_reviewers",
    "owner_checked",
    "satisfies",
    "short_of",
    "staff_roles",
    "union_roles",
]
