"""Tool spans carry the tool version, the principal's hash (the audit log's, never the raw id), the
tenant and the argument and result sizes in bytes (issue 16, item 9; chapter §13.1)."""

from __future__ import annotations

import json
from typing import Any

from langgraph.types import Command
from support import Harness, principal, start, tool_messages
from test_telemetry import Otel, by_name, otel  # noqa: F401 - the fixture

from toolgate.canonical import canonical_json
from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.store.audit import actor_hash
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 1999, "reason": "damaged"}


def attributes(exported: Otel, tool: str) -> dict[str, Any]:
    (span,) = by_name(exported.finished(), f"execute_tool {tool}")
    return dict(span.attributes or {})


def test_read_and_write_spans_name_version_principal_tenant_and_sizes(harness: Harness, otel: Otel) -> None:  # noqa: F811
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "r1")),
            ai("", tool_call("issue_refund", REFUND, "w1")),
            ai("refunded"),
        ]
    )
    graph = harness.graph(model)
    first = start(graph, "refund O-5512", "cust-ada", "t-span")
    (proposal, _) = harness.store.proposals.list()[0]
    decide(harness.gateway(), proposal.proposal_id, principal("fiona"), "approve")
    final = graph.invoke(
        Command(resume={"wake": True}), {"configurable": {"thread_id": "t-span"}}, context=Context()
    )
    assert first["__interrupt__"] and final["status"] == "done"

    hashed = actor_hash(harness.store.keys.key("actor"), "cust-ada")
    accepted = [e for e in harness.store.audit.events() if e.event == "call.accepted"]
    assert {e.actor_id for e in accepted} == {hashed}  # the span's hash is the audit log's
    results = {m.tool_call_id: str(m.content) for m in tool_messages(final)}
    for tool, call_id, args in (
        ("lookup_order", "r1", {"order_id": "O-5512"}),
        ("issue_refund", "w1", REFUND),
    ):
        attrs = attributes(otel, tool)
        spec = harness.registry.tools[tool]
        assert attrs["toolgate.tool.version"] == spec.version
        assert attrs["toolgate.principal.hash"] == hashed
        assert attrs["toolgate.tenant_id"] == "acme"
        assert attrs["toolgate.tool.argument_bytes"] == len(canonical_json(args).encode())
        assert attrs["toolgate.tool.result_bytes"] == len(results[call_id].encode())
        assert json.loads(results[call_id])["status"] == "completed"
        assert not [k for k, v in attrs.items() if "cust-ada" in str(v)]  # never the raw user id
