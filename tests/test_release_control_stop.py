"""The automatic stop: the candidate's signals since its rollout began, from the store's records.

An injected duplicate effect, an approval bypass or a broken audit chain stops a canary after
the next candidate node, whatever any clock says (signals are counted by audit sequence, not by
time); afterwards every new thread goes to the control and the candidate's threads stop.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from release_control_support import CANDIDATE, CONTROL, TwoReleases, audit_events, count, run, text
from support import shift_store_clock, tool_messages
from test_release_control_routing import admin

from toolgate.errors import ReleaseControlError
from toolgate.graph.rollout.stop import stop_rollout
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.rollout import RolloutStore
from toolgate.testing import ScriptedChatModel, ai, tool_call

STATUS = {"service_alias": "web"}


def canary_everyone(two: TwoReleases) -> str:
    control = two.control()
    control.shadow(admin(two), CANDIDATE)
    return control.canary(admin(two), CANDIDATE, 100).rollout_id


def phase(store: Store) -> str:
    state = RolloutStore(store).state(CONTROL)
    assert state.rollout is not None and state.rollout.authentic
    return state.rollout.phase


@pytest.mark.parametrize("skew", [timedelta(0), timedelta(days=-2), timedelta(hours=9)])
def test_an_injected_duplicate_effect_stops_the_canary(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skew: timedelta
) -> None:
    candidate = ScriptedChatModel(
        responses=[
            ai("", tool_call("get_service_status", STATUS)),
            text("web is up"),
            ai("", tool_call("get_service_status", STATUS)),
        ]
    )
    control = ScriptedChatModel(responses=[text("control here")])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate, CONTROL: control})
    canary_everyone(two)
    graph = two.graph()
    assert run(graph, "is web up?", "sam", "t-1")["release"] == CANDIDATE
    assert phase(store) == "canary"  # a healthy candidate keeps running
    shift_store_clock(monkeypatch, store, skew)  # no clock decides what counts

    for _ in range(2):  # one operation's effect recorded twice under the candidate
        Auditor(store, CANDIDATE).record("operation.completed", "completed", operation_key="op_injected")
    state = run(graph, "is web up now?", "sam", "t-2")  # the candidate's model node, then the monitor

    assert phase(store) == "stopped"
    [stopped] = audit_events(store, "release.stopped")
    assert stopped.code == "duplicate_effect" and stopped.tool_release == CANDIDATE
    assert stopped.detail["by"] == "automatic" and stopped.detail["reason"] == "duplicate_effect:1"
    assert state["status"] == "needs_review"  # the candidate's proposed call never runs
    assert '"task_stopped"' in str(tool_messages(state)[-1].content)
    assert two.handler_calls(CANDIDATE) == 1  # only the first thread's read, before the injection
    assert run(graph, "anyone?", "sam", "t-3")["release"] == CONTROL  # everyone else: control
    assert count(store, "release_pins", "thread_id = ?", ("t-3",)) == 0


def test_a_write_without_counted_approval_is_an_approval_bypass(store: Store, tmp_path: Path) -> None:
    candidate = ScriptedChatModel(responses=[text("hello")])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate})
    rollout_id = canary_everyone(two)
    Auditor(store, CANDIDATE).record(
        "handler.started", "started", operation_key="op_no_proposal", tool="restart_service"
    )
    run(two.graph(), "hello", "sam", "t-bypass")
    assert phase(store) == "stopped"
    state = RolloutStore(store).state(CONTROL)
    assert state.rollout is not None and state.rollout.rollout_id == rollout_id
    assert state.rollout.stop_reason == "approval_bypass:1" and state.rollout.changed_by == "automatic"


def test_a_broken_audit_chain_since_the_start_stops_the_canary(store: Store, tmp_path: Path) -> None:
    candidate = ScriptedChatModel(responses=[text("one"), text("two")])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate})
    canary_everyone(two)
    run(two.graph(), "hello", "sam", "t-gap-1")
    assert phase(store) == "canary"
    with store.transaction() as tx:  # someone with database access removes one event since the start
        if getattr(store, "dialect", "") == "postgres":
            tx.execute("ALTER TABLE audit_events DISABLE TRIGGER USER")
        else:
            tx.execute("DROP TRIGGER audit_no_delete")
        tx.execute("DELETE FROM audit_events WHERE event = ?", ("release.canary_started",))
    two.router._cursors.clear()  # a fresh process (the cursor only caches what it verified)
    run(two.graph(), "hello", "sam", "t-gap-2")
    assert phase(store) == "stopped"
    state = RolloutStore(store).state(CONTROL)
    assert state.rollout is not None and state.rollout.stop_reason.startswith("audit_gap:")


def test_a_single_unknown_tool_is_not_a_spike(store: Store, tmp_path: Path) -> None:
    candidate = ScriptedChatModel(responses=[ai("", tool_call("drop_database", {})), text("sorry")])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate})
    canary_everyone(two)
    state = run(two.graph(), "drop it", "sam", "t-unknown")
    assert state["status"] == "done" and phase(store) == "canary"
    assert count(store, "audit_events", "code = ? AND tool_release = ?", ("unknown_tool", CANDIDATE)) == 1


def test_a_tripped_candidate_is_never_promoted_and_a_stop_lands_once(store: Store, tmp_path: Path) -> None:
    """Promotion re-checks the automatic stop instead of trusting that the monitor ran: a tripped
    candidate is stopped and the promotion refused (``automatic_stop``); stopping the rollout again
    changes nothing (``phase_changed``, swallowed: whoever changed it first decided)."""
    models = {CANDIDATE: ScriptedChatModel(responses=[]), CONTROL: ScriptedChatModel(responses=[])}
    two = TwoReleases(store, tmp_path, models=models)
    canary_everyone(two)
    rollout = RolloutStore(store).state(CONTROL).rollout
    assert rollout is not None
    for _ in range(2):  # one operation's effect recorded twice under the candidate
        Auditor(store, CANDIDATE).record("operation.completed", "completed", operation_key="op_injected")
    with pytest.raises(ReleaseControlError) as tripped:
        two.control().promote(admin(two))
    assert tripped.value.code == "automatic_stop" and phase(store) == "stopped"
    assert RolloutStore(store).state(CONTROL).pointer.active == CONTROL  # type: ignore[union-attr]
    assert stop_rollout(store, CONTROL, rollout, "manual: again", by="ops") is None
    assert [e.detail["by"] for e in audit_events(store, "release.stopped")] == ["automatic"]
