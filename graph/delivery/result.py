"""`Delivery`: what one delivery of an operation observed, as every caller of the executor sees it.

It is the one answer shared by the executor's claim path (`toolgate.graph.delivery.executor`), the run of
a claimed handler (`toolgate.graph.delivery.claimed_write`), the execute node and the operator commands.
It lives apart from all of them so the two halves of the executor can both build it without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

ClaimOutcome = Literal["ACQUIRED", "NOT_ACQUIRED", "NOT_ATTEMPTED"]


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """What one delivery of an operation observed."""

    operation_key: str
    status: str
    """Operation status after this delivery (authoritative, from the store)."""
    claim: ClaimOutcome
    """Whether this delivery won the claim."""
    duplicate: bool
    """True when the result came from the store, not from running the handler here."""
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    reason: str = ""


__all__ = ["ClaimOutcome", "Delivery"]
