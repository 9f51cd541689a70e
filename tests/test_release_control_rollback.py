"""Promotion and rollback of complete bundles, on both backends.

Rollback restores the previous release loaded by id, after checking its effective hashes against
its reviewed manifest and the hashes recorded while it was active and running its critical
fixtures; any failed check refuses (audited, nothing changed). A proposal made under the
rolled-back release is never executed under the restored one, from the graph or a worker.
"""

from __future__ import annotations

import importlib.util
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command
from release_control_support import (
    CANDIDATE,
    CONTROL,
    RESTART,
    FakeCritical,
    TwoReleases,
    audit_events,
    count,
    run,
    text,
)
from support import principal
from test_release_control_routing import admin, table_counts

from toolgate.errors import RegistryError, ReleaseControlError
from toolgate.graph import Context
from toolgate.graph.bootstrap import served_release
from toolgate.graph.review.decisions import decide
from toolgate.store import SQLiteStore
from toolgate.store.base import Store
from toolgate.store.evidence import evidence_rows
from toolgate.store.rollout import RolloutStore
from toolgate.testing import ScriptedChatModel, ai, tool_call


def promoted(two: TwoReleases) -> None:
    control = two.control()
    control.shadow(admin(two), CANDIDATE)
    control.canary(admin(two), CANDIDATE, 10)
    control.promote(admin(two))


def test_promotion_serves_the_candidate_and_rollback_restores_the_verified_previous_bundle(
    store: Store, tmp_path: Path
) -> None:
    two = TwoReleases(store, tmp_path)
    promoted(two)
    state = RolloutStore(store).state(CONTROL)
    assert state.pointer is not None and (state.pointer.active, state.pointer.previous) == (
        CANDIDATE,
        CONTROL,
    )
    assert served_release(store, CONTROL, audit=True) == CANDIDATE  # what open_app now loads
    assert state.pointer.previous_sha256 == two.verify(CONTROL)  # recorded while it was active

    critical = FakeCritical()
    plan = two.control(critical).rollback(admin(two))

    assert (plan.source, plan.target, plan.hashes, plan.critical) == (CANDIDATE, CONTROL, "verified", "3/3")
    assert critical.asked == [CONTROL]
    after = RolloutStore(store).state(CONTROL)
    assert after.pointer is not None and (after.pointer.active, after.pointer.previous) == (CONTROL, None)
    assert after.pointer.active_sha256 == two.verify(CONTROL)
    assert after.rollout is not None and after.rollout.phase == "rolled_back"
    assert served_release(store, CONTROL, audit=True) == CONTROL
    [event] = audit_events(store, "release.rolled_back")
    assert event.detail["target"] == CONTROL and event.actor_id is not None
    assert two.control().plan_rollback().status == "not_applicable"  # nothing further back


def refusal_count(store: Store) -> int:
    return len(audit_events(store, "release.refused"))


@pytest.mark.parametrize("problem", ["critical_failed", "hashes_changed", "missing_role", "nothing"])
def test_a_rollback_that_fails_a_check_is_refused_audited_and_changes_nothing(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, problem: str
) -> None:
    two = TwoReleases(store, tmp_path)
    if problem != "nothing":
        promoted(two)
    critical = FakeCritical(ok=problem != "critical_failed")
    actor = admin(two)
    if problem == "hashes_changed":  # the bundle on disk is no longer the one that was active
        real = two.verify
        monkeypatch.setattr(two, "verify", lambda rid: "0" * 64 if rid == CONTROL else real(rid))
    if problem == "missing_role":
        actor = two.app.gateway.directory.authenticate("omar", "demo-token-omar")
    before, refused = table_counts(store), refusal_count(store)

    with pytest.raises(ReleaseControlError) as caught:
        two.control(critical).rollback(actor)

    expected = {"nothing": "nothing_to_roll_back"}.get(problem, problem)
    assert caught.value.code == expected
    if problem == "critical_failed":  # the operator reads what broke, not only which case
        assert "crit-cross-tenant (another tenant's order was read; status: expected refused)" in str(
            caught.value
        )
    assert refusal_count(store) == refused + 1
    assert audit_events(store, "release.refused")[-1].code == expected
    changed = {t for t, n in table_counts(store).items() if before.get(t) != n}
    assert changed <= {"audit_events", "audit_payloads"}


def test_a_dry_run_reports_and_records_only_its_verdict(store: Store, tmp_path: Path) -> None:
    two = TwoReleases(store, tmp_path)
    promoted(two)
    before = table_counts(store)
    plan = two.control(FakeCritical()).rollback(admin(two), dry_run=True)
    assert (plan.status, plan.target, plan.hashes, plan.critical) == ("PASS", CONTROL, "verified", "3/3")
    failing = two.control(FakeCritical(ok=False)).rollback(admin(two), dry_run=True)
    assert failing.status == "FAIL" and failing.problems[0][0] == "critical_failed"
    changed = {t: n - before[t] for t, n in table_counts(store).items() if before.get(t) != n}
    # no release state; two events per dry run kept: its check, and its row's (counted by lost_rows)
    assert changed == {"release_evidence": 2, "audit_events": 4, "audit_payloads": 4}
    rows = evidence_rows(store, "rollback_dry_run", two.verify(CONTROL))
    assert [(e.verdict, e.recorded_by, e.authentic) for e in rows[-2:]] == [
        ("PASS", "ivy", True),
        ("FAIL", "ivy", True),
    ]
    checked = audit_events(store, "release.rollback_checked")
    assert [(e.result, e.detail["problems"], bool(e.actor_id)) for e in checked] == [
        ("pass", [], True),
        ("fail", ["critical_failed"], True),
    ]


def test_critical_fixtures_that_cannot_run_refuse_the_rollback_audited(store: Store, tmp_path: Path) -> None:
    """A fixture runner that cannot load what it needs (`RegistryError`) is a failed check
    (``critical_unavailable``), never an exception out of release control: the rollback is
    refused and audited, the pointer unchanged."""
    two = TwoReleases(store, tmp_path)
    promoted(two)

    def broken(release_id: str) -> Any:
        raise RegistryError(f"release {release_id}: the fixture dataset does not load")

    plan = two.control(broken).rollback(admin(two), dry_run=True)
    assert (plan.status, plan.critical, [code for code, _ in plan.problems]) == (
        "FAIL",
        "unavailable",
        ["critical_unavailable"],
    )
    with pytest.raises(ReleaseControlError) as refused:
        two.control(broken).rollback(admin(two))
    assert refused.value.code == "critical_unavailable"
    state = two.router.state()
    assert state.pointer is not None and state.pointer.active == CANDIDATE
    assert [e.code for e in audit_events(store, "release.refused")] == ["critical_unavailable"]


@pytest.mark.parametrize("stage", ["canary", "promoted"])
def test_a_proposal_of_the_rolled_back_release_never_executes_under_the_restored_one(
    store: Store, tmp_path: Path, stage: str
) -> None:
    candidate = ScriptedChatModel(responses=[ai("", tool_call("restart_service", RESTART))])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate})
    control = two.control()
    control.shadow(admin(two), CANDIDATE)
    control.canary(admin(two), CANDIDATE, 100)
    if stage == "promoted":
        control.promote(admin(two))
    graph = two.graph()
    waiting = run(graph, "restart web", "sam", "t-pinned")
    [proposal] = waiting["__interrupt__"][0].value["toolgate"]["proposals"]
    assert proposal["release"] == CANDIDATE

    two.control(FakeCritical()).rollback(admin(two))
    outcome = decide(
        two.app.gateway_for_proposal(proposal["proposal_id"]),
        proposal["proposal_id"],
        principal("omar"),
        "approve",
    )
    assert outcome.operation.status == "approved"  # recorded under its own release's rules ...

    resumed = graph.invoke(
        Command(resume={"wake": True}), {"configurable": {"thread_id": "t-pinned"}}, context=Context()
    )
    worker = two.app.executor_gateway(proposal["operation_key"]).executor.deliver(
        proposal["operation_key"], worker_id="worker-after-rollback"
    )

    assert two.handler_calls(CANDIDATE) == 0 and two.handler_calls(CONTROL) == 0  # ... and never runs
    assert resumed["status"] == "needs_review"
    assert "pinned to ops-tools/1.1.0" in worker.reason and worker.claim == "NOT_ATTEMPTED"
    refusals = [
        e
        for e in audit_events(store, "approval.refused_at_execution")
        if e.proposal_id == proposal["proposal_id"]
    ]
    assert len(refusals) == 2 and {e.code for e in refusals} == {"approval_invalid"}
    assert {e.tool_release for e in refusals} == {CONTROL}
    assert store.operations.get(proposal["operation_key"]).status == "approved"  # type: ignore[union-attr]
    assert (
        count(
            store,
            "audit_events",
            "event = ? AND operation_key = ?",
            ("handler.started", proposal["operation_key"]),
        )
        == 0
    )


def test_the_real_critical_fixtures_pass_for_the_rollback_target(tmp_path: Path) -> None:
    if importlib.util.find_spec("toolgate.evals.gate") is None:
        pytest.skip("toolgate.evals.gate (the evaluation gate) is not installed yet")
    from support import TEST_KEY

    store = SQLiteStore(tmp_path / "toolgate.sqlite", key=TEST_KEY)
    two = TwoReleases(store, tmp_path)
    two.control().shadow(admin(two), CANDIDATE)
    from toolgate.releases.control import ReleaseControl

    plan: Any = ReleaseControl(two.app).plan_rollback()  # the default runner: run_critical
    passed, total = plan.critical.split("/")
    assert plan.status == "PASS" and plan.target == CONTROL and int(total) > 0 and passed == total


def test_the_canary_first_needs_a_shadow_and_promotion_needs_a_canary(store: Store, tmp_path: Path) -> None:
    two = TwoReleases(store, tmp_path, models={CONTROL: ScriptedChatModel(responses=[text("x")])})
    control = two.control()
    codes = []
    for attempt in (
        lambda: control.canary(admin(two), CANDIDATE, 5),
        lambda: control.promote(admin(two)),
        lambda: control.shadow(admin(two), CONTROL),
        lambda: control.shadow(admin(two), "ops-tools/9.9.9"),
    ):
        with pytest.raises(ReleaseControlError) as caught:
            attempt()
        codes.append(caught.value.code)
    control.shadow(admin(two), CANDIDATE)
    for attempt in (
        lambda: control.shadow(admin(two), CANDIDATE),
        lambda: control.canary(admin(two), CANDIDATE, 0),
        lambda: control.canary(admin(two), "ops-tools/9.9.9", 5),
    ):
        with pytest.raises(ReleaseControlError) as caught:
            attempt()
        codes.append(caught.value.code)
    assert codes == [
        "shadow_required",
        "canary_required",
        "same_release",
        "bundle_unverified",
        "rollout_active",
        "invalid_percent",
        "wrong_candidate",
    ]
    assert [e.code for e in audit_events(store, "release.refused")] == codes


def test_two_admins_promoting_at_once_make_one_promotion(store: Store, tmp_path: Path) -> None:
    """Both read the canary, both pass their checks, both try to change it: the store's version
    check lets exactly one through; the other is refused (audited) and changes nothing."""
    two = TwoReleases(store, tmp_path)
    control = two.control()
    control.shadow(admin(two), CANDIDATE)
    control.canary(admin(two), CANDIDATE, 10)
    barrier = threading.Barrier(2)

    def promote(_: int) -> str:
        release_control = two.control()
        actor = admin(two)
        barrier.wait()
        try:
            release_control.promote(actor)
        except ReleaseControlError as exc:
            return exc.code
        return "promoted"

    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(promote, range(2)))
    [refused] = [o for o in outcomes if o != "promoted"]
    assert outcomes.count("promoted") == 1 and refused in ("state_changed", "canary_required")
    assert len(audit_events(store, "release.promoted")) == 1
    assert [e.code for e in audit_events(store, "release.refused")] == [refused]
    state = RolloutStore(store).state(CONTROL)
    assert state.pointer is not None and state.pointer.version == 3  # shadow, canary, one promotion
