"""Decisions are values: allow, require approval, or deny with a stable code and reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from toolgate.errors import RejectionCode


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """A refused tool call: stable code, bounded message for the model, whether retrying can help."""

    code: RejectionCode
    """Member of the closed rejection set."""
    message: str
    """What the model may be told; bounded, never echoes secrets or raw untrusted text at length."""
    retryable: bool
    """True only when a different, valid call could succeed (e.g. fixed arguments)."""
    rule_id: str | None = None
    """Policy rule that decided, when one did."""
    suggestion: str | None = None
    """A concrete fix where one exists (e.g. "did you mean 'lookup_order'?")."""


@dataclass(frozen=True, kw_only=True)
class Decision:
    """Outcome of policy for an authorized, valid call."""

    kind: Literal["allow", "require_approval", "deny"]
    """allow runs a read; require_approval makes a proposal; deny refuses."""
    rule_id: str | None = None
    """Rule that decided (None when no rule matched)."""
    rejection: Rejection | None = None
    """Set when ``kind == 'deny'``."""

    @classmethod
    def allow(cls) -> Decision:
        """Run it (reads)."""
        return cls(kind="allow")

    @classmethod
    def require_approval(cls, rule_id: str | None = None) -> Decision:
        """Create a proposal and wait for review (writes)."""
        return cls(kind="require_approval", rule_id=rule_id)

    @classmethod
    def deny(cls, rejection: Rejection) -> Decision:
        """Refuse with a stable code."""
        return cls(kind="deny", rule_id=rejection.rule_id, rejection=rejection)


__all__ = ["Decision", "Rejection"]
