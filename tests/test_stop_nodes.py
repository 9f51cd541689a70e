"""The two ways a thread's release stops serving it share one node (`stop_task_node`).

A candidate stopped by its rollout (`halt_node`) and a pinned release that cannot be served or a
tampered pin (`thread_pins.stop_node`) both answer every waiting call as not run, audit
``release.thread_stopped`` and stop the task for review. These tests pin the exact messages,
call records, audit codes and details and status reasons each gave before they shared the node.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.runtime import Runtime
from support import Harness, audit_events, principal

from toolgate.graph.context import Context
from toolgate.graph.rollout.router import stop_node
from toolgate.graph.rollout.stop import halt_node
from toolgate.store.rollout_records import Rollout
from toolgate.testing import ai, tool_call

ROLLOUT = Rollout(
    rollout_id="rol_1",
    configured="ops-tools",
    control="ops-tools/1.0.0",
    control_sha256="a" * 64,
    candidate="ops-tools/1.1.0",
    candidate_sha256="b" * 64,
    phase="stopped",
    canary_bp=200,
    salt="s",
    started_at="2026-01-01T00:00:00.000000Z",
    started_seq=0,
)


def waiting_state() -> dict[str, Any]:
    """A turn whose two proposed calls have no answer yet."""
    turn: AIMessage = ai(
        "",
        tool_call("lookup_order", {"order_id": "O-5512"}, "c1"),
        tool_call("issue_refund", {"order_id": "O-5512"}, "c2"),
    )
    return {"messages": [HumanMessage("refund O-5512"), turn], "budget": {"model_turns": 1}}


def run(node: Any, thread: str) -> dict[str, Any]:
    runtime = Runtime(context=Context(principal=principal("cust-ada")))
    update: dict[str, Any] = node(waiting_state(), runtime, {"configurable": {"thread_id": thread}})
    return update


def answers(update: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(m.tool_call_id, json.loads(m.content)) for m in update["messages"]]


def test_a_stopped_candidate_halts_its_thread_exactly_as_before(harness: Harness) -> None:
    update = run(halt_node(harness.gateway(), ROLLOUT), "t-halt")
    message = (
        "Not run: release ops-tools/1.1.0, which served this task, was stopped (stopped). Start a new task."
    )
    expected = {"status": "rejected", "error": "task_stopped", "message": message, "retryable": False}
    assert answers(update) == [("c1", expected), ("c2", expected)]
    assert {k: (r["tool"], r["phase"], r["code"], r["turn"]) for k, r in update["calls"].items()} == {
        "c1": ("lookup_order", "rejected", "task_stopped", 1),
        "c2": ("issue_refund", "rejected", "task_stopped", 1),
    }
    assert (update["awaiting"], update["status"]) == ([], "needs_review")
    assert update["status_reason"] == "release ops-tools/1.1.0 serving this task was stopped"
    [event] = audit_events(harness.store, "release.thread_stopped")
    assert (event.result, event.code, event.thread_id) == ("refused", "release_stopped", "t-halt")
    assert event.actor_id  # the run's principal, keyed
    assert event.detail == {"rollout_id": "rol_1", "candidate": "ops-tools/1.1.0", "calls": 2}


def test_an_unservable_pin_stops_its_thread_exactly_as_before(harness: Harness) -> None:
    gw = harness.gateway()
    why = "release ops-tools/9.9.9, which this task is pinned to, cannot be served here"
    update = run(stop_node(gw, ("release_unavailable", why, "ops-tools/9.9.9")), "t-pin")
    expected = {
        "status": "rejected",
        "error": "task_stopped",
        "message": f"Not run: {why}. Start a new task.",
        "retryable": False,
    }
    assert answers(update) == [("c1", expected), ("c2", expected)]
    assert {k: (r["phase"], r["code"]) for k, r in update["calls"].items()} == {
        "c1": ("rejected", "task_stopped"),
        "c2": ("rejected", "task_stopped"),
    }
    assert (update["awaiting"], update["status"]) == ([], "needs_review")
    assert update["status_reason"] == f"release_unavailable: {why}"
    [event] = audit_events(harness.store, "release.thread_stopped")
    assert (event.result, event.code, event.thread_id) == ("refused", "release_unavailable", "t-pin")
    assert event.detail == {"pinned": "ops-tools/9.9.9", "served": gw.registry.release, "calls": 2}


def test_a_turn_with_nothing_waiting_still_stops_and_is_audited(harness: Harness) -> None:
    gw = harness.gateway()
    node = stop_node(gw, ("thread_pin_tampered", "its release pin does not verify", ""))
    runtime = Runtime(context=Context(principal=principal("cust-ada")))
    update = node({"messages": [HumanMessage("hi")]}, runtime, {"configurable": {"thread_id": "t-none"}})
    assert (update["messages"], update["calls"], update["status"]) == ([], {}, "needs_review")
    assert update["status_reason"] == "thread_pin_tampered: its release pin does not verify"
    [event] = audit_events(harness.store, "release.thread_stopped")
    assert (event.code, event.detail["calls"], event.detail["pinned"]) == ("thread_pin_tampered", 0, "")
