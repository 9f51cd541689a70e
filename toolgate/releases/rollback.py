"""What a rollback restores, and the checks it must pass first (writes nothing).

The target is the complete bundle that served before the candidate: the rollout's control while
the candidate is in shadow, canary or stopped, the pointer's previous release after a promotion.
Before anything moves, the target is loaded by id afresh and must match its reviewed manifest
and the manifest digest recorded while it was active (so old policy never runs with new handlers),
and its critical fixtures must pass (`toolgate.evals.gate.run_critical`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgate.errors import RegistryError, ReleaseControlError
from toolgate.releases.rules import LIVE_PHASES
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.evidence import record
from toolgate.store.rollout import Change
from toolgate.store.rollout_records import ReleasePointer, ReleaseState, Rollout

CriticalRunner = Callable[[str], Any]
"""Runs a release's critical fixtures; returns ``passed``, ``total``, ``failed`` and ``ok``."""


def default_critical_runner(release_id: str) -> Any:
    """The evaluation gate's critical fixtures (`toolgate.evals.gate.run_critical`), imported when
    needed so release control works (and refuses rollbacks) where the gate is not installed."""
    from toolgate.evals.gate import run_critical

    return run_critical(release_id)


def failures(result: Any) -> str:
    """The failed critical cases of ``result`` (at most 10), each with its first reasons when the
    runner gives them (`toolgate.evals.gate.CriticalResult.reasons`): an operator refused a
    rollback reads what broke, not only which case."""
    reasons: Mapping[str, Sequence[str]] = getattr(result, "reasons", None) or {}
    return ", ".join(
        f"{case} ({'; '.join(reasons[case][:2])})" if reasons.get(case) else case for case in result.failed[:10]
    )


@dataclass(frozen=True, kw_only=True)
class RollbackPlan:
    """What a rollback would restore, and whether it may."""

    source: str | None = None
    """The release being rolled back (the candidate, or the promoted release)."""
    target: str | None = None
    """The complete bundle restored (None: there is nothing to roll back to)."""
    target_sha256: str | None = None
    """The target's verified manifest digest (None: it did not verify)."""
    hashes: str = "not_checked"
    """``verified``, ``changed`` (differs from the recorded bundle) or ``unverified`` (does not
    load or does not match its reviewed manifest)."""
    critical: str = "not_run"
    """``passed/total`` of the target's critical fixtures (``unavailable`` without the gate)."""
    problems: list[tuple[str, str]] = field(default_factory=list)
    """``(code, message)`` of every failed check."""

    @property
    def status(self) -> str:
        """``PASS``, ``FAIL`` or ``not_applicable``."""
        if self.target is None:
            return "not_applicable"
        return "FAIL" if self.problems else "PASS"


def rollback_target(state: ReleaseState) -> tuple[str, str, str] | None:
    """``(source, target, digest recorded for the target)``, or None when nothing can be restored."""
    rollout, pointer = state.rollout, state.pointer
    if rollout is not None and rollout.phase in (*LIVE_PHASES, "stopped"):
        return rollout.candidate, rollout.control, rollout.control_sha256
    if rollout is not None and rollout.phase == "promoted" and pointer is not None and pointer.previous:
        return pointer.active, pointer.previous, pointer.previous_sha256 or ""
    return None


def plan_rollback(
    state: ReleaseState, manifest_sha256: Callable[[str], str], critical_runner: CriticalRunner
) -> RollbackPlan:
    """Run every check of a rollback from ``state`` (``manifest_sha256`` loads and verifies a
    bundle, raising `ReleaseControlError`); nothing is written."""
    found = rollback_target(state)
    if found is None:
        return RollbackPlan()
    return check_target(*found, manifest_sha256, critical_runner)


def plan_readiness(
    active: str, recorded: str | None, manifest_sha256: Callable[[str], str], critical_runner: CriticalRunner
) -> RollbackPlan:
    """The same checks for the active release, before any candidate is rolled out: it is what a
    rollback of the next candidate restores (``recorded``: the digest the pointer holds for it,
    None before the pointer exists, when only its reviewed manifest binds it)."""
    return check_target(None, active, recorded, manifest_sha256, critical_runner)


def plan_dry_run(
    state: ReleaseState, active: str, manifest_sha256: Callable[[str], str], critical_runner: CriticalRunner
) -> RollbackPlan:
    """What a dry run checks: the rollback target of the rollout under way or, with none, the
    active release (`plan_readiness`)."""
    plan = plan_rollback(state, manifest_sha256, critical_runner)
    if plan.target is not None:
        return plan
    recorded = state.pointer.active_sha256 if state.pointer else None
    return plan_readiness(active, recorded, manifest_sha256, critical_runner)


def restored(plan: RollbackPlan, user_id: str) -> Change:
    """The release-control change of a planned rollback: a promoted candidate's pointer moves back
    to the verified previous bundle (the one planned); the rollout ends ``rolled_back``."""

    def change(pointer: ReleasePointer | None, rollout: Rollout | None) -> tuple[Any, Any]:
        assert pointer is not None and rollout is not None
        if rollout.phase == "promoted":
            target, target_sha = pointer.previous, pointer.previous_sha256
            assert target is not None and target == plan.target and target_sha  # same version as planned
            pointer = dataclasses.replace(
                pointer, active=target, active_sha256=target_sha, previous=None, previous_sha256=None
            )
        rolled = dataclasses.replace(
            rollout, phase="rolled_back", stop_reason=f"rolled back by {user_id}", changed_by=user_id
        )
        return pointer, rolled

    return change


def check_target(
    source: str | None,
    target: str,
    recorded: str | None,
    manifest_sha256: Callable[[str], str],
    critical_runner: CriticalRunner,
) -> RollbackPlan:
    """Load ``target`` afresh, compare it with ``recorded`` and run its critical fixtures (not
    for a target that does not load: it is refused with the loader's code, and a bundle the
    fixtures' runner cannot load is ``critical_unavailable``, never an unaudited crash)."""
    problems: list[tuple[str, str]] = []
    digest: str | None = None
    try:
        digest = manifest_sha256(target)
        hashes = "verified" if recorded is None or digest == recorded else "changed"
        if hashes == "changed":
            problems.append(
                ("hashes_changed", f"{target} differs from the bundle recorded while it was active")
            )
    except ReleaseControlError as exc:
        hashes = "unverified"
        problems.append((exc.code, str(exc)))
    critical = "not_run"  # a target that does not load has no fixtures to run: refused above
    try:
        if hashes != "unverified":
            result = critical_runner(target)
            critical = f"{result.passed}/{result.total}"
            if not result.ok:
                problems.append(("critical_failed", f"critical fixtures failed: {failures(result)}"))
    except (ImportError, RegistryError) as exc:
        critical = "unavailable"
        problems.append(("critical_unavailable", f"the critical fixtures cannot run: {exc}"))
    return RollbackPlan(
        source=source,
        target=target,
        target_sha256=digest if hashes == "verified" else None,
        hashes=hashes,
        critical=critical,
        problems=problems,
    )


DRY_RUN_RECORDED = "release.rollback_dry_run_recorded"
"""The audit event, filed under the target, that follows each dry-run row kept: the rows of a
target are counted against these (`toolgate.store.evidence.lost_rows`), so deleting the newest
row (a FAIL, which revokes the PASS before it) is seen."""


def record_dry_run(store: Store, configured: str, user_id: str, plan: RollbackPlan) -> None:
    """Keep a dry run's verdict as release evidence bound to the target's verified digest (a
    target that did not verify has no digest to bind and stays without evidence), then audit it:
    ``release.rollback_checked`` under the configured release, and for a kept row
    `DRY_RUN_RECORDED` under the target, naming the row."""
    if plan.target is not None and plan.target_sha256 is not None:
        kept = record(
            store,
            "rollback_dry_run",
            release=plan.target,
            manifest_sha256=plan.target_sha256,
            verdict=plan.status,
            recorded_by=user_id,
            detail={"hashes": plan.hashes, "critical": plan.critical, "problems": plan.problems[:5]},
        )
        Auditor(store, plan.target).record(
            DRY_RUN_RECORDED,
            plan.status.lower(),
            user_id=user_id,
            detail={"evidence_id": kept.evidence_id, "seq": kept.seq},
        )
    Auditor(store, configured).record(
        "release.rollback_checked",
        plan.status.lower(),
        user_id=user_id,
        detail={
            "target": plan.target,
            "target_sha256": plan.target_sha256,
            "hashes": plan.hashes,
            "critical": plan.critical,
            "problems": [code for code, _ in plan.problems],
        },
    )


__all__ = [
    "DRY_RUN_RECORDED",
    "CriticalRunner",
    "RollbackPlan",
    "check_target",
    "default_critical_runner",
    "plan_dry_run",
    "plan_readiness",
    "plan_rollback",
    "record_dry_run",
    "restored",
    "rollback_target",
]
