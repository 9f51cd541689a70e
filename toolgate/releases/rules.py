"""Release rollout rules: who is in the canary, which tools a canary may expose, when to stop.

Pure functions and values, no I/O: the store keeps the rollout's records
(`toolgate.store.rollout`), the graph routes threads by them (`toolgate.graph.rollout.router`), and
`toolgate.releases.control` runs the operator's commands. Everything here is decided from those
records and the authenticated principal, never from checkpointed state or model output.

Cohort: a stable hash of the rollout's salt, the tenant and the user picks a bucket in
``[0, 10000)``; the user is in the canary when the bucket is below ``percent * 100``. The same
user lands in the same arm on every request of that rollout, on every process and host.

High-risk tools stay out of the candidate arm until promotion (`high_risk`): a tool whose risk is
``danger`` or whose writes need two reviewers. The candidate arm's registry simply does not hold
them, so its model never sees them and a call naming one is refused as ``unknown_tool``: nothing
routes a high-risk call anywhere else behind the user's back.

Automatic stop (`stop_reason`): the candidate's signals since the rollout started, each against
a documented threshold in `StopThresholds`. Any approval bypass, duplicate effect, ambiguous
operation or audit gap stops at once; unknown-tool and cross-tenant denials stop on a spike; loop
and budget breaches stop past a small count.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from toolgate.tools.spec import ToolSpec

BUCKETS = 10_000
"""Cohort buckets: a percentage maps to ``percent * 100`` of them (0.01 % resolution)."""
DEFAULT_CANARY_PERCENT = 2.0
"""Default canary share: eligible traffic routed to the candidate after shadow, small to limit harm."""
RELEASE_ROLES = frozenset({"admin"})
"""Roles that may change release control (shadow, canary, promote, rollback). Release control is
process-wide, not per tenant: grant ``admin`` only to operators of the deployment."""

Phase = Literal["shadow", "canary", "promoted", "stopped", "rolled_back"]
"""Where a rollout stands. ``shadow``: the candidate judges copies of control turns, nothing runs;
``canary``: a cohort is served by the candidate; ``promoted``: the candidate is the active
release; ``stopped``: the candidate serves nobody (automatic stop or an operator's rollback
before promotion); ``rolled_back``: the previous bundle was restored."""
LIVE_PHASES: frozenset[str] = frozenset({"shadow", "canary"})
"""Phases in which a rollout is under way (a new one cannot start)."""
Arm = Literal["control", "candidate"]


def cohort_bucket(salt: str, tenant_id: str, user_id: str) -> int:
    """The user's bucket in ``[0, BUCKETS)``: SHA-256 over the salt, tenant and user, so it is the
    same on every process and cannot be steered without knowing the rollout's salt."""
    material = "\x1f".join((salt, tenant_id, user_id)).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(material).digest()[:8], "big") % BUCKETS


def in_canary(bucket: int, canary_bp: int) -> bool:
    """True when ``bucket`` falls inside a canary of ``canary_bp`` basis points (1 % = 100)."""
    return bucket < canary_bp


def arm_for(salt: str, canary_bp: int, tenant_id: str, user_id: str) -> Arm:
    """The arm of an authenticated user in a canary of ``canary_bp`` basis points."""
    return "candidate" if in_canary(cohort_bucket(salt, tenant_id, user_id), canary_bp) else "control"


def percent_to_bp(percent: float) -> int:
    """A canary percentage as basis points; `ValueError` outside ``(0, 100]`` or finer than 0.01
    (a share so small it rounds to no basis point at all included: a canary of no one)."""
    if not 0 < percent <= 100:
        raise ValueError(f"canary percent must be in (0, 100], not {percent}")
    bp = round(percent * 100)
    if bp < 1 or abs(bp - percent * 100) > 1e-6:
        raise ValueError(f"canary percent {percent} is finer than 0.01")
    return bp


def bp_to_percent(canary_bp: int) -> str:
    """Basis points as the percentage people typed (``2``, ``0.5``)."""
    return f"{canary_bp / 100:g}"


def high_risk(spec: ToolSpec) -> bool:
    """Kept out of the candidate arm until promotion: ``danger`` tools and two-person writes."""
    return spec.risk == "danger" or spec.approval.kind == "two_person"


def canary_specs(specs: Iterable[ToolSpec]) -> list[ToolSpec]:
    """The tools a candidate arm may hold: every tool that is not `high_risk`."""
    return [spec for spec in specs if not high_risk(spec)]


@dataclass(frozen=True, kw_only=True)
class Signals:
    """What the candidate did since its rollout started (audit events carrying its release,
    its proposals and operations)."""

    calls_judged: int = 0
    """Tool calls the candidate's dispatch accepted or refused."""
    unknown_tools: int = 0
    """Calls refused as ``unknown_tool``."""
    cross_tenant_denials: int = 0
    """Calls refused as ``cross_tenant`` or ``not_owner`` (dispatch or execute)."""
    loop_budget_breaches: int = 0
    """Calls refused as ``loop_detected`` or ``budget_exhausted``."""
    approval_bypasses: int = 0
    """Write handlers started without decisions that satisfy the tool's approval class."""
    duplicate_effects: int = 0
    """Operation keys whose effect was recorded as completed more than once."""
    ambiguous_operations: int = 0
    """Candidate operations whose outcome is ``unknown`` or ``dead_lettered``."""
    audit_gap: str = ""
    """Why the audit chain since the rollout started does not verify ("" when it does)."""


@dataclass(frozen=True, kw_only=True)
class StopThresholds:
    """When the candidate stops. Counts are totals since the rollout started; a "spike" must pass
    both a minimum count (so one stray call never stops a rollout) and a share of judged calls."""

    approval_bypasses: int = 0
    """Stop when more than this many bypasses happened: any bypass stops."""
    duplicate_effects: int = 0
    """Stop on any duplicate effect."""
    ambiguous_operations: int = 0
    """Stop on any unknown or dead-lettered operation (never redeliver while ambiguous)."""
    unknown_tool_min: int = 3
    """An unknown-tool spike needs more than this many refusals ..."""
    unknown_tool_share: float = 0.10
    """... and more than this share of the judged calls."""
    cross_tenant_min: int = 3
    """A cross-tenant (or another user's resource) denial spike needs more than this many ..."""
    cross_tenant_share: float = 0.10
    """... and more than this share of the judged calls."""
    loop_budget_breaches: int = 2
    """Stop when more than this many calls hit the loop detector or an exhausted budget."""


DEFAULT_THRESHOLDS = StopThresholds()


def _spike(count: int, total: int, minimum: int, share: float) -> bool:
    return count > minimum and count > share * max(total, 1)


def stop_reason(signals: Signals, thresholds: StopThresholds = DEFAULT_THRESHOLDS) -> str:
    """The first tripped stop condition as ``code:numbers`` with no spaces, e.g.
    ``duplicate_effect:1`` or ``unknown_tool_spike:5/20`` ("" when none)."""
    t = thresholds
    if signals.audit_gap:
        return "audit_gap:" + "_".join(signals.audit_gap.split())
    if signals.approval_bypasses > t.approval_bypasses:
        return f"approval_bypass:{signals.approval_bypasses}"
    if signals.duplicate_effects > t.duplicate_effects:
        return f"duplicate_effect:{signals.duplicate_effects}"
    if signals.ambiguous_operations > t.ambiguous_operations:
        return f"ambiguous_operation:{signals.ambiguous_operations}"
    if _spike(signals.cross_tenant_denials, signals.calls_judged, t.cross_tenant_min, t.cross_tenant_share):
        return f"cross_tenant_spike:{signals.cross_tenant_denials}/{signals.calls_judged}"
    if _spike(signals.unknown_tools, signals.calls_judged, t.unknown_tool_min, t.unknown_tool_share):
        return f"unknown_tool_spike:{signals.unknown_tools}/{signals.calls_judged}"
    if signals.loop_budget_breaches > t.loop_budget_breaches:
        return f"loop_budget_breach:{signals.loop_budget_breaches}"
    return ""


def p95(values: Iterable[float]) -> float | None:
    """Nearest-rank 95th percentile (None for no values)."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, -(-95 * len(ordered) // 100))
    return ordered[rank - 1]


__all__ = [
    "BUCKETS",
    "DEFAULT_CANARY_PERCENT",
    "DEFAULT_THRESHOLDS",
    "LIVE_PHASES",
    "RELEASE_ROLES",
    "Arm",
    "Phase",
    "Signals",
    "StopThresholds",
    "arm_for",
    "bp_to_percent",
    "canary_specs",
    "cohort_bucket",
    "high_risk",
    "in_canary",
    "p95",
    "percent_to_bp",
    "stop_reason",
]
