"""Approvals that bind one exact operation: regressions for what other frameworks get wrong."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from langgraph.types import Command
from support import REFUND_REQUEST, TEST_KEY, Harness, principal, shift_store_clock, start, tool_messages

from toolgate.clock import parse_iso
from toolgate.errors import ApprovalError, IdentityError
from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.graph.review.edits import edit_proposal
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.demo.identities import demo_token

REFUND = {"order_id": "O-5512", "amount_cents": 1000, "reason": "damaged"}


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(SQLiteStore(tmp_path / "approvals.sqlite", key=TEST_KEY))


def resume(graph: object, thread: str, payload: object = None) -> dict:  # type: ignore[type-arg]
    return graph.invoke(  # type: ignore[attr-defined, no-any-return]
        Command(resume=payload or {"wake": True}), {"configurable": {"thread_id": thread}}, context=Context()
    )


def proposals_of(result: dict) -> dict[str, dict]:  # type: ignore[type-arg]
    return {p["call_id"]: p for p in result["__interrupt__"][0].value["toolgate"]["proposals"]}


def test_a_mixed_batch_gives_every_call_its_own_result_and_keeps_the_thread(harness: Harness) -> None:
    calls = [
        tool_call("issue_refund", {**REFUND, "amount_cents": 1000}, "approve_me"),
        tool_call("issue_refund", {**REFUND, "amount_cents": 1100}, "reject_me"),
        tool_call("issue_refund", {**REFUND, "amount_cents": 1200}, "leave_me"),
    ]
    model = ScriptedChatModel(responses=[ai("", *calls), ai("Here is where each refund stands.")])
    graph = harness.graph(model)
    facts = proposals_of(start(graph, REFUND_REQUEST, "cust-ada", "t-mixed"))
    gw = harness.gateway()
    decide(gw, facts["approve_me"]["proposal_id"], principal("fiona"), "approve")
    decide(gw, facts["reject_me"]["proposal_id"], principal("fiona"), "reject", reason="duplicate request")
    final = resume(graph, "t-mixed")
    results = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(final)}
    assert results["approve_me"]["status"] == "completed"
    assert (
        results["reject_me"]["status"] == "rejected"
        and "duplicate request" in results["reject_me"]["message"]
    )
    assert results["leave_me"]["status"] == "pending_approval" and results["leave_me"]["retryable"] is False
    assert (
        final["status"] == "awaiting_approval"
        and final["outcomes"]["leave_me"]["status"] == "pending_approval"
    )
    assert harness.handler_calls["issue_refund"] == 1 and harness.refunds() == 1
    model.assert_complete()
    later = harness.gateway().executor.deliver(facts["leave_me"]["operation_key"], worker_id="w")
    assert later.status == "pending_approval" and harness.refunds() == 1  # a worker cannot skip the review


def test_the_same_interrupt_resumed_twice_executes_once(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done"), ai("again")]
    )
    graph = harness.graph(model)
    facts = proposals_of(start(graph, REFUND_REQUEST, "cust-ada", "t-twice"))
    decide(harness.gateway(), facts["c1"]["proposal_id"], principal("fiona"), "approve")
    resume(graph, "t-twice")
    resume(graph, "t-twice")  # a finished thread: nothing happens
    assert harness.handler_calls["issue_refund"] == 1 and harness.payments() == 1


def test_an_edit_that_changes_nothing_or_outlives_its_requester_is_refused(harness: Harness) -> None:
    """An edit must change the arguments (else approve the original), and is judged for its
    requester, who must still be an active identity."""
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    original = proposals_of(start(harness.graph(model), REFUND_REQUEST, "cust-ada", "t-edit-none"))["c1"]
    gw = harness.gateway()
    with pytest.raises(ApprovalError) as same:
        edit_proposal(gw, original["proposal_id"], principal("fiona"), tool="issue_refund", arguments=REFUND)
    assert same.value.code == "no_change"
    gw.directory.revoke("cust-ada", by=None)
    with pytest.raises(ApprovalError) as gone:
        edit_proposal(
            gw,
            original["proposal_id"],
            principal("fiona"),
            tool="issue_refund",
            arguments={**REFUND, "amount_cents": 700},
        )
    assert gone.value.code == "requester_inactive"
    assert harness.store.operations.get(original["operation_key"]).status == "pending_approval"  # type: ignore[union-attr]


def test_approved_arguments_are_the_executed_ones_even_if_the_model_call_is_replayed(
    harness: Harness,
) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    graph = harness.graph(model)
    facts = proposals_of(start(graph, REFUND_REQUEST, "cust-ada", "t-replay"))
    decide(harness.gateway(), facts["c1"]["proposal_id"], principal("fiona"), "approve")
    # a replayed, different model call in another task can only make a new proposal
    other = ScriptedChatModel(
        responses=[ai("", tool_call("issue_refund", {**REFUND, "amount_cents": 4000}, "c1"))]
    )
    replay = proposals_of(start(harness.graph(other), REFUND_REQUEST, "cust-ada", "t-replay-2"))
    assert replay["c1"]["operation_key"] != facts["c1"]["operation_key"]
    resume(graph, "t-replay")
    refund = harness.store.operations.get(facts["c1"]["operation_key"])
    assert refund is not None and refund.result is not None and refund.result["amount_cents"] == 1000
    assert harness.refunds() == 1 and harness.store.operations.get(replay["c1"]["operation_key"]).status == (  # type: ignore[union-attr]
        "pending_approval"
    )


def test_an_edit_is_a_new_proposal_that_cannot_switch_tools_or_escape_policy(harness: Harness) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    graph = harness.graph(model)
    original = proposals_of(start(graph, REFUND_REQUEST, "cust-ada", "t-edit"))["c1"]
    gw = harness.gateway()
    with pytest.raises(ApprovalError) as switched:
        edit_proposal(
            gw,
            original["proposal_id"],
            principal("fiona"),
            tool="restart_service",
            arguments={"service_alias": "web", "reason": "because"},
        )
    assert switched.value.code == "tool_switch"
    with pytest.raises(ApprovalError) as escaped:
        edit_proposal(
            gw,
            original["proposal_id"],
            principal("fiona"),
            tool="issue_refund",
            arguments={**REFUND, "order_id": "O-7001"},
        )
    assert escaped.value.code == "cross_tenant"
    with pytest.raises(ApprovalError) as too_much:
        edit_proposal(
            gw,
            original["proposal_id"],
            principal("fiona"),
            tool="issue_refund",
            arguments={**REFUND, "amount_cents": 4999 + 1},
        )
    assert too_much.value.code == "semantic_invalid"
    edited = edit_proposal(
        gw,
        original["proposal_id"],
        principal("fiona"),
        tool="issue_refund",
        arguments={**REFUND, "amount_cents": 700},
    )
    assert edited.supersedes == original["proposal_id"] and edited.digest != original["digest"]
    assert harness.store.operations.get(original["operation_key"]).status == "rejected"  # type: ignore[union-attr]
    waiting = resume(graph, "t-edit")
    assert proposals_of(waiting)["c1"]["proposal_id"] == edited.proposal_id  # needs its own approval
    assert harness.refunds() == 0 and edited.editors == ("fiona",)
    with pytest.raises(ApprovalError) as own_edit:  # whoever shaped the arguments cannot approve them
        decide(gw, edited.proposal_id, principal("fiona"), "approve")
    assert own_edit.value.code == "editor_approval"
    decide(gw, edited.proposal_id, principal("rita"), "approve")
    assert harness.store.operations.get(edited.operation_key).status == "pending_approval"  # type: ignore[union-attr]
    decide(gw, edited.proposal_id, principal("sam"), "approve")
    final = resume(graph, "t-edit")
    result = json.loads(str(tool_messages(final)[-1].content))
    assert result["status"] == "completed" and result["data"]["amount_cents"] == 700
    assert harness.refunds() == 1


def test_a_stale_approval_cannot_be_used_after_expiry(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("expired")])
    graph = harness.graph(model)
    facts = proposals_of(start(graph, REFUND_REQUEST, "cust-ada", "t-stale"))
    decide(harness.gateway(), facts["c1"]["proposal_id"], principal("fiona"), "approve")
    shift_store_clock(monkeypatch, harness.store, timedelta(minutes=16))  # past the 15 minutes
    final = resume(graph, "t-stale")
    monkeypatch.undo()
    result = json.loads(str(tool_messages(final)[-1].content))
    assert result["status"] == "expired" and harness.payments() == 0
    assert harness.store.operations.get(facts["c1"]["operation_key"]).status == "expired"  # type: ignore[union-attr]
    with pytest.raises(ApprovalError) as late:
        decide(harness.gateway(), facts["c1"]["proposal_id"], principal("sam"), "approve")
    assert late.value.code == "expired"


def test_a_decision_is_stamped_and_judged_for_expiry_by_its_own_transactions_clock(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1"))])
    facts = proposals_of(start(harness.graph(model), REFUND_REQUEST, "cust-ada", "t-late"))
    gw = harness.gateway()
    shift_store_clock(monkeypatch, harness.store, timedelta(minutes=14))  # inside the 15 minutes
    on_time = decide(gw, facts["c1"]["proposal_id"], principal("fiona"), "approve")
    stored = harness.store.approvals.for_proposal(facts["c1"]["proposal_id"])
    assert [d.decided_at for d in stored] == [on_time.record.decided_at]
    decided, expires = parse_iso(on_time.record.decided_at), parse_iso(facts["c1"]["expires_at"])
    assert expires - timedelta(minutes=1) <= decided < expires and stored[0].authentic  # the store's time
    monkeypatch.undo()
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", {**REFUND, "amount_cents": 9}, "c1"))])
    late = proposals_of(start(harness.graph(model), REFUND_REQUEST, "cust-ada", "t-later"))
    shift_store_clock(monkeypatch, harness.store, timedelta(minutes=16))  # past the 15 minutes
    with pytest.raises(ApprovalError) as refused:
        decide(gw, late["c1"]["proposal_id"], principal("fiona"), "approve")
    assert refused.value.code == "expired"
    assert harness.store.approvals.for_proposal(late["c1"]["proposal_id"]) == []  # nothing recorded
    op = harness.store.operations.get(late["c1"]["operation_key"])
    assert op is not None and op.status == "expired"
    events = [(e.event, e.code) for e in harness.store.audit.events(proposal_id=late["c1"]["proposal_id"])]
    assert events[-2:] == [("proposal.expired", None), ("approval.refused", "expired")]


def test_reviewers_authenticate_with_their_token(harness: Harness) -> None:
    directory = harness.gateway().directory
    assert directory.authenticate("fiona", demo_token("fiona")).roles == frozenset({"finance"})
    with pytest.raises(IdentityError, match="authentication failed") as wrong:
        directory.authenticate("fiona", demo_token("rita"))
    assert wrong.value.code == "authentication_failed"
    with pytest.raises(IdentityError, match="no token") as missing:
        directory.authenticate("fiona", None)
    assert missing.value.code == "missing_token"
    with harness.store.transaction(write=False) as tx:
        rows = tx.execute("SELECT token_hash FROM identities")
    assert rows and not any("demo-token" in str(r["token_hash"]) for r in rows)  # only keyed hashes
