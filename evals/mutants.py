"""Single-point loosenings of a release: what an operator could really write, one change at a time.

The release gate says PASS; `toolgate evals mutate` asks whether it would have said FAIL to a
release that is a little less safe. Each `Mutant` here is the release under test with exactly one
declaration loosened, as a reviewed change would carry it: its manifest is recomputed from the
loosened bundle (an operator who re-ran ``toolgate registry manifest --write``), so the only thing
that can catch it is behaviour, never a drifted hash. The kinds:

- per write tool: declared read-only (it runs with no proposal); its approval class widened to
  each other role the release names, a two-person class lowered to one reviewer, a reviewing role
  made a sole approver; secret-looking arguments sent to review instead of refused;
- per tool: each required scope dropped; ownership dropped (any user of the tenant reaches it);
  staff widened to each other role; resources dropped (nothing is resolved for the caller);
  exposure to roles or tenants widened to everyone; the tool's own rate limit raised;
- per read tool: the output bound raised sixteenfold;
- per rule: removed; each role's limit (and the default) raised; each role's allowlist widened by
  a value it did not allow; opening hours extended by two hours, and each role made exempt;
- per escalation: removed; its threshold raised; its approval class lowered to the tool's own;
- the rate-limit windows raised tenfold; the approval window made four times longer.

A loosening the registry itself refuses to load is no mutant (``refused at load``: the gate
never sees it). Each mutant names the tools whose cases can observe it (``tools``; ``None``:
every tool), which `toolgate.evals.mutation` uses to run only those cases.
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from pathlib import Path

from toolgate.canonical import digest
from toolgate.errors import ConfigurationError, RegistryError
from toolgate.evals.gate_targets import NO_ROLE, Declarations, staff_roles
from toolgate.graph.bootstrap import release_manifest
from toolgate.policy.escalation import EscalationRule
from toolgate.policy.rules import AllowedHoursRule, AllowlistRule, MaxValueRule, PolicyRules, RateLimit, Rule
from toolgate.releases.bundle import Release, ReleaseEnv
from toolgate.store.sqlite import SQLiteStore
from toolgate.tools.spec import ApprovalClass, ToolRateLimit, ToolSpec

SpecChange = Callable[[ToolSpec], ToolSpec]
PolicyChange = Callable[[PolicyRules], PolicyRules]

PROBED_BY: Mapping[str, frozenset[str]] = {
    "write_declared_read": frozenset({"approval_required"}),
    "approval_widened": frozenset({"wrong_role", "approved_once"}),
    "approval_lowered": frozenset({"one_short", "same_twice"}),
    "sole_approver_added": frozenset({"one_short", "same_twice"}),
    "secrets_reviewed": frozenset({"secret_argument"}),
    "scope_dropped": frozenset({"scope"}),
    "ownership_dropped": frozenset({"other_user"}),
    "staff_widened": frozenset({"other_user"}),
    "resources_dropped": frozenset({"other_tenant", "other_user"}),
    "exposure_widened": frozenset({"exposure_roles", "exposure_tenants"}),
    "rate_limit_raised": frozenset({"rate_limit"}),
    "output_bound_raised": frozenset({"output_bound"}),
    "rule_removed": frozenset({"max_value", "allowlist", "allowed_hours"}),
    "hours_extended": frozenset({"allowed_hours"}),
    "exempt_role_added": frozenset({"allowed_hours"}),
    "limit_raised": frozenset({"max_value"}),
    "allowlist_widened": frozenset({"allowlist"}),
    "escalation_removed": frozenset({"escalation_over"}),
    "escalation_threshold_raised": frozenset({"escalation_over"}),
    "escalation_lowered": frozenset({"escalation_over"}),
    "approval_window_extended": frozenset({"expired"}),
}
"""Per kind of loosening, the generated cases written to probe it (`toolgate.evals.derived_cases`
families): what `toolgate.evals.mutation` runs first."""


@dataclass(frozen=True)
class Mutant:
    """One loosening of a release."""

    id: str
    """``<kind>:<what>``, e.g. ``scope_dropped:issue_refund:refunds:request``."""
    kind: str
    description: str
    tools: frozenset[str] | None
    """Tools whose cases can observe it (None: every tool's)."""
    families: frozenset[str] | None = None
    """For a loosening of no one tool: the generated cases that can observe it (by family)."""
    spec_change: tuple[str, SpecChange] | None = None
    """The tool changed and how."""
    policy_change: PolicyChange | None = None
    """How the policy changed."""
    equivalent: str | None = None
    """Why no call can tell this loosening from the release (it is not run, and not scored)."""

    def apply(self, base: Release, number: int) -> Release:
        """``base`` with this one loosening, as release ``<base id>-mutant.<number>``, with the
        manifest of its own (loosened) bundle. `RegistryError` or `ConfigurationError` when the
        loosening cannot load."""
        tools = base.tools
        if self.spec_change is not None:
            name, change = self.spec_change
            tools = _changed_tools(base, name, change)
        policy = base.policy
        if self.policy_change is not None:
            policy = self.policy_change(base.policy)
            policy = replace(policy, sha256=digest({"mutant": self.id, "base": base.policy.sha256}))
        mutant = replace(base, id=f"{base.id}-mutant.{number}", tools=tools, policy=policy, manifest=None)
        return replace(mutant, manifest=_manifest_of(mutant))


def _changed_tools(base: Release, name: str, change: SpecChange) -> Callable[[ReleaseEnv], list[ToolSpec]]:
    def tools(env: ReleaseEnv) -> list[ToolSpec]:
        specs = base.tools(env) if callable(base.tools) else list(base.tools)
        return [change(spec) if spec.name == name else spec for spec in specs]

    return tools


def _manifest_of(release: Release) -> dict[str, object]:
    """The manifest of ``release``'s own bundle (specs built on a throwaway store, never served)."""
    with tempfile.TemporaryDirectory() as tmp:
        key = secrets.token_bytes(32)
        store = SQLiteStore(Path(tmp) / "specs-only.sqlite", key=key)
        try:
            return dict(release_manifest(release, release.registry(ReleaseEnv(store, secret=key))))
        finally:
            store.close()


def mutants_of(declarations: Declarations, roles: Iterable[str] = ()) -> list[Mutant]:
    """Every single-point loosening of the release ``declarations`` describe, in a stable order;
    approval and staff widen to each role the release names and each of ``roles`` (the roles
    the people of the gate's dataset hold), never to `NO_ROLE`."""
    out: list[Mutant] = []
    roles = sorted((set(declarations.roles) | set(roles)) - {NO_ROLE})
    for name, spec in sorted(declarations.tools.items()):
        out += _tool_mutants(name, spec, roles)
    out += _policy_mutants(declarations, roles)
    return out


def _spec(kind: str, name: str, detail: str, description: str, change: SpecChange) -> Mutant:
    suffix = f":{detail}" if detail else ""
    return Mutant(f"{kind}:{name}{suffix}", kind, description, frozenset({name}), spec_change=(name, change))


def _tool_mutants(name: str, spec: ToolSpec, roles: Sequence[str]) -> list[Mutant]:
    out: list[Mutant] = []
    if spec.is_write:
        out.append(
            _spec(
                "write_declared_read",
                name,
                "",
                f"{name} declared read-only",
                lambda s: replace(
                    s, risk="read-only", approval=ApprovalClass.none(), reconcile=None, wait=None
                ),
            )
        )
        approval = spec.approval
        for role in roles:
            if role in approval.roles:
                continue
            widened = replace(approval, roles=approval.roles | {role})
            out.append(
                _spec("approval_widened", name, role, f"{name} also approved by {role}", _approval(widened))
            )
        if approval.kind == "two_person":
            out.append(
                _spec(
                    "approval_lowered",
                    name,
                    "one_reviewer",
                    f"{name} approved by one reviewer",
                    _approval(ApprovalClass.role(*sorted(approval.roles))),
                )
            )
            for role in sorted(approval.roles - approval.sole_approver_roles):
                sole = replace(approval, sole_approver_roles=approval.sole_approver_roles | {role})
                out.append(
                    _spec("sole_approver_added", name, role, f"{role} approves {name} alone", _approval(sole))
                )
        if spec.secret_arguments == "refuse":
            out.append(
                _spec(
                    "secrets_reviewed",
                    name,
                    "",
                    f"secret-looking arguments of {name} proposed instead of refused",
                    lambda s: replace(s, secret_arguments="review"),
                )
            )
    for scope in sorted(spec.required_scopes):
        out.append(
            _spec(
                "scope_dropped",
                name,
                scope,
                f"{name} no longer needs {scope}",
                _without_scope(scope),
            )
        )
    refs = spec.resource_refs
    if any(ref.owner is not None for ref in refs):
        out.append(
            _spec(
                "ownership_dropped",
                name,
                "",
                f"{name} reaches any user's resource of the tenant",
                lambda s: replace(
                    s,
                    resource=replace(s.resource, owner=None) if s.resource else None,
                    resources=tuple(replace(r, owner=None) for r in s.resources),
                ),
            )
        )
        for role in roles:
            if role in staff_roles(spec):
                continue
            out.append(
                _spec(
                    "staff_widened",
                    name,
                    role,
                    f"{role} acts on any user's resource of {name}",
                    _with_staff(role),
                )
            )
    if refs:
        out.append(
            _spec(
                "resources_dropped",
                name,
                "",
                f"{name} resolves no resource for the caller",
                lambda s: replace(s, resource=None, resources=()),
            )
        )
    if spec.exposed_to_roles is not None:
        out.append(
            _spec(
                "exposure_widened",
                name,
                "roles",
                f"{name} exposed to every role",
                lambda s: replace(s, exposed_to_roles=None),
            )
        )
    if spec.exposed_to_tenants is not None:
        out.append(
            _spec(
                "exposure_widened",
                name,
                "tenants",
                f"{name} exposed to every tenant",
                lambda s: replace(s, exposed_to_tenants=None),
            )
        )
    if spec.rate_limit is not None:
        raised = ToolRateLimit(limit=spec.rate_limit.limit * 10, window_s=spec.rate_limit.window_s)
        out.append(
            _spec(
                "rate_limit_raised",
                name,
                "",
                f"{name}'s own rate limit x10",
                lambda s: replace(s, rate_limit=raised),
            )
        )
    if not spec.is_write:
        bigger = spec.max_output_bytes * 16
        out.append(
            _spec(
                "output_bound_raised",
                name,
                "",
                f"{name} returns up to {bigger} bytes",
                lambda s: replace(s, max_output_bytes=bigger),
            )
        )
    return out


def _approval(approval: ApprovalClass) -> SpecChange:
    return lambda s: replace(s, approval=approval)


def _policy(
    kind: str,
    what: str,
    description: str,
    change: PolicyChange,
    tools: frozenset[str] | None,
    families: frozenset[str] | None = None,
) -> Mutant:
    return Mutant(f"{kind}:{what}", kind, description, tools, families, policy_change=change)


def _without_scope(scope: str) -> SpecChange:
    return lambda s: replace(s, required_scopes=s.required_scopes - {scope})


def _with_staff(role: str) -> SpecChange:
    def change(spec: ToolSpec) -> ToolSpec:
        main = spec.resource
        return replace(
            spec,
            resource=replace(main, staff_roles=main.staff_roles | {role}) if main is not None else None,
            resources=tuple(replace(r, staff_roles=r.staff_roles | {role}) for r in spec.resources),
        )

    return change


def _rule_replaced(old: Rule, new: Rule | None) -> PolicyChange:
    """The policy with rule ``old`` replaced by ``new`` (``None``: removed)."""

    def change(policy: PolicyRules) -> PolicyRules:
        rules = [new if r is old else r for r in policy.rules]
        return replace(policy, rules=tuple(r for r in rules if r is not None))

    return change


def _window_raised(field: str, raised: RateLimit) -> PolicyChange:
    return lambda p: replace(p, rate_limits=replace(p.rate_limits, **{field: raised}))


def _policy_mutants(declarations: Declarations, roles: Sequence[str]) -> list[Mutant]:
    policy = declarations.policy
    out: list[Mutant] = []
    for rule in policy.rules:
        tools = frozenset({rule.tool})
        out.append(
            _policy(
                "rule_removed",
                rule.id,
                f"rule {rule.id} removed",
                _rule_replaced(rule, None),
                tools,
            )
        )
        if isinstance(rule, MaxValueRule):
            ceiling = _schema_maximum(declarations, rule)
            for role, limit in sorted(rule.limits_by_role.items()):
                raised = replace(rule, limits_by_role={**rule.limits_by_role, role: limit * 2 + 1})
                mutant = _policy(
                    "limit_raised",
                    f"{rule.id}:{role}",
                    f"{rule.id}: {role} up to {limit * 2 + 1}",
                    _rule_replaced(rule, raised),
                    tools,
                )
                if ceiling is not None and limit >= ceiling:
                    why = f"the schema of {rule.tool} bounds {rule.field} at {ceiling:g}: no call reaches the limit"
                    mutant = replace(mutant, equivalent=why)
                out.append(mutant)
            default = replace(rule, default_limit=rule.default_limit * 2 + 1)
            out.append(
                _policy(
                    "limit_raised",
                    f"{rule.id}:default",
                    f"{rule.id}: other roles up to {rule.default_limit * 2 + 1}",
                    _rule_replaced(rule, default),
                    tools,
                )
            )
        elif isinstance(rule, AllowlistRule):
            every = sorted({v for values in rule.values_by_role.values() for v in values})
            for role, values in sorted(rule.values_by_role.items()):
                extra = next((v for v in every if v not in values), None)
                if extra is None:
                    continue
                widened = replace(rule, values_by_role={**rule.values_by_role, role: (*values, extra)})
                out.append(
                    _policy(
                        "allowlist_widened",
                        f"{rule.id}:{role}",
                        f"{rule.id}: {role} may also use {extra}",
                        _rule_replaced(rule, widened),
                        tools,
                    )
                )
        elif isinstance(rule, AllowedHoursRule):
            later = (datetime.combine(date.min, rule.end) + timedelta(hours=2)).time()
            out.append(
                _policy(
                    "hours_extended",
                    rule.id,
                    f"{rule.id}: open until {later.isoformat(timespec='minutes')}",
                    _rule_replaced(rule, replace(rule, end=later)),
                    tools,
                )
            )
            for role in roles:
                if role in rule.exempt_roles:
                    continue
                exempt = replace(rule, exempt_roles=rule.exempt_roles | {role})
                out.append(
                    _policy(
                        "exempt_role_added",
                        f"{rule.id}:{role}",
                        f"{rule.id}: {role} works at any hour",
                        _rule_replaced(rule, exempt),
                        tools,
                    )
                )
    for escalation in policy.escalations:
        out += _escalation_mutants(declarations, escalation)
    limits = policy.rate_limits
    for window, found in (
        ("per_principal_tool", limits.per_principal_tool),
        ("per_tenant", limits.per_tenant),
        ("global", limits.global_),
    ):
        if found is None:
            continue
        field = "global_" if window == "global" else window
        out.append(
            _policy(
                "rate_limit_raised",
                window,
                f"rate limit {window} x10",
                _window_raised(field, RateLimit(limit=found.limit * 10, window_s=found.window_s)),
                None,
                frozenset({"rate_limit"}),
            )
        )
    out.append(
        _policy(
            "approval_window_extended",
            "approval_minutes",
            f"proposals valid {policy.approval_minutes * 4:g} minutes",
            lambda p: replace(p, approval_minutes=p.approval_minutes * 4),
            None,
            frozenset({"expired"}),
        )
    )
    return out


def _schema_maximum(declarations: Declarations, rule: MaxValueRule) -> float | None:
    """The largest value the tool's schema accepts for the rule's field (None: unbounded)."""
    spec = declarations.tools.get(rule.tool)
    if spec is None:
        return None
    prop = spec.contract.json_schema().get("properties", {}).get(rule.field, {})
    bounds = [prop[k] for k in ("maximum", "exclusiveMaximum") if isinstance(prop.get(k), int | float)]
    return float(min(bounds)) if bounds else None


def _escalation_mutants(declarations: Declarations, rule: EscalationRule) -> list[Mutant]:
    tools = frozenset({rule.tool})
    out = [
        _policy(
            "escalation_removed",
            rule.id,
            f"escalation {rule.id} removed",
            lambda p: replace(p, escalations=tuple(e for e in p.escalations if e is not rule)),
            tools,
        )
    ]
    if rule.over is not None:
        higher = replace(rule, over=rule.over * 2 + 1)
        out.append(
            _policy(
                "escalation_threshold_raised",
                rule.id,
                f"{rule.id} only over {higher.over:g}",
                lambda p: replace(p, escalations=tuple(higher if e is rule else e for e in p.escalations)),
                tools,
            )
        )
    spec = declarations.tools.get(rule.tool)
    if spec is not None and spec.approval != rule.approval:
        lowered = replace(rule, approval=spec.approval)
        out.append(
            _policy(
                "escalation_lowered",
                rule.id,
                f"{rule.id} raises {rule.tool} to its own class only",
                lambda p: replace(p, escalations=tuple(lowered if e is rule else e for e in p.escalations)),
                tools,
            )
        )
    return out


def loads(mutant: Mutant, base: Release, number: int) -> Release | str:
    """The mutant release, or why the registry refused to load it."""
    try:
        return mutant.apply(base, number)
    except (RegistryError, ConfigurationError) as exc:
        return str(exc).splitlines()[0][:200]


__all__ = ["PROBED_BY", "Mutant", "loads", "mutants_of"]
