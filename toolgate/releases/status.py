"""``toolgate release status``: where a rollout stands, as one ``key=value`` line.

The numbers come from the store's own records since the rollout began (`candidate_signals`):
shadowed calls from the shadow table, bypasses, duplicates and ambiguous operations from the
candidate's audit events, proposals and operations. ``p95_latency_ms`` is the 95th percentile
(nearest rank) of the candidate's write handlers, from each operation's ``handler.started`` to
its ``handler.finished`` audit event, both stamped by the store's clock
(``latency_basis=handler_audit``; ``n/a`` before any write ran). Reading the status also
evaluates the automatic stop of a live rollout, so a tripped candidate stops here at the latest.
Records that do not verify are named (``tamper=pointer_replayed,rollout_replayed``: older rows
copied back over the latest audited versions; ``pointer``, ``rollout``: MACs that do not verify).
"""

from __future__ import annotations

from toolgate.errors import ReleaseControlError
from toolgate.releases.control import ReleaseControl
from toolgate.releases.rollback import rollback_target
from toolgate.releases.rules import LIVE_PHASES, bp_to_percent, p95
from toolgate.releases.signals import handler_latencies_ms


def _canary_percent(phase: str, canary_bp: int) -> str:
    if phase == "canary":
        return bp_to_percent(canary_bp)
    return "100" if phase == "promoted" else "0"


def release_status(control: ReleaseControl, *, verify_rollback: bool = False) -> dict[str, str]:
    """The facts of the configured release's rollout (and, with ``verify_rollback``, a dry run of
    its rollback), in the order printed."""
    try:
        state = control.state()
    except ReleaseControlError as exc:
        tampered = control.router.state().tampered
        return {
            "release": control.configured,
            "state": "tampered",
            "error": exc.code,
            "tamper": ",".join(tampered) or "unknown",
        }
    rollout = state.rollout
    active = control.active(state)
    facts = {"release": rollout.candidate if rollout else active, "active": active, "state": "verified"}
    if rollout is None:
        facts.update(phase="none", canary_percent="0", shadow_calls="0", automatic_stop="not_applicable")
        facts["rollback_release"] = (
            state.pointer.previous if state.pointer and state.pointer.previous else "none"
        )
    else:
        reason = control.check(rollout) if rollout.phase in LIVE_PHASES else ""
        if reason:
            state = control.state()
            assert state.rollout is not None
            rollout = state.rollout
        candidate = control.gateways(rollout.candidate, False)
        signals = control.router.signals(rollout, candidate)
        _, shadow_calls, mismatched = control.rollouts.shadow_totals(rollout.rollout_id)
        latency = p95(handler_latencies_ms(control.app.store, rollout.candidate, rollout.started_seq))
        if rollout.phase in LIVE_PHASES:
            stop = "armed"
        elif rollout.phase == "stopped" and rollout.changed_by == "automatic":
            stop = "tripped"
        else:
            stop = "disarmed"
        plan = control.plan_rollback() if verify_rollback else None
        facts.update(
            phase=rollout.phase,
            control=rollout.control,
            canary_percent=_canary_percent(rollout.phase, rollout.canary_bp),
            shadow_calls=str(shadow_calls),
            shadow_mismatches=str(mismatched),
            approval_bypasses=str(signals.approval_bypasses),
            duplicate_effects=str(signals.duplicate_effects),
            ambiguous_operations=str(signals.ambiguous_operations),
            unknown_tools=str(signals.unknown_tools),
            cross_tenant_denials=str(signals.cross_tenant_denials),
            loop_budget_breaches=str(signals.loop_budget_breaches),
            audit_chain="verified" if not signals.audit_gap else "broken",
            p95_latency_ms=f"{latency:.0f}" if latency is not None else "n/a",
            latency_basis="handler_audit",
            rollback_release=target[1] if (target := rollback_target(state)) else "none",
            automatic_stop=stop,
        )
        if rollout.stop_reason:
            facts["stop_reason"] = "_".join(rollout.stop_reason.split())
        if plan is not None:
            facts.update(
                rollback_dry_run=plan.status,
                rollback_hashes=plan.hashes,
                critical=plan.critical,
            )
            if plan.problems:
                facts["rollback_refused"] = plan.problems[0][0]
        return facts
    if verify_rollback:
        facts["rollback_dry_run"] = "not_applicable"
    return facts


__all__ = ["release_status"]
