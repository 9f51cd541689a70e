"""How a write is reviewed: who must approve it before it runs, and how its effect is undone.

A tool author declares both on `toolgate.tools.spec.ToolSpec`; the approval rules
(`toolgate.policy.approvals`) read `ApprovalClass` to decide whether the recorded decisions
authorize execution, and the rollback path (`toolgate.graph.review.rollback`) reads `Rollback`. They stand
apart from the spec because they are the two promises a reviewer relies on, shown in every review
and the registry audit, and they change with review policy rather than with how a tool is called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, kw_only=True)
class ApprovalClass:
    """Who must approve a write before it may execute.

    ``none`` is only valid for read-only tools. ``role`` needs one reviewer holding one of
    ``roles``. ``two_person`` needs ``reviewers_required`` distinct reviewers holding one of
    ``roles``, unless one reviewer holds a role in ``sole_approver_roles``.
    """

    kind: Literal["none", "role", "two_person"]
    """The approval class name, as printed in reviews and the registry audit."""
    roles: frozenset[str] = frozenset()
    """Roles whose holders may approve."""
    reviewers_required: int = 0
    """Distinct qualifying reviewers needed."""
    sole_approver_roles: frozenset[str] = frozenset()
    """Roles strong enough to approve alone even under ``two_person`` (e.g. ``finance``)."""

    @classmethod
    def none(cls) -> ApprovalClass:
        """No approval: reads only."""
        return cls(kind="none")

    @classmethod
    def role(cls, *roles: str) -> ApprovalClass:
        """One reviewer holding any of ``roles``."""
        return cls(kind="role", roles=frozenset(roles), reviewers_required=1)

    @classmethod
    def two_person(cls, *roles: str, sole_approver_roles: tuple[str, ...] = ()) -> ApprovalClass:
        """Two distinct reviewers holding any of ``roles`` (or one in ``sole_approver_roles``)."""
        return cls(
            kind="two_person",
            roles=frozenset(roles) | frozenset(sole_approver_roles),
            reviewers_required=2,
            sole_approver_roles=frozenset(sole_approver_roles),
        )

    def describe(self) -> str:
        """Short label such as ``operator`` or ``two_person(support,finance)``."""
        if self.kind == "none":
            return "none"
        roles = ",".join(sorted(self.roles))
        if self.kind == "role":
            return roles
        sole = f";sole={','.join(sorted(self.sole_approver_roles))}" if self.sole_approver_roles else ""
        return f"two_person({roles}{sole})"

    @classmethod
    def parse(cls, label: str) -> ApprovalClass:
        """The class `describe` printed as ``label``; `ValueError` for anything else."""
        text = label.strip()
        if text == "none":
            return cls.none()
        if text.startswith("two_person(") and text.endswith(")"):
            inner, _, sole = text[len("two_person(") : -1].partition(";sole=")
            result = cls.two_person(*_names(inner), sole_approver_roles=_names(sole) if sole else ())
        else:
            result = cls.role(*_names(text))
        if result.describe() != text:
            raise ValueError(f"not an approval class label: {label!r}")
        return result

    def at_least(self, other: ApprovalClass) -> bool:
        """True when every set of approvals that satisfies this class also satisfies ``other``:
        this class is ``other`` or stronger (an escalation may only raise, never lower)."""
        if other.kind == "none":
            return True
        if self.kind == "none" or self.reviewers_required < 1:
            return False
        sole_kept = self.sole_approver_roles <= other.sole_approver_roles
        if self.roles <= other.sole_approver_roles:
            return True  # any one approver of this class could approve alone under ``other``
        return sole_kept and self.roles <= other.roles and self.reviewers_required >= other.reviewers_required


def _names(text: str) -> tuple[str, ...]:
    names = tuple(text.split(","))
    if any(not n or n != n.strip() or set(n) & set(";()=") for n in names):
        raise ValueError(f"not a list of role names: {text!r}")
    return names


@dataclass(frozen=True)
class Rollback:
    """How a completed effect is undone: by a declared rollback operation, itself approved."""

    statement: str
    """What the rollback does, shown to reviewers."""
    tool: str | None = None
    """Name of the tool that performs the rollback, when one exists in the release."""
    arguments: Callable[[dict[str, Any]], dict[str, Any]] | None = field(default=None, compare=False)
    """Maps the completed operation's arguments to the rollback operation's arguments."""


@dataclass(frozen=True)
class NoRollback:
    """An explicit statement that the effect cannot be undone, with the reason."""

    reason: str
    """Why no rollback exists (shown to reviewers, required to be non-empty)."""


__all__ = ["ApprovalClass", "NoRollback", "Rollback"]
