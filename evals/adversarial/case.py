"""What an adversarial dispatch case is: the scripted calls, who makes them, and the outcome trusted
code must reach, plus the values every family of cases builds on.

Separate from the case data (the ``toolgate.evals.adversarial_*`` family modules) and from the
assembled suite (`toolgate.evals.adversarial.cases`) so that the runner and the tests, which only need
the shape of a case, do not load every hostile value, and each family can import the shape
without importing the suite that imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ACCEPTED = "ACCEPTED"
PROPOSAL_CREATED = "PROPOSAL_CREATED"
MB = 1024 * 1024

REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
"""A valid refund of ada's own order; cases change one field of it to make it hostile."""


@dataclass(frozen=True)
class Call:
    """One model tool call; ``raw`` set means an unparseable ``invalid_tool_call``."""

    name: str
    args: Any = None
    raw: str | None = None
    call_id: str | None = None
    """The id the model gives the call (default: ``call_t<turn>_<index>``)."""


@dataclass(frozen=True)
class AdversarialCase:
    """One case: who asks, what the model emits, and what must happen to the last call."""

    name: str
    category: str
    expected: str
    calls: tuple[Call, ...]
    user: str = "cust-ada"
    before: tuple[tuple[Call, ...], ...] = ()
    """Earlier model turns (e.g. a read whose output carries an injection)."""
    seed_tag: str = ""
    """Label used for the summary line (known_read, unknown_tool, ...)."""
    rate_limit: int | None = None
    """Per principal-and-tool limit for this case (None: no inbound limits)."""
    max_tool_calls: int | None = None
    """The thread's tool-call budget for this case (None: the operator default)."""
    retired_tool: str | None = None
    """A tool whose deprecation window ended before this case runs (its spec, in this case's
    registry only, was deprecated two days ago for one day)."""
    file_tool: bool = False
    """This case's registry also holds ``read_runbook``, a read confined to a temporary root
    (`toolgate.evals.adversarial.files`)."""
    options: dict[str, Any] = field(default_factory=dict)


__all__ = ["ACCEPTED", "MB", "PROPOSAL_CREATED", "REFUND", "AdversarialCase", "Call"]
