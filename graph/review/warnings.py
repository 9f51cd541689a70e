"""Warnings a reviewer sees before approving: what would go wrong if this ran now.

An approved refund that then fails at execution ("refund exceeds the unrefunded amount") should
have been flagged before anyone approved it. Two warnings, both advisory (a reviewer still decides,
and execution still checks for itself):

- the tool's own ``semantic_check``, run now on the stored arguments as the requester (the order
  may have been refunded since the proposal was made). It is loaded code: it runs through
  `toolgate.tools.loaded_code.lookup`, and when it fails the warning says it could not be
  checked, never raises; what it says is redacted;
- other proposals for the same resource still pending, approved or running
  (`toolgate.graph.review.related`). When the tool's review facts carry ``remaining_cents`` and
  the arguments ``amount_cents`` (the demo refund's shape), the warning also says whether together
  they ask for more than remains.

Only a proposal that may still run is checked (pending approval or approved): for a finished one
the check would describe the world after its own effect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from toolgate.graph.review.related import Related, resources_of
from toolgate.policy.authority import CheckUnanswered, semantic_problem
from toolgate.policy.output import redact_text
from toolgate.store.records import ProposalRecord
from toolgate.tools.registry import Registry
from toolgate.tools.spec import HandlerContext

CHECKED_STATUSES: frozenset[str] = frozenset({"pending_approval", "approved"})
"""Statuses of the proposal being decided for which the warnings are computed."""

UNCHECKED = "could not be checked"

WarningKind = Literal["semantic_check", "check_unavailable", "same_resource", "exceeds_remaining"]


@dataclass(frozen=True, kw_only=True)
class ReviewWarning:
    """One thing a reviewer should weigh before approving."""

    kind: WarningKind
    """What raised it (closed set: the console may style each)."""
    message: str
    """What it says, redacted, for a person."""

    def view(self) -> dict[str, str]:
        """As the API shows it."""
        return {"kind": self.kind, "message": self.message}


def semantic_warning(registry: Registry, proposal: ProposalRecord) -> ReviewWarning | None:
    """The tool's semantic check of the stored arguments, as the requester, now (None: it passes
    or the tool has none)."""
    spec = registry.get_for(proposal.tool, proposal.tenant_id)
    if spec is None or spec.semantic_check is None:
        return None
    try:
        problem = semantic_problem(
            spec, proposal.arguments, HandlerContext(tenant_id=proposal.tenant_id, user_id=proposal.requester_id)
        )
    except CheckUnanswered as exc:  # logged redacted, never shown raw
        why = ": it did not answer in time" if exc.timed_out else " (see the server log)"
        message = f"The tool's own check {UNCHECKED}{why}. Do not approve blind."
        return ReviewWarning(kind="check_unavailable", message=message)
    if problem is None:
        return None
    return ReviewWarning(
        kind="semantic_check", message="If approved now, execution would be refused: " + redact_text(problem)[:300]
    )


def _cents(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def same_resource_warnings(
    registry: Registry, proposal: ProposalRecord, related: Sequence[Related], facts: dict[str, Any] | None
) -> list[ReviewWarning]:
    """Warnings about the other live proposals on this proposal's resources."""
    active = [r for r in related if r.active]
    if not active:
        return []
    kinds = sorted({f"{kind} {rid}" for r in active for kind, rid in r.resources}) or [
        f"{kind} {rid}" for kind, rid in resources_of(registry, proposal)
    ]
    n = len(active)
    out = [
        ReviewWarning(
            kind="same_resource",
            message=(
                f"{n} other {proposal.tool} proposal{'s' if n != 1 else ''} for {', '.join(kinds)}"
                f" {'is' if n == 1 else 'are'} pending or approved (listed below)."
            ),
        )
    ]
    remaining = _cents((facts or {}).get("remaining_cents"))
    amounts = [_cents(proposal.arguments.get("amount_cents"))] + [
        _cents(r.proposal.arguments.get("amount_cents")) for r in active
    ]
    if remaining is not None and all(a is not None for a in amounts):
        total = sum(a for a in amounts if a is not None)
        if total > remaining:
            out.append(
                ReviewWarning(
                    kind="exceeds_remaining",
                    message=(
                        f"Together with this one they ask for {total} cents; only {remaining} cents"
                        " remain. Approving all of them would fail at execution."
                    ),
                )
            )
    return out


def review_warnings(
    registry: Registry,
    proposal: ProposalRecord,
    status: str,
    related: Sequence[Related],
    facts: dict[str, Any] | None,
) -> list[ReviewWarning]:
    """Every warning for ``proposal`` (in ``status``), given its related proposals and its facts."""
    if status not in CHECKED_STATUSES:
        return []
    found = semantic_warning(registry, proposal)
    return [*([found] if found else []), *same_resource_warnings(registry, proposal, related, facts)]


__all__ = [
    "CHECKED_STATUSES",
    "UNCHECKED",
    "ReviewWarning",
    "WarningKind",
    "review_warnings",
    "same_resource_warnings",
    "semantic_warning",
]
