"""Threads routed between control and candidate by the store's records, on both backends.

Shadow: the candidate judges copies of the control's turns and writes only its shadow record.
Canary: new threads are pinned by the user's cohort, the candidate arm holds no high-risk tool,
threads that existed before stay on the control, and one thread never changes arm, even when
many processes pin it at once.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from release_control_support import CANDIDATE, CONTROL, RESTART, TwoReleases, count, run, text
from support import tool_messages

from toolgate.policy.principal import Principal
from toolgate.releases.rules import arm_for
from toolgate.store.base import Store
from toolgate.store.rollout import RolloutStore
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.demo.identities import demo_token

STATUS = {"service_alias": "web"}
UNCHANGED_EXCEPT = (
    "audit_events",
    "audit_payloads",
    "shadow_decisions",
    "toolgate_schema",
    "release_thread_pins",
    "record_versions",
)
"""The control thread's own records (its release pin names the control, and its one binding in
the audit chain's index, both checked below)."""


def admin(two: TwoReleases) -> Principal:
    """Ivy, authenticated with her token as the CLI would."""
    return two.app.gateway.directory.authenticate("ivy", demo_token("ivy"))


def table_counts(store: Store) -> dict[str, int]:
    """Rows per table, every table of the database (raw SQL)."""
    with store.transaction(write=False) as tx:
        if getattr(store, "dialect", "") == "postgres":
            names = [
                r["name"]
                for r in tx.execute(
                    "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public'"
                )
            ]
        else:
            names = [r["name"] for r in tx.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {n: count(store, n) for n in sorted(names) if not n.startswith("sqlite_")}


def test_without_a_rollout_the_router_serves_the_configured_release_and_pins_nothing(
    store: Store, tmp_path: Path
) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("get_service_status", STATUS)), text("web is up")])
    two = TwoReleases(store, tmp_path, models={CONTROL: model})
    state = run(two.graph(), "is web up?", "sam", "t-plain")
    assert state["status"] == "done" and state["release"] == CONTROL
    assert two.handler_calls(CONTROL) == 1 and two.handler_calls(CANDIDATE) == 0
    assert count(store, "release_pins") == 0 and count(store, "release_pointer") == 0


def test_a_shadow_run_calls_no_handler_writes_nothing_and_records_its_decisions(
    store: Store, tmp_path: Path
) -> None:
    control = ScriptedChatModel(responses=[text("Let me think about it.")])
    candidate = ScriptedChatModel(
        responses=[
            ai("", tool_call("restart_service", RESTART), tool_call("get_service_status", STATUS)),
        ]
    )
    two = TwoReleases(store, tmp_path, models={CONTROL: control, CANDIDATE: candidate})
    rollout = two.control().shadow(admin(two), CANDIDATE)
    before = table_counts(store)
    candidate_events = count(store, "audit_events", "tool_release = ?", (CANDIDATE,))

    state = run(two.graph(), "restart web, it is stuck", "sam", "t-shadow")

    assert state["status"] == "done" and state["release"] == CONTROL
    after = table_counts(store)
    assert {t: n for t, n in after.items() if t not in UNCHANGED_EXCEPT} == {
        t: n for t, n in before.items() if t not in UNCHANGED_EXCEPT
    }, "the shadow wrote to a system of record, a proposal, an operation, a counter or a pin"
    assert count(store, "proposals") == 0 and count(store, "operations") == 0
    assert count(store, "release_thread_pins", "thread_id = ? AND release = ?", ("t-shadow", CONTROL)) == 1
    assert after["record_versions"] == before["record_versions"] + 1  # that pin's binding, nothing else
    assert count(store, "record_versions", "kind = ? AND record_key = ?", ("thread_release", "t-shadow")) == 1
    assert count(store, "rate_counters") == 0  # the shadow judge peeks, it never counts
    assert two.handler_calls(CANDIDATE) == 0 and two.handler_calls(CONTROL) == 0
    assert count(store, "audit_events", "tool_release = ?", (CANDIDATE,)) == candidate_events
    [record] = RolloutStore(store).shadow_records(rollout.rollout_id)
    assert record.control == [] and not record.matched and record.error is None
    assert [(d["tool"], d["decision"]) for d in record.candidate] == [
        ("restart_service", "proposal_required"),
        ("get_service_status", "allowed"),
    ]
    assert "restart_service" in candidate.requests[0].tool_names  # same messages, the candidate's tools
    assert candidate.requests[0].messages[1:] == control.requests[0].messages[1:]
    candidate.assert_complete()


def test_shadowed_turns_that_decide_alike_match_and_a_failing_candidate_fails_nothing(
    store: Store, tmp_path: Path
) -> None:
    control = ScriptedChatModel(
        responses=[ai("", tool_call("get_service_status", STATUS)), text("web is up"), text("fine")]
    )
    candidate = ScriptedChatModel(responses=[ai("", tool_call("get_service_status", STATUS))])
    two = TwoReleases(store, tmp_path, models={CONTROL: control, CANDIDATE: candidate})
    rollout = two.control().shadow(admin(two), CANDIDATE)
    state = run(two.graph(), "is web up?", "sam", "t-alike")
    assert state["status"] == "done"
    assert two.handler_calls(CONTROL) == 1 and two.handler_calls(CANDIDATE) == 0
    first, second = RolloutStore(store).shadow_records(rollout.rollout_id)
    assert first.matched and first.candidate == first.control
    assert second.error == "UnexpectedModelCallError" and not second.matched  # the candidate ran out
    assert run(two.graph(), "and now?", "sam", "t-alike")["status"] == "done"  # control carries on
    assert RolloutStore(store).shadow_totals(rollout.rollout_id)[0] == 3


def test_a_canary_pins_new_threads_to_the_candidate_without_its_high_risk_tools(
    store: Store, tmp_path: Path
) -> None:
    refund = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
    candidate = ScriptedChatModel(
        responses=[ai("", tool_call("issue_refund", refund)), text("I cannot do that.")]
    )
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate})
    control = two.control()
    control.shadow(admin(two), CANDIDATE)
    rollout = control.canary(admin(two), CANDIDATE, 100)

    state = run(two.graph(), "refund O-5512 please", "cust-ada", "t-canary")

    pin = RolloutStore(store).get_pin(rollout.rollout_id, "t-canary")
    assert pin is not None and pin.authentic and (pin.arm, pin.release) == ("candidate", CANDIDATE)
    assert state["release"] == CANDIDATE
    assert "issue_refund" not in candidate.requests[0].tool_names
    assert "lookup_order" in candidate.requests[0].tool_names
    [refused] = tool_messages(state)
    assert '"unknown_tool"' in str(refused.content)
    assert two.handler_calls(CANDIDATE) == 0 and count(store, "proposals") == 0


def test_threads_that_existed_before_the_canary_stay_on_the_control(store: Store, tmp_path: Path) -> None:
    control_model = ScriptedChatModel(responses=[text("hello"), text("still the control")])
    two = TwoReleases(store, tmp_path, models={CONTROL: control_model})
    graph = two.graph()
    assert run(graph, "hi", "sam", "t-before")["release"] == CONTROL
    control = two.control()
    control.shadow(admin(two), CANDIDATE)
    rollout = control.canary(admin(two), CANDIDATE, 100)
    state = run(graph, "hi again", "sam", "t-before")
    assert state["release"] == CONTROL and state["status"] == "done"
    pin = RolloutStore(store).get_pin(rollout.rollout_id, "t-before")
    assert pin is not None and pin.arm == "control"


def test_the_same_user_is_in_the_same_arm_on_every_thread(store: Store, tmp_path: Path) -> None:
    models = {
        CONTROL: ScriptedChatModel(responses=[text("c")] * 4),
        CANDIDATE: ScriptedChatModel(responses=[text("x")] * 4),
    }
    two = TwoReleases(store, tmp_path, models=models)
    control = two.control()
    control.shadow(admin(two), CANDIDATE)
    rollout = control.canary(admin(two), CANDIDATE, 50)
    expected = arm_for(rollout.salt, rollout.canary_bp, "acme", "sam")
    graph = two.graph()
    for i in range(4):
        run(graph, "hello", "sam", f"t-same-{i}")
    pins = [RolloutStore(store).get_pin(rollout.rollout_id, f"t-same-{i}") for i in range(4)]
    assert {(p.arm if p else None) for p in pins} == {expected}


@pytest.mark.parametrize("workers", [8])
def test_concurrent_pins_of_one_thread_agree_on_the_first_arm(
    store: Store, tmp_path: Path, workers: int
) -> None:
    """Processes that computed different arms (say, one read the canary before a change) race to
    pin the same thread: the database keeps one pin and every one of them reads that one back."""
    rollouts = RolloutStore(store)
    rollouts.setup()
    barrier = threading.Barrier(workers)

    def pin(i: int) -> Any:
        arm = "candidate" if i % 2 else "control"
        barrier.wait()
        return rollouts.pin("rol_race", "t-race", CANDIDATE if i % 2 else CONTROL, arm)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        pins = list(pool.map(pin, range(workers)))
    assert len({(p.arm, p.release, p.pinned_at) for p in pins}) == 1
    assert all(p.authentic for p in pins)
    assert count(store, "release_pins", "thread_id = ?", ("t-race",)) == 1


def test_a_canary_proposal_is_decided_though_this_process_cannot_load_the_control(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reviewer's decision on a candidate's proposal loads the candidate only: the control (on
    this host a drifted bundle) was loaded first to compare ids, and its `RegistryError` refused
    every decision on every candidate proposal."""
    from test_hostile_rollout import canary_proposal, unloadable

    from toolgate.graph.review.decisions import decide

    candidate_model = ScriptedChatModel(responses=[ai("", tool_call("restart_service", RESTART))])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate_model})
    proposal = canary_proposal(two, "t-control-gone")
    assert proposal["release"] == CANDIDATE
    asked = unloadable(monkeypatch, two, CONTROL)

    gateway = two.app.gateway_for_proposal(proposal["proposal_id"])
    decide(gateway, proposal["proposal_id"], two.app.gateway.directory.authenticate("omar", demo_token("omar")), "approve")

    assert gateway.registry.release == CANDIDATE and asked == []
    assert store.operations.get(proposal["operation_key"]).status == "approved"  # type: ignore[union-attr]


def test_a_proposal_whose_own_release_cannot_load_here_is_refused_a_decision_not_crashed(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_hostile_rollout import canary_proposal, unloadable

    from toolgate.errors import ApprovalError
    from toolgate.graph.review.decisions import decide

    candidate_model = ScriptedChatModel(responses=[ai("", tool_call("restart_service", RESTART))])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate_model})
    proposal = canary_proposal(two, "t-candidate-gone")
    unloadable(monkeypatch, two, CANDIDATE)

    gateway = two.app.gateway_for_proposal(proposal["proposal_id"])  # this process's own
    omar = two.app.gateway.directory.authenticate("omar", demo_token("omar"))
    with pytest.raises(ApprovalError) as refused:
        decide(gateway, proposal["proposal_id"], omar, "approve")

    assert gateway.registry.release == CONTROL and refused.value.code == "wrong_release"
    assert store.operations.get(proposal["operation_key"]).status == "pending_approval"  # type: ignore[union-attr]
    assert store.approvals.for_proposal(proposal["proposal_id"]) == []
