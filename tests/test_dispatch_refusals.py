"""Each refusal of the dispatch boundary: zero handler calls, one audit event, a ToolMessage
with the same tool_call_id and the stable code."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import Harness, start, tool_messages

from toolgate.testing import ScriptedChatModel, ai, tool_call

CASES: dict[str, tuple[str, Any]] = {
    "unknown_tool": ("cust-ada", ai("", tool_call("lookup_ordr", {"order_id": "O-5512"}, "call_u"))),
    "malformed_arguments": (
        "cust-ada",
        ai(
            "",
            invalid=[
                {"name": "lookup_order", "args": '{"order_id": "O-55', "id": "call_u", "error": "bad json"}
            ],
        ),
    ),
    "schema_invalid": (
        "cust-ada",
        ai(
            "",
            tool_call(
                "issue_refund", {"order_id": "O-5512", "amount_cents": "49.99", "reason": "damaged"}, "call_u"
            ),
        ),
    ),
    "unauthorized": (
        "cust-ada",
        ai("", tool_call("restart_service", {"service_alias": "web", "reason": "slow"}, "call_u")),
    ),
    "cross_tenant": ("cust-ada", ai("", tool_call("lookup_order", {"order_id": "O-7001"}, "call_u"))),
}


@pytest.mark.parametrize("code", list(CASES))
def test_refusal_runs_nothing_and_answers_the_same_call_id(harness: Harness, code: str) -> None:
    user, bad = CASES[code]
    model = ScriptedChatModel(responses=[bad, ai("Sorry, I cannot do that.")])
    graph = harness.graph(model)
    state = start(graph, "please help", user, "t-refusal")

    assert harness.total_handler_calls() == 0
    assert harness.store.proposals.list() == []
    messages = tool_messages(state)
    assert [m.tool_call_id for m in messages] == ["call_u"]
    payload = json.loads(str(messages[0].content))
    assert payload["status"] == "rejected" and payload["error"] == code
    events = harness.store.audit.events(call_ids=["call_u"])
    assert [(e.event, e.code) for e in events] == [("call.rejected", code)]
    assert state["status"] == "done" and state["outcomes"]["call_u"]["status"] == "rejected"
    model.assert_complete()


def test_unknown_tool_suggests_only_tools_the_principal_may_see(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call("restart_servce", {"service_alias": "web"}, "c1"),
                tool_call("lookup_ordr", {}, "c2"),
            ),
            ai("ok"),
        ]
    )
    state = start(harness.graph(model), "x", "cust-ada", "t-suggest")
    payloads = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}
    assert "suggested_fix" not in payloads["c1"]  # restart_service is hidden from this customer
    assert payloads["c2"]["suggested_fix"] == "did you mean 'lookup_order'?"


def test_schema_errors_name_the_field_and_constraint_without_echoing_input(harness: Harness) -> None:
    secret = "customer-private-note-never-echo-7731"  # not secret-looking: it reaches the schema check
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call(
                    "issue_refund", {"order_id": secret, "amount_cents": -5, "reason": "damaged"}, "c1"
                ),
            ),
            ai("ok"),
        ]
    )
    state = start(harness.graph(model), "x", "cust-ada", "t-schema")
    message = tool_messages(state)[0]
    payload = json.loads(str(message.content))
    assert payload["error"] == "schema_invalid" and payload["retryable"] is True
    assert "order_id: String should match pattern" in payload["message"]
    assert "amount_cents: Input should be greater than 0" in payload["message"]
    assert secret not in str(message.content)
    assert all(secret not in json.dumps(e.detail) for e in harness.store.audit.events())


def test_several_calls_in_one_turn_each_get_their_own_answer(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call("lookup_order", {"order_id": "O-5512"}, "ok1"),
                tool_call("lookup_order", {"order_id": "O-7001"}, "bad1"),
                invalid=[{"name": "lookup_order", "args": "{", "id": "bad2", "error": "x"}],
            ),
            ai("done"),
        ]
    )
    state = start(harness.graph(model), "x", "cust-ada", "t-multi")
    by_id = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}
    assert by_id["ok1"]["status"] == "completed" and by_id["ok1"]["data"]["order_id"] == "O-5512"
    assert by_id["bad1"]["error"] == "cross_tenant" and by_id["bad2"]["error"] == "malformed_arguments"
    assert harness.handler_calls == {"lookup_order": 1}


def test_read_output_is_reduced_to_the_result_contract(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")), ai("ok")]
    )
    state = start(harness.graph(model), "x", "cust-ada", "t-output")
    content = str(tool_messages(state)[0].content)
    assert "4111111111111111" not in content and "card_number" not in content
    payload = json.loads(content)
    assert payload["provenance"]["tool"] == "lookup_order" and payload["provenance"]["version"] == "1.0.0"
