"""Spans through the real graph: one trace per task, tool spans as children of the model span
that proposed them, and audit events carrying the same trace id (in-memory exporter)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support import REFUND_REQUEST, TEST_KEY, Harness, principal, start

from toolgate import telemetry
from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND_ARGS = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(SQLiteStore(tmp_path / "trace.sqlite", key=TEST_KEY))


@pytest.fixture
def exporter() -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    telemetry.configure(provider, MeterProvider(metric_readers=[reader]))
    yield spans, reader
    telemetry.configure()


def test_the_refund_story_is_one_trace_joined_to_the_audit_log(harness: Harness, exporter) -> None:  # type: ignore[no-untyped-def]
    spans_out, reader = exporter
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call("lookup_order", {"order_id": "O-5512"}, "call_lookup"),
                tool_call("no_such_tool", {}, "bad"),
            ),
            ai("", tool_call("issue_refund", REFUND_ARGS, "call_refund")),
            ai("Your refund is complete."),
        ]
    )
    graph = harness.graph(model)
    first = start(graph, REFUND_REQUEST, "cust-ada", "t-trace")
    proposal_id = first["__interrupt__"][0].value["toolgate"]["proposals"][0]["proposal_id"]
    decide(harness.gateway(), proposal_id, principal("fiona"), "approve")
    final = graph.invoke(
        Command(resume={"wake": True}), {"configurable": {"thread_id": "t-trace"}}, context=Context()
    )
    assert final["status"] == "done"

    spans = spans_out.get_finished_spans()
    trace_ids = {s.context.trace_id for s in spans}
    assert len(trace_ids) == 1
    trace_id = format(next(iter(trace_ids)), "032x")
    chats = [s for s in spans if s.name.startswith("chat")]
    assert [s.attributes["toolgate.turn"] for s in chats] == [1, 2, 3]
    assert chats[0].attributes["gen_ai.operation.name"] == "chat"
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in spans if s.name.startswith("execute_tool")}
    assert tools["call_lookup"].parent.span_id == chats[0].context.span_id
    assert tools["call_refund"].parent.span_id == chats[1].context.span_id
    assert tools["call_refund"].attributes["gen_ai.tool.name"] == "issue_refund"
    assert tools["call_refund"].attributes["toolgate.outcome"] == "completed"
    assert tools["call_refund"].attributes["toolgate.operation_key"].startswith("op_")
    assert tools["call_refund"].attributes["toolgate.releases.bundle"] == "ops-tools/1.0.0"

    graph_events = [
        e
        for e in harness.store.audit.events()
        if e.event
        in (
            "model.response",
            "call.accepted",
            "call.rejected",
            "call.completed",
            "proposal.created",
            "approval.recorded",
            "proposal.approved",
            "operation.claimed",
            "handler.finished",
        )
    ]
    assert graph_events and {e.trace_id for e in graph_events} == {trace_id}

    metrics = reader.get_metrics_data()
    names = {m.name for rm in metrics.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"toolgate.tool.calls", "toolgate.tool.duration", "toolgate.task.tool_calls"} <= names


def test_parallel_reads_are_children_and_the_callers_trace_id_is_kept(harness: Harness, exporter) -> None:  # type: ignore[no-untyped-def]
    spans_out, _ = exporter
    caller = "4bf92f3577b34da6a3ce929d0e0e4736"
    calls = [
        tool_call("lookup_order", {"order_id": order}, f"c{i}")
        for i, order in enumerate(["O-5512", "O-5514"])
    ]
    model = ScriptedChatModel(responses=[ai("", *calls), ai("done")])
    harness.graph(model).invoke(
        {"messages": [HumanMessage("look up")]},
        {"configurable": {"thread_id": "t-par"}},
        context=Context(principal=principal("cust-ada"), trace_id=caller),
    )
    spans = spans_out.get_finished_spans()
    chats = [s for s in spans if s.name.startswith("chat")]
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    assert len(tools) == 2 and {format(s.context.trace_id, "032x") for s in spans} == {caller}
    assert all(t.parent is not None and t.parent.span_id == chats[0].context.span_id for t in tools)
    assert {e.trace_id for e in harness.store.audit.events() if e.event == "call.completed"} == {caller}
