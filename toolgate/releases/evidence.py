"""The evidence a candidate release needs before it may serve anyone: a passed gate, sign-offs,
a passed rollback dry run and, to be promoted, a long enough canary.

Shadow, canary and promote (`toolgate.releases.control`) ask `missing_evidence` and refuse with its
first code. Each piece is a row of `toolgate.store.evidence`, bound to exact bundles, never to
release ids:

- ``gate``: written by ``toolgate evals run`` for the candidate's effective manifest digest, the
  control's, and the dataset's digest. Its verdict covers every gate check but review; the
  critical cases it ran (id and tenant) are kept so review can be checked later. Only a run of the
  whole required dataset counts (not ``--critical-only``, not another dataset file), and only one
  with the dataset's scripted turns (``detail.model`` ``scripted``, or absent on rows written
  before live models could be scored) that also ran the cases derived from both releases'
  declarations (``detail.derived``, their number; `toolgate.evals.derived_cases`): a run with a
  live model (``--model``) or without the derived cases (``--no-derived``, or any row written
  before the gate derived them, a weaker gate than today's) is kept for the record but neither
  passes nor revokes anything. A live model's answers are not reproducible from the bundle and
  the dataset (a provider changes a model behind its name, and samples); a gate without the
  derived cases never asked whether the candidate loosened what no dataset case touches.
- review: every one of those critical cases signed off (`toolgate.evals.signoff.reviewed_cases`,
  re-read when asked, so a reviewer who lost the role no longer counts), or a ``review_waiver``
  an admin recorded for that candidate digest with a reason (`record_waiver`, audited). A waiver
  stands in for sign-offs only for another admin: release control refuses the waiver's author
  moving that candidate ``own_waiver`` (`Found.unsigned`, `Found.waivers`).
- ``rollback_dry_run``: written by ``toolgate release rollback --dry-run`` for the bundle a
  rollback would restore (the control), with whether its hashes and critical fixtures passed.

The newest row of a binding is its verdict: a FAIL recorded after a PASS revokes it, also during
a rollout. A row whose MAC does not verify is never counted and refuses the move
(``evidence_tampered``), and so does a deleted row (`toolgate.store.evidence.lost_rows`: a number
left out of the rows, or fewer gate rows of the candidate, or dry-run rows of the control, than
the audit chain's ``release.gate_recorded`` / ``release.rollback_dry_run_recorded`` events for
it), since deleting a FAIL would bring back the PASS before it. What is required (the dataset,
the canary's minimum calls and minutes) is the operator's setting (`Requirements.from_settings`),
never the candidate's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from toolgate.clock import parse_iso
from toolgate.errors import ReleaseControlError
from toolgate.policy.principal import Principal
from toolgate.releases.rollback import DRY_RUN_RECORDED
from toolgate.settings import read_settings
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.evidence import Evidence, Kind, evidence_rows, lost_rows, record
from toolgate.store.rollout_records import Rollout

GATE_RECORDED = "release.gate_recorded"
"""The audit event ``toolgate evals run`` appends after each gate row it keeps, naming the row."""
SCRIPTED_GATE = "scripted"
"""The model of the gate runs release control counts (`toolgate.evals.fixtures.SCRIPTED`)."""
MIN_WAIVER_REASON = 12
"""Characters a review waiver's reason needs at least: a sentence, not a keystroke."""


@dataclass(frozen=True)
class Requirements:
    """What shadow, canary and promote demand (the operator's settings, never a release's)."""

    dataset_sha256: str
    """Digest of the dataset the gate must have run whole."""
    canary_min_calls: int = 20
    """Calls the candidate must have judged in its canary before promotion."""
    canary_min_minutes: float = 60.0
    """Minutes the canary must have run (the store's clock) before promotion."""

    @classmethod
    def from_settings(cls) -> Requirements:
        """``TOOLGATE_GATE_DATASET`` (default: the packaged dataset), ``TOOLGATE_CANARY_MIN_CALLS``
        and ``TOOLGATE_CANARY_MIN_MINUTES``, read now."""
        values = read_settings()
        try:
            from toolgate.evals.fixtures import DEFAULT_DATASET, DatasetError, load_dataset
        except ImportError as exc:
            raise ReleaseControlError(
                "gate_unavailable", f"the release gate is not installed: {exc}"
            ) from exc
        try:
            dataset = load_dataset(values.gate_dataset or DEFAULT_DATASET)
        except DatasetError as exc:
            raise ReleaseControlError("gate_dataset_unreadable", str(exc)) from exc
        return cls(
            dataset_sha256=dataset.sha256,
            canary_min_calls=values.canary_min_calls,
            canary_min_minutes=values.canary_min_minutes,
        )


@dataclass(frozen=True)
class Binding:
    """The exact bundles an action concerns."""

    candidate: str
    candidate_sha256: str
    control: str
    control_sha256: str

    @classmethod
    def of(cls, rollout: Rollout) -> Binding:
        """The bundles a rollout recorded when its shadow began."""
        return cls(rollout.candidate, rollout.candidate_sha256, rollout.control, rollout.control_sha256)


@dataclass
class Found:
    """The evidence for one binding, and what is missing (``(code, message)``, first one first)."""

    gate: Evidence | None = None
    reviewed: str = "0/0"
    unsigned: list[str] = field(default_factory=list)
    """Critical cases of the gate run with no sign-off (what a waiver stands in for)."""
    waivers: list[Evidence] = field(default_factory=list)
    """The candidate bundle's authentic review waivers, oldest first."""
    waiver: Evidence | None = None
    rollback_dry_run: Evidence | None = None
    problems: list[tuple[str, str]] = field(default_factory=list)


def counted_run(gate: Evidence) -> bool:
    """A gate row release control counts: the dataset's scripted turns (rows from before
    ``--model`` existed name no model: they were scripted) and the derived cases run."""
    derived = gate.detail.get("derived")
    ran_derived = isinstance(derived, int) and not isinstance(derived, bool) and derived > 0
    return gate.detail.get("model", SCRIPTED_GATE) == SCRIPTED_GATE and ran_derived


def missing_evidence(store: Store, binding: Binding, requirements: Requirements) -> Found:
    """What the store holds for ``binding``, and every piece missing (``Found.problems``)."""
    from toolgate.evals.signoff import reviewed_cases

    found = Found()
    problems = found.problems
    gates = [
        e
        for e in evidence_rows(store, "gate", binding.candidate_sha256)
        if e.control_sha256 == binding.control_sha256 and e.dataset_sha256 == requirements.dataset_sha256
    ]
    dry_runs = evidence_rows(store, "rollback_dry_run", binding.control_sha256)
    waivers = [
        e
        for e in evidence_rows(store, "review_waiver", binding.candidate_sha256)
        if e.dataset_sha256 == requirements.dataset_sha256
    ]
    forged = [e.evidence_id for e in (*gates, *dry_runs, *waivers) if not e.authentic]
    if forged:
        problems.append(
            (
                "evidence_tampered",
                f"evidence rows do not verify ({', '.join(forged[:5])}); refusing to count them",
            )
        )
    # a deleted FAIL (a gate run's, a rollback dry run's) would let the PASS before it count again
    counted: tuple[tuple[Kind, str, str], ...] = (
        ("gate", binding.candidate, GATE_RECORDED),
        ("rollback_dry_run", binding.control, DRY_RUN_RECORDED),
    )
    for kind, release, event in counted:
        lost = lost_rows(store, kind, release, event)
        if lost is not None:
            problems.append(("evidence_tampered", f"{lost}; refusing to count what is left"))
            break
    # a row whose MAC fails is refused above whatever its detail claims; of the rest, only
    # complete scripted runs count (the others are kept for the record, see the module doc)
    gate = next((e for e in reversed(gates) if e.authentic and counted_run(e)), None)
    found.gate = gate
    if gate is None:
        problems.append(
            (
                "gate_not_passed",
                f"no gate run of {binding.candidate} against {binding.control} on the required dataset"
                " with its scripted turns and the derived cases:"
                f" toolgate evals run --candidate {binding.candidate} --control {binding.control}",
            )
        )
    elif gate.verdict != "PASS":
        failures = "; ".join(str(f) for f in gate.detail.get("failures", [])[:3])
        problems.append(("gate_failed", f"the latest gate run of {binding.candidate} failed: {failures}"))
    if gate is not None:
        critical = {str(k): str(v) for k, v in dict(gate.detail.get("critical", {})).items()}
        signed = set(reviewed_cases(store, requirements.dataset_sha256, binding.candidate_sha256, critical))
        found.reviewed = f"{len(signed & set(critical))}/{len(critical)}"
        found.waivers = [e for e in waivers if e.authentic]
        found.waiver = found.waivers[-1] if found.waivers else None
        found.unsigned = unsigned = sorted(set(critical) - signed)
        if unsigned and found.waiver is None:
            problems.append(
                (
                    "review_missing",
                    f"{len(unsigned)} of {len(critical)} critical cases have no sign-off"
                    f" ({', '.join(unsigned[:5])}): toolgate evals review REPORT --as REVIEWER",
                )
            )
    dry_run = next((e for e in reversed(dry_runs) if e.authentic), None)
    found.rollback_dry_run = dry_run
    if dry_run is None:
        problems.append(
            (
                "rollback_dry_run_missing",
                f"no rollback dry run of {binding.control}: toolgate release rollback --dry-run --as ADMIN",
            )
        )
    elif dry_run.verdict != "PASS":
        problems.append(
            (
                "rollback_dry_run_failed",
                f"the latest rollback dry run of {binding.control} failed: {dry_run.detail}",
            )
        )
    return found


def canary_shortfall(
    requirements: Requirements, judged: int, began: str, now: datetime
) -> tuple[str, str] | None:
    """Why a canary that judged ``judged`` calls since ``began`` (store time) may not be promoted
    at ``now`` (the store's clock), as ``(code, message)``; None when it may."""
    if judged < requirements.canary_min_calls:
        return (
            "canary_traffic_too_low",
            f"the canary judged {judged} calls; promotion needs {requirements.canary_min_calls}",
        )
    elapsed = (now - parse_iso(began)).total_seconds() / 60
    if elapsed < 0:
        return "clock_skew", f"the store's clock reads before the canary began ({began})"
    if elapsed < requirements.canary_min_minutes:
        return (
            "canary_too_short",
            f"the canary has run {elapsed:.1f} minutes; promotion needs {requirements.canary_min_minutes:g}",
        )
    return None


def record_waiver(
    store: Store,
    actor: Principal,
    candidate: str,
    candidate_sha256: str,
    requirements: Requirements,
    reason: str,
) -> Evidence:
    """Record ``actor``'s waiver of the sign-offs of one candidate bundle, with its reason, and
    audit it (``release.review_waived``). The caller has checked the actor may act."""
    text = " ".join(reason.split())
    if len(text) < MIN_WAIVER_REASON:
        raise ReleaseControlError(
            "waiver_reason_required",
            f"a review waiver needs a reason of at least {MIN_WAIVER_REASON} characters",
        )
    waiver = record(
        store,
        "review_waiver",
        release=candidate,
        manifest_sha256=candidate_sha256,
        dataset_sha256=requirements.dataset_sha256,
        verdict="PASS",
        recorded_by=actor.user_id,
        detail={"reason": text[:500]},
    )
    Auditor(store, candidate).record(
        "release.review_waived",
        "waived",
        user_id=actor.user_id,
        detail={
            "candidate_sha256": candidate_sha256,
            "evidence_id": waiver.evidence_id,
            "reason": text[:500],
        },
    )
    return waiver


class EvidenceDesk:
    """The evidence rules on one store, with the operator's requirements (read once, when first
    needed, unless given)."""

    def __init__(self, store: Store, requirements: Requirements | None = None) -> None:
        self.store = store
        self._requirements = requirements

    @property
    def requirements(self) -> Requirements:
        """What the operator's settings demand."""
        if self._requirements is None:
            self._requirements = Requirements.from_settings()
        return self._requirements

    def found(self, binding: Binding) -> Found:
        """The store's evidence for ``binding`` and what is missing (nothing raised)."""
        return missing_evidence(self.store, binding, self.requirements)

    def require(self, binding: Binding) -> Found:
        """`found`, refused with the first missing piece's code."""
        found = self.found(binding)
        if found.problems:
            raise ReleaseControlError(*found.problems[0])
        return found

    def require_canary(self, judged: int, began: str) -> None:
        """Refuse promotion of a canary that judged ``judged`` calls since ``began`` until it has
        served the required calls and minutes (`canary_shortfall`, on the store's clock)."""
        shortfall = canary_shortfall(self.requirements, judged, began, self.store.now())
        if shortfall:
            raise ReleaseControlError(*shortfall)

    def waive(self, actor: Principal, candidate: str, candidate_sha256: str, reason: str) -> Evidence:
        """`record_waiver` under these requirements."""
        return record_waiver(self.store, actor, candidate, candidate_sha256, self.requirements, reason)


__all__ = [
    "GATE_RECORDED",
    "MIN_WAIVER_REASON",
    "SCRIPTED_GATE",
    "Binding",
    "EvidenceDesk",
    "Found",
    "Requirements",
    "canary_shortfall",
    "counted_run",
    "missing_evidence",
    "record_waiver",
]
