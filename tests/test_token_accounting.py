"""Token accounting: each model turn's input, output and reasoning tokens, as the response reported
them, reach the model span, the token metric and the audit's ``model.response`` event; the trace
sums them per task turn; a response without usage is recorded as unknown, never as 0.

The reported figures come from the real ``ChatOpenAI`` (Responses API) against the local replay
server of tests/replay_openai.py, so they pass through langchain-openai's own normalization.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from provider_flows import ANTHROPIC, OPENAI, run_task
from replay_anthropic import message as anthropic_message
from replay_anthropic import text_block
from replay_anthropic import usage as anthropic_usage
from replay_openai import FAKE_KEY, function_call_item, message_item, reasoning_item, response, usage
from support import Harness, audit_events, start

from toolgate import telemetry
from toolgate.forensics import latest_task_tokens, trace
from toolgate.models.offline import OfflineDemoModel
from toolgate.policy.output import TRUNCATED, bound
from toolgate.telemetry.tokens import TokenUsage, estimate_tokens, request_text, total, usage_of
from toolgate.testing import ScriptedChatModel, ai, tool_call

CALL_ID = "call_Tk9rW2xQ7mLp4ZbN"
SNAPSHOT = "gpt-5-mini-2025-08-07"
ENCRYPTED = "gAAAAABoTk9rW2xQ7mLp4ZbN" + "b3BhcXVlIHJlYXNvbmluZw" * 8 + "=="


def cached(figures: dict[str, Any], cached_tokens: int) -> dict[str, Any]:
    """``usage(...)`` with ``cached_tokens`` of the input read from the provider's cache."""
    return {**figures, "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0}}


def script() -> list[Any]:
    """Task 1: reasoning and a ``lookup_order`` call, then an answer. Task 2: one answer."""
    return [
        response(
            "resp_tk_1",
            [
                reasoning_item("rs_tk_1", ENCRYPTED),
                function_call_item("fc_tk_1", CALL_ID, "lookup_order", {"order_id": "O-5512"}),
            ],
            model=SNAPSHOT,
            tokens=cached(usage(912, 188, 128), 512),
        ),
        response("resp_tk_2", [message_item("msg_tk_2", "It was delivered.")], model=SNAPSHOT, tokens=usage(1204, 41, 16)),
        response("resp_tk_3", [message_item("msg_tk_3", "You are welcome.")], model=SNAPSHOT, tokens=usage(1300, 9, 0)),
    ]  # fmt: skip


class Otel:
    """Private SDK providers handed to toolgate.telemetry for one test."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.reader = InMemoryMetricReader()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def model_spans(self) -> list[dict[str, Any]]:
        return [
            dict(s.attributes or {}) for s in self.spans.get_finished_spans() if s.name.startswith("chat ")
        ]

    def token_points(self) -> dict[str, tuple[int, int]]:
        """``gen_ai.token.type`` -> (sum, count) of ``gen_ai.client.token.usage``."""
        data = self.reader.get_metrics_data()
        out: dict[str, tuple[int, int]] = {}
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == telemetry.metrics.TOKEN_USAGE_METRIC:
                        for point in metric.data.data_points:
                            kind = str(point.attributes["gen_ai.token.type"])
                            before = out.get(kind, (0, 0))
                            out[kind] = (before[0] + int(point.sum), before[1] + int(point.count))
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    made = Otel()
    telemetry.configure(tracer_provider=made.tracer_provider, meter_provider=made.meter_provider)
    try:
        yield made
    finally:
        telemetry.configure()
        made.tracer_provider.shutdown()
        made.meter_provider.shutdown()


def model_events(harness: Harness) -> list[Any]:
    return audit_events(harness.store, "model.response")


def test_reported_usage_reaches_span_metric_and_audit_and_is_summed_per_task(
    harness: Harness, otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    OPENAI.local_only_here(monkeypatch)
    with OPENAI.serve(script()) as replay:
        graph = OPENAI.graph(harness, replay)
        first = start(graph, "Where is my order O-5512?", "cust-ada", "t-tokens")
        second = start(graph, "Thanks!", "cust-ada", "t-tokens")
        assert len(replay.bodies()) == 3 and replay.script == []
    assert first["status"] == second["status"] == "done"
    assert harness.handler_calls["lookup_order"] == 1

    events = model_events(harness)
    assert [(e.detail["task"], e.detail["turn"], e.detail["tokens"]) for e in events] == [
        (1, 1, {"input": 912, "output": 188, "reasoning": 128, "cache_read": 512, "source": "reported"}),
        (1, 2, {"input": 1204, "output": 41, "reasoning": 16, "cache_read": 0, "source": "reported"}),
        (2, 3, {"input": 1300, "output": 9, "reasoning": 0, "cache_read": 0, "source": "reported"}),
    ]
    # the trace of the call sums its own task turn only; the thread's latest task is the second
    report = trace(harness.store, graph_auditor(harness), call_id=CALL_ID)
    assert report.tokens is not None
    assert report.tokens.line() == "tokens input=2116 output=229 reasoning=144 model_turns=2 source=reported"
    latest = latest_task_tokens(harness.store, "t-tokens")
    assert latest is not None
    assert latest.line() == "tokens input=1300 output=9 reasoning=0 model_turns=1 source=reported"

    spans = otel.model_spans()
    assert [
        (
            s["gen_ai.usage.input_tokens"],
            s["gen_ai.usage.output_tokens"],
            s["gen_ai.usage.reasoning.output_tokens"],
        )
        for s in spans
    ] == [(912, 188, 128), (1204, 41, 16), (1300, 9, 0)]
    assert spans[0]["gen_ai.usage.cache_read.input_tokens"] == 512
    assert {s["toolgate.usage.source"] for s in spans} == {"reported"}
    assert otel.token_points() == {"input": (3416, 3), "output": (238, 3)}
    # the fake key went to the local server only: not into the audit log or the spans
    assert FAKE_KEY not in json.dumps([e.__dict__ for e in harness.store.audit.events()], default=str)
    assert FAKE_KEY not in json.dumps(spans, default=str)


def graph_auditor(harness: Harness) -> Any:
    return harness.gateway().auditor


def test_a_response_without_usage_is_unknown_never_zero(harness: Harness, otel: Otel) -> None:
    no_usage = ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c-none"))
    partial = AIMessage(
        content="Delivered.", usage_metadata={"input_tokens": 50, "output_tokens": 5, "total_tokens": 55}
    )
    model = ScriptedChatModel(responses=[no_usage, partial])
    start(harness.graph(model), "Where is my order O-5512?", "cust-ada", "t-unknown")

    tokens = [e.detail["tokens"] for e in model_events(harness)]
    assert tokens == [
        {"input": None, "output": None, "reasoning": None, "cache_read": None, "source": "unknown"},
        {"input": 50, "output": 5, "reasoning": None, "cache_read": None, "source": "reported"},
    ]
    report = trace(harness.store, graph_auditor(harness), call_id="c-none")
    assert report.tokens is not None
    assert report.tokens.line() == (
        "tokens input=unknown output=unknown reasoning=unknown model_turns=2 without_usage=1 source=mixed"
    )
    spans = otel.model_spans()
    assert not any(k.startswith("gen_ai.usage.") for k in spans[0])
    assert spans[0]["toolgate.usage.source"] == "unknown"
    assert "gen_ai.usage.reasoning.output_tokens" not in spans[1]
    assert otel.token_points() == {"input": (50, 1), "output": (5, 1)}


def test_the_offline_model_reports_a_labelled_estimate_kept_out_of_the_metric(
    harness: Harness, otel: Otel
) -> None:
    model = OfflineDemoModel()
    tools = harness.registry.openai_tools(list(harness.registry.tools.values()))
    request = [HumanMessage("My blender arrived broken, order O-5512. Please refund it.")]
    answer = model.bind_tools(tools).invoke(request)
    assert usage_of(answer) == TokenUsage(
        input=estimate_tokens(request_text(request, tools)),
        output=estimate_tokens(json.dumps(answer.tool_calls, sort_keys=True)),
        reasoning=0,
        source="estimated",
    )

    start(harness.graph(OfflineDemoModel()), "What is the status of order O-5512?", "cust-ada", "t-offline")
    sources = [e.detail["tokens"]["source"] for e in model_events(harness)]
    assert sources and set(sources) == {"estimated"}
    assert all(isinstance(e.detail["tokens"]["input"], int) for e in model_events(harness))
    assert otel.token_points() == {}  # the metric counts what providers reported, not estimates


def test_sums_and_service_tier_details() -> None:
    tiered: Any = {  # langchain-openai's names under the priority service tier
        "input_tokens": 100,
        "output_tokens": 30,
        "total_tokens": 130,
        "input_token_details": {"priority_cache_read": 40, "priority": 60},
        "output_token_details": {"priority_reasoning": 12, "priority": 18},
    }
    priority = AIMessage(content="", usage_metadata=tiered)
    assert usage_of(priority) == TokenUsage(
        input=100, output=30, reasoning=12, cache_read=40, source="reported"
    )
    assert usage_of(AIMessage(content="")) == TokenUsage()
    summed = total([usage_of(priority), TokenUsage(input=5, output=1, reasoning=0, source="reported")])
    assert summed.figures() == {
        "input": 105,
        "output": 31,
        "reasoning": 12,
        "model_turns": 2,
        "source": "reported",
    }
    assert (
        total([]).line()
        == "tokens input=unknown output=unknown reasoning=unknown model_turns=0 source=unknown"
    )
    assert TokenUsage.from_detail({"input": True, "output": -1, "source": "made-up"}) == TokenUsage()


@pytest.mark.parametrize("bound_bytes", [512, 4096])
def test_a_truncated_result_fits_its_bound_even_when_escaping_grows_it(bound_bytes: int) -> None:
    # JSON inside the truncation wrapper is escaped (each quote gains a backslash): quote-heavy
    # data such as a list of records grew past the bound before (4489 bytes for 4096)
    rows = [{"order_id": f"O-{n}", "note": 'said "fragile" — «handle with care»'} for n in range(400)]
    body, truncated = bound({"status": "completed", "data": {"orders": rows}}, bound_bytes)
    assert truncated and len(body.encode("utf-8")) <= bound_bytes
    assert json.loads(body)["marker"] == TRUNCATED and len(json.loads(body)["partial"]) > bound_bytes // 3


def test_anthropic_usage_counts_cache_reads_as_input_and_leaves_reasoning_unknown(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Anthropic's input_tokens exclude cache reads and it reports no separate thinking figure here:
    # langchain-anthropic adds the cache reads back; reasoning is unknown, not 0
    ANTHROPIC.local_only_here(monkeypatch)
    figures = {**anthropic_usage(200, 20), "cache_read_input_tokens": 300}
    reply = anthropic_message(
        "msg_tk_a1", [text_block("It was delivered.")], stop_reason="end_turn", tokens=figures
    )
    thinking_off = dataclasses.replace(ANTHROPIC, thinking_tokens=0)
    _, replay = run_task(thinking_off, harness, [reply], "Hello", "t-anthropic")
    assert len(replay.bodies()) == 1
    [event] = model_events(harness)
    assert event.detail["tokens"] == {
        "input": 500,
        "output": 20,
        "reasoning": None,
        "cache_read": 300,
        "source": "reported",
    }
    totals = latest_task_tokens(harness.store, "t-anthropic")
    assert totals is not None
    assert totals.line() == "tokens input=500 output=20 reasoning=unknown model_turns=1 source=reported"
