"""What a rollback restores, and the checks it must pass first (writes nothing).

The target is the complete bundle that served before the candidate: the rollout's control while
the candidate is in shadow, canary or stopped, the pointer's previous release after a promotion.
Before anything moves, the target is loaded by id afresh and must match its reviewed manifest
and the manifest digest recorded while it was active (so old policy never runs with new handlers),
and its critical fixtures must pass (`toolgate.evals.gate.run_critical`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolgate.errors import ReleaseControlError
from toolgate.policy.rollout import LIVE_PHASES
from toolgate.store.rollout_records import ReleaseState

CriticalRunner = Callable[[str], Any]
"""Runs a release's critical fixtures; returns ``passed``, ``total``, ``failed`` and ``ok``."""


def default_critical_runner(release_id: str) -> Any:
    """The evaluation gate's critical fixtures (`toolgate.evals.gate.run_critical`), imported when
    needed so release control works (and refuses rollbacks) where the gate is not installed."""
    from toolgate.evals.gate import run_critical

    return run_critical(release_id)


@dataclass(frozen=True, kw_only=True)
class RollbackPlan:
    """What a rollback would restore, and whether it may."""

    source: str | None = None
    """The release being rolled back (the candidate, or the promoted release)."""
    target: str | None = None
    """The complete bundle restored (None: there is nothing to roll back to)."""
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
    source, target, recorded = found
    problems: list[tuple[str, str]] = []
    try:
        hashes = "verified" if manifest_sha256(target) == recorded else "changed"
        if hashes == "changed":
            problems.append(
                ("hashes_changed", f"{target} differs from the bundle recorded while it was active")
            )
    except ReleaseControlError as exc:
        hashes = "unverified"
        problems.append((exc.code, str(exc)))
    try:
        result = critical_runner(target)
        critical = f"{result.passed}/{result.total}"
        if not result.ok:
            problems.append(("critical_failed", f"critical fixtures failed: {', '.join(result.failed[:10])}"))
    except ImportError as exc:
        critical = "unavailable"
        problems.append(("critical_unavailable", f"the critical fixtures cannot run: {exc}"))
    return RollbackPlan(source=source, target=target, hashes=hashes, critical=critical, problems=problems)


__all__ = ["CriticalRunner", "RollbackPlan", "default_critical_runner", "plan_rollback", "rollback_target"]
