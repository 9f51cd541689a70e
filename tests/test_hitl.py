"""Decisions sent with a resume (LangChain's human-in-the-loop shape), in process on both backends.

The resume value carries no authority: a decision is recorded as the authenticated person
resuming (here the embedding application's context), with every approval rule, and every
refusal is audited and reported in ``review`` and the next interrupt.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langgraph.types import Command
from support import REFUND_REQUEST, Harness, principal, start, tool_messages

from toolgate.errors import RunRefused
from toolgate.graph import Context
from toolgate.graph.review.hitl import parse_decisions, typed_like
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}


def waiting(harness: Harness, thread: str) -> tuple[Any, dict[str, Any]]:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    graph = harness.graph(model)
    facts = start(graph, REFUND_REQUEST, "cust-ada", thread)["__interrupt__"][0].value["toolgate"][
        "proposals"
    ][0]
    return graph, facts


def resume(graph: Any, thread: str, decisions: Any, who: str | None) -> dict[str, Any]:
    context = Context(principal=principal(who)) if who else Context()
    result: dict[str, Any] = graph.invoke(
        Command(resume=decisions), {"configurable": {"thread_id": thread}}, context=context
    )
    return result


def test_a_reviewer_approves_by_resuming_and_the_refund_runs_once(harness: Harness) -> None:
    graph, facts = waiting(harness, "t-hitl")
    done = resume(graph, "t-hitl", {"decisions": [{"type": "approve"}]}, "fiona")
    assert done["status"] == "done" and done["review"]["outcomes"][0]["result"] == "recorded"
    assert harness.payments() == 1 and harness.handler_calls["issue_refund"] == 1
    assert json.loads(str(tool_messages(done)[-1].content))["status"] == "completed"
    recorded = harness.store.approvals.for_proposal(facts["proposal_id"])
    assert [(d.reviewer_id, d.decision, d.authentic) for d in recorded] == [("fiona", "approve", True)]


@pytest.mark.parametrize(
    ("decisions", "who", "code"),
    [
        ({"decisions": [{"type": "approve"}]}, None, "missing_reviewer"),
        ({"decisions": [{"type": "approve"}]}, "cust-ada", "self_approval"),
        ({"decisions": [{"type": "approve"}, {"type": "approve"}]}, "fiona", "decision_count"),
        ({"decisions": [{"type": "launch"}]}, "fiona", "malformed_decision"),
        ({"decisions": []}, "fiona", "malformed_decision"),
        ({"decisions": [{"type": "reject"}]}, "fiona", "reason_required"),
        ({"decisions": [{"type": "approve", "digest": "0" * 64}]}, "fiona", "digest_mismatch"),
        ([{"type": "accept"}], "omar", "missing_role"),
    ],
)
def test_a_refused_decision_changes_nothing_and_says_why(
    harness: Harness, decisions: Any, who: str | None, code: str
) -> None:
    graph, facts = waiting(harness, f"t-refused-{code}")
    result = resume(graph, f"t-refused-{code}", decisions, who)
    assert result["status"] == "awaiting_approval" and "__interrupt__" in result
    assert {o["code"] for o in result["review"]["outcomes"]} == {code}
    again = result["__interrupt__"][0].value["toolgate"]["last_review"]["outcomes"]
    assert {o["code"] for o in again} == {code}  # the next interrupt says why, too
    # and so does the request a chat UI shows the reviewer again
    description = result["__interrupt__"][0].value["action_requests"][0]["description"]
    assert description.startswith("Last decision refused (") and f": {code}): " in description
    op = harness.store.operations.get(facts["operation_key"])
    assert op is not None and op.status == "pending_approval" and harness.payments() == 0
    assert [e.code for e in harness.store.audit.events() if e.event == "approval.refused"] == [code]


def test_another_tenants_reviewer_is_refused_before_anything_is_recorded(harness: Harness) -> None:
    graph, facts = waiting(harness, "t-globex")
    with pytest.raises(RunRefused, match="thread_owner"):
        resume(graph, "t-globex", {"decisions": [{"type": "approve"}]}, "gina")
    assert harness.store.approvals.for_proposal(facts["proposal_id"]) == [] and harness.payments() == 0
    assert [e.code for e in harness.store.audit.events() if e.event == "identity.refused"] == ["thread_owner"]
    # the thread still waits for a reviewer of its own tenant
    done = resume(graph, "t-globex", {"decisions": [{"type": "approve"}]}, "fiona")
    assert done["status"] == "done" and harness.payments() == 1


def test_a_wake_up_is_not_a_decision(harness: Harness) -> None:
    graph, facts = waiting(harness, "t-wake")
    result = resume(graph, "t-wake", {"wake": True}, "fiona")
    assert result["status"] == "awaiting_approval" and "review" not in result
    assert not result["__interrupt__"][0].value["action_requests"][0]["description"].startswith("Last")
    assert harness.store.approvals.for_proposal(facts["proposal_id"]) == []


def test_agent_inbox_responses_and_edits_are_understood() -> None:
    parsed = parse_decisions(
        [
            {"type": "accept", "args": None},
            {"type": "response", "args": "wrong order"},
            {"type": "edit", "args": {"action": "issue_refund", "args": {"amount_cents": 1}}},
            {"type": "ignore"},
        ]
    )
    assert parsed is not None
    assert [(d.kind, d.message, d.tool, d.arguments) for d in parsed] == [
        ("approve", "", None, None),
        ("reject", "wrong order", None, None),
        ("edit", "", "issue_refund", {"amount_cents": 1}),
        ("ignore", "", None, None),
    ]
    assert parse_decisions({"wake": True}) is None and parse_decisions(None) is None


def test_a_chat_forms_text_is_read_back_as_the_kind_of_value_it_replaced() -> None:
    """agent-chat-ui's edit form hands every changed field back as text."""
    original = {
        "order_id": "O-1",
        "amount_cents": 4999,
        "notify": True,
        "lines": [1],
        "meta": {"a": 1},
        "note": None,
    }
    edited = {
        "order_id": "O-2",
        "amount_cents": "700",
        "notify": "false",
        "lines": "[1, 2]",
        "meta": '{"a": 2}',
        "note": "12",
    }
    assert typed_like(edited, original) == {
        "order_id": "O-2",
        "amount_cents": 700,
        "notify": False,
        "lines": [1, 2],
        "meta": {"a": 2},
        "note": "12",
    }
    # text that is not JSON of the replaced kind stays text, for the tool's schema to refuse with its reason
    odd = {"amount_cents": "seven", "notify": "1", "order_id": "5", "lines": "{}"}
    assert typed_like(odd, original) == odd
