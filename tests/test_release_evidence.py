"""No candidate moves without evidence: a gate PASS for its exact bundle against the control's,
sign-offs (or an admin's audited waiver), a passed rollback dry run and, to promote, a canary
that served enough calls for long enough on the store's clock.

Each missing, failed, revoked, misbound, forged or edited piece refuses shadow, canary or
promote with its code, changes no release state and is audited as ``release.refused``. Both
backends.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from release_control_support import (
    CANDIDATE,
    CONTROL,
    FakeCritical,
    TwoReleases,
    audit_events,
    count,
    run,
    second_admin,
    text,
)
from support import set_store_now
from test_release_control_routing import STATUS, admin

from toolgate.clock import parse_iso
from toolgate.errors import ReleaseControlError
from toolgate.releases.evidence import GATE_RECORDED, Requirements
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.evidence import evidence_rows
from toolgate.store.rollout import RolloutStore
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.demo.identities import demo_token

RELEASE_TABLES = ("release_pointer", "release_rollouts", "release_pins")


def release_rows(store: Store) -> dict[str, int]:
    """Rows of the release-control tables (what a refusal must leave alone)."""
    return {t: count(store, t) for t in RELEASE_TABLES}


def refused(store: Store, action: Any, code: str) -> None:
    """``action`` is refused with ``code``, audited once, and no release state changes."""
    before, audits = release_rows(store), len(audit_events(store, "release.refused"))
    with pytest.raises(ReleaseControlError) as caught:
        action()
    assert caught.value.code == code, str(caught.value)
    assert release_rows(store) == before
    events = audit_events(store, "release.refused")
    assert len(events) == audits + 1 and events[-1].code == code


def bare(store: Store, tmp_path: Path, **requirements: Any) -> TwoReleases:
    """Both releases on a store that holds no evidence yet."""
    wanted = replace(
        Requirements(dataset_sha256="d" * 64, canary_min_calls=0, canary_min_minutes=0), **requirements
    )
    return TwoReleases(store, tmp_path, evidence=False, requirements=wanted)


def test_shadow_needs_a_gate_pass_a_review_and_a_rollback_dry_run(store: Store, tmp_path: Path) -> None:
    two = bare(store, tmp_path)
    control = two.control()

    def shadow() -> Any:
        return control.shadow(admin(two), CANDIDATE)

    refused(store, shadow, "gate_not_passed")
    two.record_evidence(CANDIDATE, CONTROL, gate="FAIL", dry_run=None)
    refused(store, shadow, "gate_failed")
    two.record_evidence(CANDIDATE, CONTROL, gate="PASS", dry_run=None, critical={"crit-a": "acme"})
    refused(store, shadow, "review_missing")
    waiver = control.waive_review(second_admin(two), CANDIDATE, "hotfix reviewed in incident INC-2231")
    assert waiver.recorded_by == "ines"  # another admin than ivy, who moves it (own_waiver otherwise)
    waived = audit_events(store, "release.review_waived")
    assert [e.detail["reason"] for e in waived] == ["hotfix reviewed in incident INC-2231"]
    refused(store, shadow, "rollback_dry_run_missing")
    assert control.rollback(admin(two), dry_run=True).status == "PASS"  # the active release's readiness
    rollout = shadow()
    assert (rollout.phase, rollout.candidate, rollout.control) == ("shadow", CANDIDATE, CONTROL)


def test_evidence_for_another_control_another_dataset_or_a_failed_dry_run_does_not_count(
    store: Store, tmp_path: Path
) -> None:
    two = bare(store, tmp_path)
    control = two.control()
    two.record_evidence(CANDIDATE, CANDIDATE, dry_run=None)  # against another control bundle
    refused(store, lambda: control.shadow(admin(two), CANDIDATE), "gate_not_passed")
    other = bare(store, tmp_path, dataset_sha256="e" * 64)
    two.record_evidence(CANDIDATE, CONTROL, dry_run=None)  # on two's dataset, not other's
    refused(store, lambda: other.control().shadow(admin(other), CANDIDATE), "gate_not_passed")
    assert two.control(FakeCritical(ok=False)).rollback(admin(two), dry_run=True).status == "FAIL"
    refused(store, lambda: control.shadow(admin(two), CANDIDATE), "rollback_dry_run_failed")
    assert control.rollback(admin(two), dry_run=True).status == "PASS"  # a later pass counts again
    assert control.shadow(admin(two), CANDIDATE).phase == "shadow"


REVOKED = {
    "gate": ({"gate": "FAIL", "dry_run": None}, "gate_failed"),
    "review": ({"dry_run": None, "critical": {"crit-a": "acme"}}, "review_missing"),
    "rollback_dry_run": ({"gate": None, "dry_run": "FAIL"}, "rollback_dry_run_failed"),
}
"""Evidence recorded after the shadow began that takes a piece away: a failed gate rerun, a gate
rerun naming a critical case nobody signed, a failed rollback dry run."""


@pytest.mark.parametrize("piece", sorted(REVOKED))
@pytest.mark.parametrize("stage", ["canary", "promote"])
def test_evidence_revoked_during_the_rollout_refuses_canary_and_promote(
    store: Store, tmp_path: Path, stage: str, piece: str
) -> None:
    two = bare(store, tmp_path)
    two.record_evidence(CANDIDATE, CONTROL)
    control = two.control()
    control.shadow(admin(two), CANDIDATE)
    if stage == "promote":
        control.canary(admin(two), CANDIDATE, 10)
    evidence, code = REVOKED[piece]
    two.record_evidence(CANDIDATE, CONTROL, **evidence)
    act = (
        (lambda: control.canary(admin(two), CANDIDATE, 10))
        if stage == "canary"
        else (lambda: control.promote(admin(two)))
    )
    refused(store, act, code)
    phase = RolloutStore(store).state(CONTROL).rollout.phase  # type: ignore[union-attr]
    assert phase == ("shadow" if stage == "canary" else "canary")
    two.record_evidence(CANDIDATE, CONTROL)  # the piece restored: the move goes ahead
    act()


@pytest.mark.parametrize("forgery", ["edited_verdict", "inserted_without_mac", "moved_to_other_bundle"])
def test_a_forged_or_edited_evidence_row_refuses_the_move(store: Store, tmp_path: Path, forgery: str) -> None:
    two = bare(store, tmp_path)
    control_sha, candidate_sha = two.verify(CONTROL), two.verify(CANDIDATE)
    two.record_evidence(CANDIDATE, CONTROL, gate="FAIL")
    two.record_evidence(CONTROL, CANDIDATE, dry_run=None)
    with store.transaction() as tx:
        if forgery == "edited_verdict":
            tx.execute("UPDATE release_evidence SET verdict = 'PASS' WHERE kind = 'gate'")
        elif forgery == "inserted_without_mac":
            tx.execute(
                "INSERT INTO release_evidence (seq, evidence_id, kind, release, manifest_sha256, control,"
                " control_sha256, dataset_sha256, verdict, detail, recorded_by, recorded_at, mac)"
                " VALUES (99, 'evd_forged', 'gate', ?, ?, ?, ?, ?, 'PASS', '{}', 'toolgate.evals',"
                " '2026-12-04T00:00:00.000000Z', ?)",
                (CANDIDATE, candidate_sha, CONTROL, control_sha, "d" * 64, "0" * 64),
            )
        else:  # the other direction's PASS, re-pointed at this binding
            tx.execute(
                "UPDATE release_evidence SET release = ?, manifest_sha256 = ?, control = ?, control_sha256 = ?"
                " WHERE kind = 'gate' AND release = ?",
                (CANDIDATE, candidate_sha, CONTROL, control_sha, CONTROL),
            )
    refused(store, lambda: two.control().shadow(admin(two), CANDIDATE), "evidence_tampered")
    assert all(not e.authentic for e in evidence_rows(store, "gate", candidate_sha) if e.verdict == "PASS")


def gate_recorded(two: TwoReleases, verdict: str) -> str:
    """A gate verdict kept the way ``toolgate evals run`` keeps it: its evidence row, then its
    ``release.gate_recorded`` event naming that row; the row's id."""
    before = {e.evidence_id for e in evidence_rows(two.store, "gate", two.verify(CANDIDATE))}
    two.record_evidence(CANDIDATE, CONTROL, gate=verdict, dry_run=None)
    [row] = [e for e in evidence_rows(two.store, "gate", two.verify(CANDIDATE)) if e.evidence_id not in before]
    Auditor(two.store, CANDIDATE).record(
        GATE_RECORDED, verdict.lower(), detail={"evidence_id": row.evidence_id, "model": "scripted"}
    )
    return row.evidence_id


def test_a_deleted_gate_fail_refuses_the_move(store: Store, tmp_path: Path) -> None:
    """A gate FAIL recorded after a PASS revokes it; deleting the FAIL's row, the newest of the
    table, must not bring the PASS back: the gate rows left fall short of the gate runs the audit
    chain recorded, and the move is refused ``evidence_tampered`` (where the older PASS counted
    again and the candidate went into shadow)."""
    two = bare(store, tmp_path)
    two.record_evidence(CANDIDATE, CONTROL, gate=None)  # the rollback dry run
    gate_recorded(two, "PASS")
    failed = gate_recorded(two, "FAIL")
    refused(store, lambda: two.control().shadow(admin(two), CANDIDATE), "gate_failed")
    with store.transaction() as tx:
        tx.execute("DELETE FROM release_evidence WHERE evidence_id = ?", (failed,))
    refused(store, lambda: two.control().shadow(admin(two), CANDIDATE), "evidence_tampered")
    assert RolloutStore(store).state(CONTROL).rollout is None
    assert count(store, "release_evidence", "kind = 'gate'") == 1  # nothing was written back


def test_a_row_deleted_between_others_refuses_the_move(store: Store, tmp_path: Path) -> None:
    """A failed rollback dry run revokes the one before it; deleting its row from between others
    (a later gate run of another binding) leaves a number out of the evidence rows: refused
    ``evidence_tampered``, where the earlier PASS counted again."""
    two = bare(store, tmp_path)
    two.record_evidence(CANDIDATE, CONTROL)  # a gate PASS and a dry run PASS
    two.record_evidence(CANDIDATE, CONTROL, gate=None, dry_run="FAIL")
    refused(store, lambda: two.control().shadow(admin(two), CANDIDATE), "rollback_dry_run_failed")
    two.record_evidence(CANDIDATE, CANDIDATE, dry_run=None)  # a later row, of another binding
    with store.transaction() as tx:
        tx.execute("DELETE FROM release_evidence WHERE kind = 'rollback_dry_run' AND verdict = 'FAIL'")
    refused(store, lambda: two.control().shadow(admin(two), CANDIDATE), "evidence_tampered")
    assert RolloutStore(store).state(CONTROL).rollout is None


def test_a_deleted_newest_rollback_dry_run_fail_refuses_the_move(store: Store, tmp_path: Path) -> None:
    """A failed dry run revokes the pass before it; deleting its row, the newest of the table (no
    number left out), must not bring the pass back: the control's dry-run rows fall short of the
    ``release.rollback_dry_run_recorded`` events the chain holds for it (where ``shadow`` went on)."""
    two = bare(store, tmp_path)
    two.record_evidence(CANDIDATE, CONTROL, dry_run=None)  # a gate PASS
    control = two.control()
    assert control.rollback(admin(two), dry_run=True).status == "PASS"
    assert two.control(FakeCritical(ok=False)).rollback(admin(two), dry_run=True).status == "FAIL"
    refused(store, lambda: control.shadow(admin(two), CANDIDATE), "rollback_dry_run_failed")
    with store.transaction() as tx:
        tx.execute("DELETE FROM release_evidence WHERE kind = 'rollback_dry_run' AND verdict = 'FAIL'")
    refused(store, lambda: control.shadow(admin(two), CANDIDATE), "evidence_tampered")
    assert RolloutStore(store).state(CONTROL).rollout is None
    assert len(audit_events(store, "release.rollback_dry_run_recorded")) == 2


def test_a_waiver_needs_an_admin_and_a_reason(store: Store, tmp_path: Path) -> None:
    two = bare(store, tmp_path)
    directory = two.app.gateway.directory
    rita = directory.authenticate("rita", demo_token("rita"))
    control = two.control()
    refused(
        store, lambda: control.waive_review(rita, CANDIDATE, "hotfix reviewed in incident"), "missing_role"
    )
    refused(store, lambda: control.waive_review(admin(two), CANDIDATE, "  ok   "), "waiver_reason_required")
    assert evidence_rows(store, "review_waiver", two.verify(CANDIDATE)) == []
    assert audit_events(store, "release.review_waived") == []


def canaried(store: Store, tmp_path: Path, **requirements: Any) -> TwoReleases:
    candidate = ScriptedChatModel(responses=[ai("", tool_call("get_service_status", STATUS)), text("up")])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate}, evidence=False)
    two.requirements = Requirements(dataset_sha256="d" * 64, **requirements)
    two.record_evidence(CANDIDATE, CONTROL)
    two.control().shadow(admin(two), CANDIDATE)
    two.control().canary(admin(two), CANDIDATE, 100)
    return two


def test_promotion_needs_the_canary_to_have_judged_enough_calls(store: Store, tmp_path: Path) -> None:
    two = canaried(store, tmp_path, canary_min_calls=1, canary_min_minutes=0)
    refused(store, lambda: two.control().promote(admin(two)), "canary_traffic_too_low")
    assert run(two.graph(), "is web up?", "sam", "t-canary")["status"] == "done"
    assert two.handler_calls(CANDIDATE) == 1
    assert two.control().promote(admin(two)).pointer.active == CANDIDATE  # type: ignore[union-attr]


def test_promotion_needs_the_canary_to_have_run_long_enough_on_the_stores_clock(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    two = canaried(store, tmp_path, canary_min_calls=0, canary_min_minutes=30)
    rollout = RolloutStore(store).state(CONTROL).rollout
    assert rollout is not None
    began = parse_iso(rollout.updated_at)
    for minutes, code in ((10, "canary_too_short"), (-5, "clock_skew")):
        set_store_now(monkeypatch, store, began + timedelta(minutes=minutes))
        refused(store, lambda: two.control().promote(admin(two)), code)
    set_store_now(monkeypatch, store, began + timedelta(minutes=31))
    assert two.control().promote(admin(two)).pointer.active == CANDIDATE  # type: ignore[union-attr]
    assert [e.event for e in audit_events(store, "release.promoted")] == ["release.promoted"]


def test_requirements_refuse_a_gate_dataset_that_cannot_be_read_or_a_missing_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a shadow or canary is held to comes from the gate's dataset: without it, release
    control refuses to start (``gate_dataset_unreadable``, or ``gate_unavailable`` when the evals
    are not installed) rather than hold a candidate to nothing."""
    monkeypatch.setenv("TOOLGATE_GATE_DATASET", str(tmp_path / "missing.jsonl"))
    with pytest.raises(ReleaseControlError) as unreadable:
        Requirements.from_settings()
    assert unreadable.value.code == "gate_dataset_unreadable"
    monkeypatch.setitem(sys.modules, "toolgate.evals.fixtures", None)  # an install without the evals
    with pytest.raises(ReleaseControlError) as missing:
        Requirements.from_settings()
    assert missing.value.code == "gate_unavailable"
