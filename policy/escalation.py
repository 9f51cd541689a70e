"""Escalation as policy: a rule raises a write's approval class by its arguments, and says why.

An ``escalate`` rule in the release's ``policy.json`` names a tool, a condition on one judged
argument (a number ``over`` a threshold, or a value ``in`` a list such as production targets), the
stronger approval class (a label as `ApprovalClass.describe` prints it) and the reason reviewers
see. Trusted code evaluates the rules when a proposal is made, from the judged arguments only; the
effective class and the reason are stored on the proposal (covered by its digest), and every
decision reads the class from there. A rule can only raise: `check_escalations` refuses a policy
whose escalation does not contain the tool's own class, or whose escalations of one tool cannot
be ordered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolgate.errors import ConfigurationError
from toolgate.tools.spec import ApprovalClass


@dataclass(frozen=True, kw_only=True)
class EscalationRule:
    """Raise ``tool``'s approval class to ``approval`` when the argument at ``field`` matches."""

    id: str
    tool: str
    field: str
    """Argument name, or a dotted path into nested objects (``target.env``)."""
    approval: ApprovalClass
    reason: str
    over: float | None = None
    """Matches a number strictly greater than this."""
    values: frozenset[str] | None = None
    """Matches a string equal to one of these (``in`` in the policy file)."""

    def matches(self, args: Mapping[str, Any]) -> bool:
        """True when the judged arguments meet the condition (missing or mistyped: no match)."""
        value: Any = args
        for part in self.field.split("."):
            if not isinstance(value, Mapping) or part not in value:
                return False
            value = value[part]
        if self.over is not None:
            return isinstance(value, int | float) and not isinstance(value, bool) and value > self.over
        return isinstance(value, str) and self.values is not None and value in self.values


@dataclass(frozen=True, kw_only=True)
class Escalation:
    """The approval class a proposal needs, and the rule that raised it (if one did)."""

    approval: ApprovalClass
    rule_id: str | None = None
    reason: str | None = None


def escalate(
    rules: Sequence[EscalationRule], tool: str, base: ApprovalClass, args: Mapping[str, Any]
) -> Escalation:
    """The strongest class among ``base`` and every matching rule of ``tool`` (first one on a tie)."""
    result = Escalation(approval=base)
    for rule in rules:
        if rule.tool != tool or not rule.matches(args):
            continue
        if rule.approval.at_least(result.approval) and (
            result.rule_id is None or not result.approval.at_least(rule.approval)
        ):
            result = Escalation(approval=rule.approval, rule_id=rule.id, reason=rule.reason)
    return result


def check_escalations(
    rules: Sequence[EscalationRule], base: Mapping[str, ApprovalClass], *, unknown_ok: bool = False
) -> None:
    """Refuse rules that name no tool of ``base`` (unless ``unknown_ok``: a registry holding part
    of a release), would lower a tool's class, or cannot be ordered."""
    for rule in rules:
        own = base.get(rule.tool)
        if own is None:
            if unknown_ok:
                continue
            raise ConfigurationError(f"escalation rule {rule.id!r} names unknown tool {rule.tool!r}")
        if own.kind == "none" or not rule.approval.at_least(own):
            raise ConfigurationError(
                f"escalation rule {rule.id!r} would not raise {rule.tool}'s approval class"
                f" {own.describe()} (to {rule.approval.describe()})"
            )
        for other in rules:
            a, b = rule.approval, other.approval
            if other.tool == rule.tool and not (a.at_least(b) or b.at_least(a)):
                raise ConfigurationError(
                    f"escalation rules {rule.id!r} and {other.id!r} raise {rule.tool} to classes"
                    " neither of which contains the other"
                )


def parse_escalation(raw: Mapping[str, Any]) -> EscalationRule:
    """One ``{"kind": "escalate", ...}`` rule of a policy file; `ConfigurationError` when malformed."""
    rule_id = str(raw.get("id", ""))
    try:
        approval = ApprovalClass.parse(str(raw["approval"]))
        over, values = raw.get("over"), raw.get("in")
        if (over is None) == (values is None):
            raise ValueError("exactly one of 'over' and 'in' is needed")
        if over is not None and (isinstance(over, bool) or not isinstance(over, int | float)):
            raise ValueError("'over' must be a number")
        if values is not None and (
            not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values)
        ):
            raise ValueError("'in' must be a non-empty list of strings")
        reason = str(raw["reason"]).strip()
        if not reason or not rule_id:
            raise ValueError("an escalation needs an id and a reason for the reviewer")
        return EscalationRule(
            id=rule_id,
            tool=str(raw["tool"]),
            field=str(raw["field"]),
            approval=approval,
            reason=reason,
            over=float(over) if over is not None else None,
            values=frozenset(values) if values is not None else None,
        )
    except (KeyError, ValueError) as exc:
        raise ConfigurationError(f"escalation rule {rule_id!r} is malformed: {exc}") from exc


__all__ = ["Escalation", "EscalationRule", "check_escalations", "escalate", "parse_escalation"]
