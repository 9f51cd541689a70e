"""A rollout's candidate is code loaded into the gateway, untrusted like any: when this process
cannot load it (its package raises, or its bundle drifted on this host), the control's traffic
carries on and the failure is seen, on both backends."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from release_control_support import (
    CANDIDATE,
    CONTROL,
    RESTART,
    TwoReleases,
    audit_events,
    run,
    second_admin,
    text,
)
from support import principal, tool_messages

from toolgate.errors import RegistryError, ReleaseControlError, UnknownReleaseError
from toolgate.graph import bootstrap
from toolgate.graph.review.decisions import decide
from toolgate.graph.rollout.manifest import release_manifest
from toolgate.policy.principal import Principal
from toolgate.releases.bundle import ReleaseEnv
from toolgate.releases.evidence import EvidenceDesk
from toolgate.releases.loader import load_release
from toolgate.releases.rollback import default_critical_runner
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.rollout import RolloutStore
from toolgate.store.thread_releases import ThreadReleases
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.demo.identities import demo_token

STATUS = {"service_alias": "web"}


def admin(two: TwoReleases) -> Principal:
    return two.app.gateway.directory.authenticate("ivy", demo_token("ivy"))


def canaried(two: TwoReleases, *, promote: bool = False) -> None:
    """The candidate shadowed and canaried to everyone by ivy (and promoted, with ``promote``)."""
    release_control = two.control()
    release_control.shadow(admin(two), CANDIDATE)
    release_control.canary(admin(two), CANDIDATE, 100)
    if promote:
        release_control.promote(admin(two))


def canary_proposal(two: TwoReleases, thread: str) -> dict[str, Any]:
    """A restart proposed on the candidate's arm of a canary to everyone, awaiting approval (the
    interrupt's facts of it)."""
    canaried(two)
    waiting = run(two.graph(), "restart web", "sam", thread)
    [proposal] = waiting["__interrupt__"][0].value["toolgate"]["proposals"]
    proposal_facts: dict[str, Any] = proposal
    return proposal_facts


def unloadable(monkeypatch: pytest.MonkeyPatch, two: TwoReleases, release: str) -> list[str]:
    """From now on this process cannot load ``release`` (as on a host where its bundle drifted);
    the loads it was asked for."""
    asked: list[str] = []
    real = bootstrap.load_served_release

    def load(reference: Any, **kwargs: Any) -> Any:
        if reference == release:
            asked.append(reference)
            raise RegistryError(f"release {release}: tool get_service_status drifted from its manifest")
        return real(reference, **kwargs)

    monkeypatch.setattr(bootstrap, "load_served_release", load)
    for key in [k for k in two.gateways._built if k[0] == release]:
        del two.gateways._built[key]
    return asked


def test_a_shadow_candidate_this_process_cannot_load_fails_no_control_turn_and_is_recorded(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = ScriptedChatModel(responses=[ai("", tool_call("get_service_status", STATUS)), text("web is up")])
    two = TwoReleases(store, tmp_path, models={CONTROL: control})
    rollout = two.control().shadow(admin(two), CANDIDATE)
    asked = unloadable(monkeypatch, two, CANDIDATE)

    state = run(two.graph(), "is web up?", "sam", "t-unloadable")

    assert state["status"] == "done" and state["release"] == CONTROL
    assert [m.status for m in tool_messages(state)] == ["success"]
    assert two.handler_calls(CONTROL) == 1 and two.handler_calls(CANDIDATE) == 0
    assert asked  # the router did ask for the candidate
    records = RolloutStore(store).shadow_records(rollout.rollout_id)
    assert len(records) == 2  # each control model turn
    assert all(r.error == "RegistryError" and not r.matched and r.candidate == [] for r in records)
    assert all(r.candidate_release == CANDIDATE for r in records)
    control.assert_complete()


def uninstalled(monkeypatch: pytest.MonkeyPatch, release: str) -> None:
    """From now on ``release``'s package is gone from this host (every door that loads it by id)."""
    from toolgate.evals import runner

    def load(real: Any) -> Any:
        def loading(reference: Any, *args: Any, **kwargs: Any) -> Any:
            if reference == release:
                raise UnknownReleaseError(release)
            return real(reference, *args, **kwargs)

        return loading

    monkeypatch.setattr(bootstrap, "load_release", load(bootstrap.load_release))
    monkeypatch.setattr(runner, "load_release", load(runner.load_release))


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry run", "rollback"])
def test_a_rollback_target_that_no_longer_loads_is_refused_with_a_code_and_audited(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dry_run: bool
) -> None:
    two = TwoReleases(store, tmp_path)
    two.control().shadow(admin(two), CANDIDATE)
    uninstalled(monkeypatch, CONTROL)
    release_control = two.control(critical=default_critical_runner)  # the real fixtures
    before = two.router.state()

    if dry_run:
        plan = release_control.rollback(admin(two), dry_run=True)
        assert plan.status == "FAIL" and plan.hashes == "unverified" and plan.critical == "not_run"
        assert [code for code, _ in plan.problems] == ["bundle_unverified"]
        [checked] = audit_events(store, "release.rollback_checked")
        assert checked.result == "fail" and checked.detail["problems"] == ["bundle_unverified"]
    else:
        with pytest.raises(ReleaseControlError) as refused:
            release_control.rollback(admin(two))
        assert refused.value.code == "bundle_unverified"
        [event] = audit_events(store, "release.refused")
        assert event.code == "bundle_unverified" and event.detail["action"] == "rollback"
    after = two.router.state()
    assert after.rollout == before.rollout and after.pointer == before.pointer  # nothing moved


def test_a_canary_candidate_this_process_cannot_load_stops_no_delivery_of_the_control(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control_model = ScriptedChatModel(responses=[ai("", tool_call("restart_service", RESTART))])
    two = TwoReleases(store, tmp_path, models={CONTROL: control_model})
    release_control = two.control()
    waiting = run(two.graph(), "restart web", "sam", "t-control")  # before the rollout: the control
    [proposal] = waiting["__interrupt__"][0].value["toolgate"]["proposals"]
    assert proposal["release"] == CONTROL
    key = proposal["operation_key"]
    decide(two.app.gateway_for_proposal(proposal["proposal_id"]), proposal["proposal_id"], principal("omar"), "approve")
    release_control.shadow(admin(two), CANDIDATE)
    release_control.canary(admin(two), CANDIDATE, 50)
    unloadable(monkeypatch, two, CANDIDATE)

    delivered = two.app.executor_gateway(key).executor.deliver(key, worker_id="worker-1")

    assert delivered.status == "succeeded"
    assert two.handler_calls(CONTROL) == 1 and two.handler_calls(CANDIDATE) == 0
    assert store.operations.get(key).status == "succeeded"  # type: ignore[union-attr]


def test_after_promotion_a_previous_release_this_process_cannot_load_stops_no_delivery_of_the_active(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    candidate_model = ScriptedChatModel(responses=[ai("", tool_call("restart_service", RESTART))])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate_model})
    canaried(two, promote=True)
    waiting = run(two.graph(), "restart web", "sam", "t-promoted")
    [proposal] = waiting["__interrupt__"][0].value["toolgate"]["proposals"]
    assert proposal["release"] == CANDIDATE
    key = proposal["operation_key"]
    decide(two.app.gateway_for_proposal(proposal["proposal_id"]), proposal["proposal_id"], principal("omar"), "approve")
    unloadable(monkeypatch, two, CONTROL)  # the previous release's package is gone from this host

    delivered = two.app.executor_gateway(key).executor.deliver(key, worker_id="worker-1")

    assert delivered.status == "succeeded"
    assert two.handler_calls(CANDIDATE) == 1 and two.handler_calls(CONTROL) == 0


def test_a_canary_thread_whose_candidate_this_process_cannot_load_stops_for_review_with_a_code(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    two = TwoReleases(store, tmp_path)
    canaried(two)
    unloadable(monkeypatch, two, CANDIDATE)

    state = run(two.graph(), "is web up?", "sam", "t-canary")

    assert state["status"] == "needs_review"
    assert two.handler_calls(CONTROL) == 0 and two.handler_calls(CANDIDATE) == 0
    [stopped] = audit_events(store, "release.thread_stopped")
    assert stopped.code == "release_unavailable" and stopped.detail["pinned"] == CANDIDATE


def test_a_thread_is_not_migrated_to_a_release_no_gate_passed(store: Store, tmp_path: Path) -> None:
    """`release migrate-thread` demands of its target what a rollout demands: the active release
    or the rollback target as the pointer recorded them, or a candidate with a passed gate, its
    review and a rollback dry run against the active release. Before, any installed release that
    verified served the moved thread, its high-risk tools included, with no automatic stop."""
    from test_thread_pinning import status_of

    from toolgate.releases.migrate import migrate_thread

    model = ScriptedChatModel(responses=[ai("", tool_call("restart_service", RESTART))])
    two = TwoReleases(store, tmp_path, models={CONTROL: model}, evidence=False)  # nothing gated
    graph = two.graph()
    run(graph, "restart web, it is stuck", "sam", "t-wait")  # awaiting approval under the control
    with pytest.raises(ReleaseControlError) as refused:
        migrate_thread(two.control(), admin(two), "t-wait", CANDIDATE, thread_status=status_of(graph))
    assert refused.value.code == "gate_not_passed"
    assert ThreadReleases(store).get("t-wait").release == CONTROL  # type: ignore[union-attr]
    [audited] = audit_events(store, "release.refused")
    assert (audited.code, audited.detail["action"]) == ("gate_not_passed", "migrate_thread")
    assert audit_events(store, "release.thread_migrated") == []
    two.record_evidence(CANDIDATE, CONTROL)  # the evidence a rollout demands: now it may move
    before, moved = migrate_thread(two.control(), admin(two), "t-wait", CANDIDATE, thread_status=status_of(graph))
    assert (before, moved.release) == (CONTROL, CANDIDATE)


def replaced(monkeypatch: pytest.MonkeyPatch, two: TwoReleases, release: str) -> None:
    """From now on this host has another bundle installed under ``release``'s id (its policy
    changed, its manifest written for it, so it verifies on its own): never gated."""
    base = load_release(release)
    changed = dataclasses.replace(
        base, policy=dataclasses.replace(base.policy, policy_version="ops-policy/9.9.9"), manifest=None
    )
    registry = changed.registry(ReleaseEnv(two.store, two.store.keys.secret))
    changed = dataclasses.replace(changed, manifest=release_manifest(changed, registry))
    real = bootstrap.load_release
    monkeypatch.setattr(bootstrap, "load_release", lambda ref, *a, **k: changed if ref == release else real(ref, *a, **k))
    for key in [k for k in two.gateways._built if k[0] == release]:
        del two.gateways._built[key]


def test_a_canary_candidate_replaced_under_its_id_after_its_gate_serves_no_one(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    candidate_model = ScriptedChatModel(responses=[text("web is up")])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate_model})
    canaried(two)
    replaced(monkeypatch, two, CANDIDATE)

    state = run(two.graph(), "is web up?", "sam", "t-replaced")

    assert state["status"] == "needs_review" and candidate_model.requests == []
    assert two.handler_calls(CANDIDATE) == 0 and two.handler_calls(CONTROL) == 0
    [stopped] = audit_events(store, "release.thread_stopped")
    assert stopped.code == "hashes_changed" and stopped.detail["pinned"] == CANDIDATE
    assert run(two.graph(), "and now?", "sam", "t-replaced")["status"] == "needs_review"  # pinned there
    assert candidate_model.requests == []


def test_a_shadow_candidate_replaced_under_its_id_after_its_gate_is_not_shadowed(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = ScriptedChatModel(responses=[text("web is up")])
    candidate_model = ScriptedChatModel(responses=[text("web is up")])
    two = TwoReleases(store, tmp_path, models={CONTROL: control, CANDIDATE: candidate_model})
    rollout = two.control().shadow(admin(two), CANDIDATE)
    replaced(monkeypatch, two, CANDIDATE)

    assert run(two.graph(), "is web up?", "sam", "t-shadowed")["status"] == "done"

    [record] = RolloutStore(store).shadow_records(rollout.rollout_id)
    assert record.error == "ReleaseControlError" and not record.matched and candidate_model.requests == []


def test_the_admin_who_waived_a_candidates_review_does_not_move_it_alone(store: Store, tmp_path: Path) -> None:
    """Four eyes at the release door: the admin who waived the sign-offs of a candidate's critical
    cases may not shadow, canary or promote that candidate (``own_waiver``, audited
    ``release.refused``, nothing changes), as an approval's requester may not approve it; another
    admin may, and the waiver's author may not move further what that other admin started."""
    two = TwoReleases(store, tmp_path, evidence=False)
    two.record_evidence(CANDIDATE, CONTROL, critical={"crit-cross-tenant": "acme"})  # one critical case, unsigned
    release_control = two.control()
    ivy = admin(two)
    release_control.waive_review(ivy, CANDIDATE, "hotfix for an outage, reviewed on the call")

    with pytest.raises(ReleaseControlError) as refused:
        release_control.shadow(ivy, CANDIDATE)
    assert refused.value.code == "own_waiver"
    assert two.router.state().rollout is None
    [event] = audit_events(store, "release.refused")
    assert (event.code, event.actor_id, event.detail["action"]) == (
        "own_waiver",
        Auditor(store, CANDIDATE).actor("ivy"),
        "shadow",
    )

    ines = second_admin(two)
    rollout = release_control.shadow(ines, CANDIDATE)
    assert (rollout.phase, rollout.changed_by) == ("shadow", "ines")
    with pytest.raises(ReleaseControlError) as refused:
        release_control.canary(ivy, CANDIDATE, 100)
    assert refused.value.code == "own_waiver" and two.router.state().rollout == rollout  # still ines's shadow
    canary = release_control.canary(ines, CANDIDATE, 100)
    with pytest.raises(ReleaseControlError) as refused:
        release_control.promote(ivy)
    assert refused.value.code == "own_waiver" and two.router.state().rollout == canary
    assert [(e.code, e.detail["action"]) for e in audit_events(store, "release.refused")] == [
        ("own_waiver", "shadow"),
        ("own_waiver", "canary"),
        ("own_waiver", "promote"),
    ]
    assert release_control.promote(ines).pointer.active == CANDIDATE


@pytest.mark.parametrize("percent", [1e-9, float("nan"), float("inf"), -0.0], ids=["1e-9", "nan", "inf", "-0"])
def test_a_canary_share_that_rounds_to_no_one_or_is_no_number_is_refused_and_audited(
    store: Store, tmp_path: Path, percent: float
) -> None:
    two = TwoReleases(store, tmp_path)
    release_control = two.control()
    shadowed = release_control.shadow(admin(two), CANDIDATE)

    with pytest.raises(ReleaseControlError) as refused:
        release_control.canary(admin(two), CANDIDATE, percent)

    assert refused.value.code == "invalid_percent"
    assert two.router.state().rollout == shadowed  # still in shadow, nothing changed
    [event] = audit_events(store, "release.refused")
    assert event.code == "invalid_percent" and event.detail["action"] == "canary"


@pytest.mark.parametrize("raised", [RuntimeError("no such table"), SystemExit(3)], ids=["error", "exit"])
def test_a_candidate_whose_setup_raises_is_refused_with_a_code_and_audited(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: BaseException
) -> None:
    from toolgate.releases import control as control_module

    def setup(_: Store) -> None:
        raise raised

    real = control_module.load_release
    monkeypatch.setattr(
        control_module,
        "load_release",
        lambda ref: dataclasses.replace(real(ref), setup=setup) if ref == CANDIDATE else real(ref),
    )
    two = TwoReleases(store, tmp_path)

    with pytest.raises(ReleaseControlError) as refused:
        two.control().shadow(admin(two), CANDIDATE)

    assert refused.value.code == "bundle_unverified"
    assert two.router.state().rollout is None
    [event] = audit_events(store, "release.refused")
    assert event.code == "bundle_unverified" and event.detail["action"] == "shadow"


def test_two_promotions_racing_move_the_pointer_once_and_the_loser_is_refused_audited(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    two = TwoReleases(store, tmp_path)
    setup = two.control()
    setup.shadow(admin(two), CANDIDATE)
    setup.canary(admin(two), CANDIDATE, 100)
    both_checked = threading.Barrier(2, timeout=60)
    real = EvidenceDesk.require_canary

    def require_canary(desk: EvidenceDesk, judged: int, began: str) -> None:
        real(desk, judged, began)
        both_checked.wait()  # each promoter has read the state and its evidence before either writes

    monkeypatch.setattr(EvidenceDesk, "require_canary", require_canary)
    controls = [two.control(), two.control()]

    def promote(index: int) -> str:
        try:
            controls[index].promote(admin(two))
            return "promoted"
        except ReleaseControlError as exc:
            return exc.code

    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = sorted(pool.map(promote, range(2)))

    assert outcomes == ["promoted", "state_changed"]
    state = two.router.state()
    assert state.pointer is not None and state.pointer.active == CANDIDATE and state.pointer.previous == CONTROL
    assert state.rollout is not None and state.rollout.phase == "promoted"
    assert len(audit_events(store, "release.promoted")) == 1
    [refused] = audit_events(store, "release.refused")
    assert refused.code == "state_changed" and refused.detail["action"] == "promote"


def test_a_canary_proposal_is_not_delivered_by_a_candidate_replaced_under_its_id(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    candidate_model = ScriptedChatModel(responses=[ai("", tool_call("restart_service", RESTART))])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate_model})
    proposal = canary_proposal(two, "t-canary-write")
    assert proposal["release"] == CANDIDATE
    key = proposal["operation_key"]
    decide(two.app.gateway_for_proposal(proposal["proposal_id"]), proposal["proposal_id"], principal("omar"), "approve")
    replaced(monkeypatch, two, CANDIDATE)

    delivered = two.app.executor_gateway(key).executor.deliver(key, worker_id="worker-1")

    assert delivered.claim == "NOT_ATTEMPTED" and two.handler_calls(CANDIDATE) == 0
    assert store.operations.get(key).status == "approved"  # type: ignore[union-attr]


def test_an_active_release_replaced_under_its_id_after_promotion_serves_no_one(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    candidate_model = ScriptedChatModel(responses=[text("web is up")])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate_model})
    canaried(two, promote=True)
    replaced(monkeypatch, two, CANDIDATE)

    state = run(two.graph(), "is web up?", "sam", "t-after-promotion")

    assert state["status"] == "needs_review" and candidate_model.requests == []  # the rollout's arm
    [stopped] = audit_events(store, "release.thread_stopped")
    assert stopped.code == "hashes_changed" and stopped.detail["pinned"] == CANDIDATE
