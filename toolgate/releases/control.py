"""Release control: shadow, canary, promote and roll back a release, as an authenticated admin.

Every change is made by a person the caller authenticated (`toolgate.cli.common.person`) who
holds a role in `RELEASE_ROLES`, or by the automatic stop (the store's own records); it is one
store transaction over MAC-bound rows (`toolgate.store.rollout`) and one audit event
(``release.shadow_started``, ``release.canary_started``, ``release.promoted``,
``release.rolled_back``, ``release.stopped``). Every refusal changes nothing and is audited as
``release.refused`` with a stable code.

No candidate moves without evidence: shadow, canary and promote each refuse with the first
piece `toolgate.releases.evidence` finds missing (gate, review, rollback dry run, canary time).
Four eyes: the admin whose waiver is all that stands in for the sign-offs of a candidate's
critical cases may not shadow, canary or promote it (``own_waiver``); another admin may.

No candidate enters its shadow with a poor or silently broken contract: a tool failing the
schema-quality check (`toolgate.tools.schema.quality`) refuses it ``schema_quality``, and a tool
whose argument schema changed in a breaking way from the control's without the version bump it
needs (`toolgate.tools.schema.compat`) refuses it ``breaking_schema_change``.

Rollback restores the previous complete bundle (`toolgate.releases.rollback`) after checking its
hashes and critical fixtures; a dry run checks the same, changes no release state and records
its verdict as evidence (with no rollout under way, for the active release).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from typing import Any

from toolgate.errors import RegistryError, ReleaseControlError, StoreError
from toolgate.graph.bootstrap import App
from toolgate.policy.principal import Principal
from toolgate.releases.evidence import Binding, EvidenceDesk, Requirements
from toolgate.releases.loader import load_release
from toolgate.releases.rollback import (
    CriticalRunner,
    RollbackPlan,
    default_critical_runner,
    plan_dry_run,
    plan_rollback,
    record_dry_run,
    restored,
)
from toolgate.releases.rules import DEFAULT_CANARY_PERCENT, LIVE_PHASES, RELEASE_ROLES, percent_to_bp
from toolgate.store.audit import Auditor
from toolgate.store.evidence import Evidence
from toolgate.store.rollout import RolloutStore
from toolgate.store.rollout_records import ReleasePointer, ReleaseState, Rollout
from toolgate.tools.schema.compat import release_breaks
from toolgate.tools.schema.quality import release_quality


class ReleaseControl:
    """Release control of one configured release on one app's store."""

    def __init__(
        self,
        app: App,
        *,
        critical_runner: CriticalRunner | None = None,
        requirements: Requirements | None = None,
    ) -> None:
        assert app.gateways is not None and app.router is not None, "release control needs open_app's app"
        self.app, self.gateways, self.router = app, app.gateways, app.router
        self.configured = app.settings.release
        self.rollouts = RolloutStore(app.store)
        self.critical_runner = critical_runner or default_critical_runner
        self.evidence = EvidenceDesk(app.store, requirements)

    def state(self) -> ReleaseState:
        """The pointer and current rollout (refused when they do not verify)."""
        state = self.router.state()
        if state.tampered:
            raise ReleaseControlError(
                "release_state_tampered",
                f"release-control records do not verify ({', '.join(state.tampered)}); refusing to act on them",
            )
        return state

    def active(self, state: ReleaseState) -> str:
        """The release served to everyone outside a canary."""
        return state.pointer.active if state.pointer else self.configured

    def manifest_sha256(self, release_id: str) -> str:
        """Digest of the release's effective manifest, loaded now and verified against its
        reviewed manifest and the configured model (`ReleaseControlError` when it does not)."""
        try:
            return self.gateways.verify(release_id)
        except RegistryError as exc:
            raise ReleaseControlError("bundle_unverified", f"release {release_id}: {exc}") from exc

    def waive_review(self, actor: Principal, candidate: str, reason: str) -> Evidence:
        """Record ``actor``'s waiver of the sign-offs of ``candidate``'s exact bundle (audited)."""
        return self._act(
            actor,
            "waive_review",
            lambda: self.evidence.waive(actor, candidate, self.manifest_sha256(candidate), reason),
        )

    # ---- the doors ---------------------------------------------------------------------

    def _act(self, actor: Principal, action: str, run: Callable[[], Any]) -> Any:
        """Run one change for ``actor``; any refusal is audited with its code and re-raised."""
        try:
            if not actor.roles & RELEASE_ROLES:
                raise ReleaseControlError(
                    "missing_role", f"release control needs one of the roles {sorted(RELEASE_ROLES)}"
                )
            return run()
        except ReleaseControlError as exc:
            Auditor(self.app.store, self.configured).record(
                "release.refused",
                "refused",
                user_id=actor.user_id,
                code=exc.code,
                detail={"action": action, "message": str(exc)[:300]},
            )
            raise

    def _audit(
        self, event: str, result: str, actor: Principal | None, rollout: Rollout, **detail: Any
    ) -> None:
        Auditor(self.app.store, rollout.candidate).record(
            event,
            result,
            user_id=actor.user_id if actor else None,
            detail={"rollout_id": rollout.rollout_id, "control": rollout.control, **detail},
        )

    def shadow(self, actor: Principal, candidate: str) -> Rollout:
        """Start shadowing ``candidate`` against the active release."""

        def run() -> Rollout:
            state = self.state()
            if state.rollout is not None and state.rollout.phase in LIVE_PHASES:
                raise ReleaseControlError(
                    "rollout_active", f"{state.rollout.candidate} is already in {state.rollout.phase}"
                )
            control = self.active(state)
            if candidate == control:
                raise ReleaseControlError("same_release", f"{candidate} is the active release")
            control_sha, candidate_sha = self.manifest_sha256(control), self.manifest_sha256(candidate)
            if candidate_sha == control_sha:
                raise ReleaseControlError("same_release", f"{candidate} is the same bundle as {control}")
            self._check_contracts(control, candidate)
            self._require_evidence(actor, Binding(candidate, candidate_sha, control, control_sha))
            self._set_up(candidate)
            rollout = Rollout(
                rollout_id=RolloutStore.new_rollout_id(),
                configured=self.configured,
                control=control,
                control_sha256=control_sha,
                candidate=candidate,
                candidate_sha256=candidate_sha,
                phase="shadow",
                canary_bp=percent_to_bp(DEFAULT_CANARY_PERCENT),
                salt=secrets.token_hex(16),
                started_at="",  # both set by the store when the row is written
                started_seq=0,
                changed_by=actor.user_id,
            )

            def change(pointer: ReleasePointer | None, _: Rollout | None) -> tuple[Any, Any]:
                base = pointer or ReleasePointer(
                    configured=self.configured, active=control, active_sha256=control_sha
                )
                return dataclasses.replace(
                    base, active_sha256=control_sha, rollout_id=rollout.rollout_id
                ), rollout

            done = self._change(state, change)
            assert done.rollout is not None
            self._audit(
                "release.shadow_started", "started", actor, done.rollout, candidate_sha256=candidate_sha
            )
            return done.rollout

        return self._act(actor, "shadow", run)

    def canary(self, actor: Principal, candidate: str, percent: float = DEFAULT_CANARY_PERCENT) -> Rollout:
        """Route a cohort of ``percent`` % of users to ``candidate`` (after its shadow)."""

        def run() -> Rollout:
            try:
                canary_bp = percent_to_bp(percent)
            except ValueError as exc:
                raise ReleaseControlError("invalid_percent", str(exc)) from exc
            state = self.state()
            current = state.rollout
            if current is None or current.phase not in LIVE_PHASES:
                raise ReleaseControlError(
                    "shadow_required", f"shadow {candidate} first: release shadow {candidate}"
                )
            if current.candidate != candidate:
                raise ReleaseControlError("wrong_candidate", f"the rollout under way is {current.candidate}")
            self._still_evidenced(actor, current)
            done = self._change(
                state,
                lambda p, r: (
                    p,
                    dataclasses.replace(r, phase="canary", canary_bp=canary_bp, changed_by=actor.user_id),
                ),
            )
            assert done.rollout is not None
            self._audit("release.canary_started", "started", actor, done.rollout, canary_bp=canary_bp)
            return done.rollout

        return self._act(actor, "canary", run)

    def promote(self, actor: Principal) -> ReleaseState:
        """Make the canaried candidate the active release; the control becomes the rollback target."""

        def run() -> ReleaseState:
            state = self.state()
            current = state.rollout
            if current is None or current.phase != "canary":
                raise ReleaseControlError("canary_required", "only a release in canary can be promoted")
            reason = self.check(current)
            if reason:
                raise ReleaseControlError(
                    "automatic_stop", f"the candidate tripped the automatic stop: {reason}"
                )
            self._still_evidenced(actor, current)
            judged = self.router.signals(current, self.gateways(current.candidate, False)).calls_judged
            self.evidence.require_canary(judged, current.updated_at)

            def change(pointer: ReleasePointer | None, rollout: Rollout | None) -> tuple[Any, Any]:
                assert pointer is not None and rollout is not None
                moved = dataclasses.replace(
                    pointer,
                    active=rollout.candidate,
                    active_sha256=rollout.candidate_sha256,
                    previous=rollout.control,
                    previous_sha256=rollout.control_sha256,
                )
                return moved, dataclasses.replace(rollout, phase="promoted", changed_by=actor.user_id)

            done = self._change(state, change)
            assert done.rollout is not None
            self._audit("release.promoted", "promoted", actor, done.rollout)
            return done

        return self._act(actor, "promote", run)

    def _set_up(self, candidate: str) -> None:
        """Create ``candidate``'s own tables, as a process serving it would. Its setup is the
        release's code: whatever it raises refuses the shadow ``bundle_unverified``, audited."""
        release = load_release(candidate)
        if release.setup is None:
            return
        try:
            release.setup(self.app.store)
        except StoreError:
            raise
        except (Exception, SystemExit) as exc:
            raise ReleaseControlError(
                "bundle_unverified", f"release {candidate}: its setup raised {type(exc).__name__}: {exc}"
            ) from exc

    def _check_contracts(self, control: str, candidate: str) -> None:
        """Refuse a candidate whose tools fail the schema-quality check, or whose argument schemas
        break the control's without a version bump (both before any evidence is consulted)."""
        candidate_tools = self.gateways(candidate, False).registry.tools
        failing = [q for q in release_quality(candidate_tools.values()) if not q.passed]
        if failing:
            first = failing[0]
            raise ReleaseControlError(
                "schema_quality",
                f"{candidate}: {len(failing)} tool(s) fail the schema-quality check; "
                f"{first.name}: {first.problems[0]} (toolgate registry lint)",
            )
        control_tools = self.gateways(control, False).registry.tools
        breaks = release_breaks(
            {n: (s.version, s.contract.json_schema()) for n, s in control_tools.items()},
            {n: (s.version, s.contract.json_schema()) for n, s in candidate_tools.items()},
        )
        if breaks:
            raise ReleaseControlError(
                "breaking_schema_change",
                f"{candidate} changes a tool's schema in a breaking way without a major version bump: "
                + "; ".join(breaks[:3]),
            )

    def _still_evidenced(self, actor: Principal, rollout: Rollout) -> None:
        """Refuse when the candidate's bundle changed since its shadow began or its evidence was
        revoked since (a later failed gate or dry run, a new unsigned critical case)."""
        if self.manifest_sha256(rollout.candidate) != rollout.candidate_sha256:
            raise ReleaseControlError("hashes_changed", f"{rollout.candidate} changed since its shadow began")
        self._require_evidence(actor, Binding.of(rollout))

    def _require_evidence(self, actor: Principal, binding: Binding) -> None:
        """The candidate's evidence (`EvidenceDesk.require`), with four eyes on a waiver: when
        critical cases are unsigned and only ``actor``'s own waiver stands in for their sign-offs,
        ``actor`` may not move the candidate (``own_waiver``), as a requester may not approve their
        own call; another admin may, or ``actor`` once the cases are signed."""
        found = self.evidence.require(binding)
        if found.unsigned and found.waivers and all(w.recorded_by == actor.user_id for w in found.waivers):
            raise ReleaseControlError(
                "own_waiver",
                f"{actor.user_id} waived the review of {binding.candidate}'s critical cases"
                f" ({', '.join(found.unsigned[:5])}): another admin moves it, or a reviewer signs them",
            )

    def _change(self, state: ReleaseState, change: Any) -> ReleaseState:
        return self.rollouts.change(self.configured, state.pointer.version if state.pointer else 0, change)

    # ---- rollback ----------------------------------------------------------------------

    def plan_rollback(self) -> RollbackPlan:
        """Check the rollback target without changing anything."""
        return plan_rollback(self.state(), self.manifest_sha256, self.critical_runner)

    def dry_run(self, actor: Principal) -> RollbackPlan:
        """Check what a rollback restores and record the verdict as evidence (`plan_dry_run`)."""

        def run() -> RollbackPlan:
            state = self.state()
            plan = plan_dry_run(state, self.active(state), self.manifest_sha256, self.critical_runner)
            record_dry_run(self.app.store, self.configured, actor.user_id, plan)
            return plan

        return self._act(actor, "rollback_dry_run", run)

    def rollback(self, actor: Principal, *, dry_run: bool = False) -> RollbackPlan:
        """Restore the previous complete bundle (``dry_run``: only check it, `dry_run`)."""
        if dry_run:
            return self.dry_run(actor)

        def run() -> RollbackPlan:
            state = self.state()
            plan = self.plan_rollback()
            if plan.target is None:
                raise ReleaseControlError("nothing_to_roll_back", "no previous release to restore")
            if plan.problems:
                code, message = plan.problems[0]
                raise ReleaseControlError(code, f"rollback to {plan.target} refused: {message}")
            done = self._change(state, restored(plan, actor.user_id))
            assert done.rollout is not None
            self._audit(
                "release.rolled_back",
                "rolled_back",
                actor,
                done.rollout,
                target=plan.target,
                critical=plan.critical,
            )
            return plan

        return self._act(actor, "rollback", run)

    def check(self, rollout: Rollout) -> str:
        """Evaluate the automatic stop for a live rollout (stopping it when it trips)."""
        if rollout.phase not in LIVE_PHASES:
            return ""
        return self.router.check(rollout, self.gateways(rollout.candidate, False))


__all__ = ["CriticalRunner", "ReleaseControl", "RollbackPlan", "default_critical_runner"]
