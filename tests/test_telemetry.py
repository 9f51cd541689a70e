"""OpenTelemetry spans and metrics of model and tool calls, and the trace id shared with audit events."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import SpanKind, StatusCode

from toolgate import telemetry

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


@dataclass
class Otel:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        out: list[Any] = []
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        out.extend(metric.data.data_points)
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    """Private SDK providers passed to toolgate.telemetry (the global ones stay untouched)."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield Otel(exporter, reader)
    finally:
        telemetry.configure()
        tracer_provider.shutdown()
        meter_provider.shutdown()


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    ctx = span.get_span_context()
    assert ctx is not None
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def test_tool_spans_linked_from_state_are_children_of_the_model_span(otel: Otel) -> None:
    with telemetry.model_span(model="gpt-test", release="ops-tools/1.1.0", thread_id="t-1", turn=1) as m:
        m.set_response_id("resp_1")
        m.set_tool_calls(2)
        m.set_outcome("completed")
        ref = m.trace_ref()
        ids = m.context_ids()
    assert ref is not None and ids is not None
    assert ref[:2] == list(ids) and int(ref[2], 16) & 0x01  # sampled (the SDK may add the random bit)
    assert telemetry.current_trace_id() is None  # the model node has returned

    # the execute node: a later node invocation that only has the checkpointed ref
    with telemetry.link_parent(*ref):
        with telemetry.tool_span(tool="lookup_order", call_id="call_a", release="ops-tools/1.1.0") as t:
            t.set_outcome("completed")
        with telemetry.tool_span(
            tool="issue_refund",
            call_id="call_b",
            release="ops-tools/1.1.0",
            operation_key="op_123",
            kind="write",
        ) as t:
            t.set_duplicate_delivery(True)
            t.set_retry_count(1)
            t.set_outcome("pending_approval")

    spans = otel.finished()
    (model,) = by_name(spans, "chat gpt-test")
    (read,) = by_name(spans, "execute_tool lookup_order")
    (write,) = by_name(spans, "execute_tool issue_refund")
    model_trace, model_span_id = hex_ids(model)
    assert (model_trace, model_span_id) == ids
    for child in (read, write):
        assert hex_ids(child)[0] == model_trace
        assert child.parent is not None and format(child.parent.span_id, "016x") == model_span_id
        assert child.kind is SpanKind.INTERNAL
        assert child.status.status_code is StatusCode.UNSET
    assert model.kind is SpanKind.CLIENT
    assert model.parent is None

    assert (
        dict(model.attributes or {}).items()
        >= {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-test",
            "gen_ai.response.id": "resp_1",
            "toolgate.releases.bundle": "ops-tools/1.1.0",
            "toolgate.thread_id": "t-1",
            "toolgate.turn": 1,
            "toolgate.tool_calls": 2,
            "toolgate.outcome": "completed",
        }.items()
    )
    assert "toolgate.latency_ms" in (model.attributes or {})
    read_attrs = dict(read.attributes or {})
    assert read_attrs["gen_ai.operation.name"] == "execute_tool"
    assert read_attrs["gen_ai.tool.name"] == "lookup_order"
    assert read_attrs["gen_ai.tool.call.id"] == "call_a"
    assert read_attrs["toolgate.tool.kind"] == "read"
    assert read_attrs["toolgate.outcome"] == "completed"
    assert read_attrs["toolgate.outcome.class"] == "success"
    assert "toolgate.operation_key" not in read_attrs
    latency = read_attrs["toolgate.latency_ms"]
    assert isinstance(latency, float) and latency >= 0
    write_attrs = dict(write.attributes or {})
    assert write_attrs["toolgate.operation_key"] == "op_123"
    assert write_attrs["toolgate.tool.kind"] == "write"
    assert write_attrs["toolgate.duplicate_delivery"] is True
    assert write_attrs["toolgate.retry_count"] == 1
    assert write_attrs["toolgate.outcome"] == "pending_approval"


def test_tool_span_opened_inside_the_model_span_is_its_child(otel: Otel) -> None:
    with telemetry.model_span(model="m", release="r", thread_id="t", turn=1) as m:
        with telemetry.tool_span(tool="lookup_order", call_id="c1", release="r") as t:
            t.set_outcome("completed")
        ids = m.context_ids()
    (tool,) = by_name(otel.finished(), "execute_tool lookup_order")
    assert ids is not None
    assert tool.parent is not None and format(tool.parent.span_id, "016x") == ids[1]
    assert hex_ids(tool)[0] == ids[0]


def test_exceptions_mark_spans_error_and_propagate(otel: Otel) -> None:
    with pytest.raises(RuntimeError, match="boom"):  # noqa: SIM117 - the nesting is the point
        with telemetry.model_span(model="m", release="r", thread_id="t", turn=1):
            with telemetry.tool_span(tool="lookup_order", call_id="c1", release="r"):
                raise RuntimeError("boom")
    spans = otel.finished()
    assert len(spans) == 2
    for span in spans:
        assert span.status.status_code is StatusCode.ERROR
        assert (span.attributes or {})["error.type"] == "RuntimeError"
        assert (span.attributes or {})["toolgate.outcome"] == "error"
        assert [e.name for e in span.events] == ["exception"]
    (calls,) = otel.points(telemetry.TOOL_CALLS_METRIC)
    assert calls.attributes["toolgate.outcome"] == "error"
    assert calls.attributes["toolgate.outcome.class"] == "execution_error"
    (duration,) = otel.points(telemetry.MODEL_DURATION_METRIC)
    assert duration.attributes["error.type"] == "RuntimeError"


def test_an_exceptions_secrets_never_reach_the_span(otel: Otel) -> None:
    """Loaded code may raise with a key or a password in the message; spans leave the machine."""
    key, password = "sk-live" + "A1b2C3d4E5f6G7h8J9k0", "hunter2" * 2
    with pytest.raises(RuntimeError):  # noqa: SIM117 - the nesting is the point
        with telemetry.model_span(model="m", release="r", thread_id="t", turn=1):
            with telemetry.tool_span(tool="lookup_order", call_id="c1", release="r"):
                raise RuntimeError(f"upstream refused api_key={key} password={password}")
    spans = otel.finished()
    assert len(spans) == 2
    for span in spans:
        (event,) = span.events
        text = json.dumps({"status": span.status.description, "event": dict(event.attributes or {})})
        assert key not in text and password not in text, text
        assert "upstream refused api_key=sk" not in text  # never the message: the class and the frames
        assert (event.attributes or {})["exception.type"] == "RuntimeError"
        assert span.status.description == "RuntimeError"
        assert "test_an_exceptions_secrets_never_reach_the_span" in str((event.attributes or {})["exception.stacktrace"])


def test_failed_and_unknown_outcomes_mark_error_rejections_do_not(otel: Otel) -> None:
    with telemetry.tool_span(tool="t", call_id="c1", release="r") as h:
        h.set_outcome("failed", error_kind="timeout")
    with telemetry.tool_span(tool="t", call_id="c2", release="r", kind="write") as h:
        h.set_outcome("unknown")
    with telemetry.tool_span(tool="t", call_id="c3", release="r", kind="write") as h:
        h.set_outcome("rejected")
    with telemetry.model_span(model="m", release="r", thread_id="t", turn=1) as m:
        m.add_retry(1, 429, 0.5)
        m.add_retry(2, 503, 1.0)
        m.set_outcome("failed", error_kind="http_503")
    spans = {(s.attributes or {}).get("gen_ai.tool.call.id", s.name): s for s in otel.finished()}
    assert spans["c1"].status.status_code is StatusCode.ERROR
    assert (spans["c1"].attributes or {})["error.type"] == "timeout"
    assert spans["c2"].status.status_code is StatusCode.ERROR
    assert (spans["c2"].attributes or {})["error.type"] == "unknown"
    assert spans["c3"].status.status_code is StatusCode.UNSET
    assert (spans["c3"].attributes or {})["toolgate.outcome.class"] == "not_approved"
    model = spans["chat m"]
    assert model.status.status_code is StatusCode.ERROR
    assert (model.attributes or {})["toolgate.retry_count"] == 2
    retries = [e for e in model.events if e.name == "retry"]
    assert [dict(e.attributes or {}) for e in retries] == [
        {"attempt": 1, "http.response.status_code": 429, "delay_ms": 500},
        {"attempt": 2, "http.response.status_code": 503, "delay_ms": 1000},
    ]


def test_current_trace_id_is_the_span_trace_id(otel: Otel) -> None:
    assert telemetry.current_trace_id() is None
    with telemetry.model_span(model="m", release="r", thread_id="t", turn=1) as m:
        inside_model = telemetry.current_trace_id()
        assert inside_model == m.trace_id
        with telemetry.tool_span(tool="x", call_id="c", release="r") as t:
            assert telemetry.current_trace_id() == t.trace_id == inside_model
            t.set_outcome("completed")
    with telemetry.link_parent(TRACE, SPAN):
        assert telemetry.current_trace_id() == TRACE
    assert telemetry.current_trace_id() is None
    (model,) = by_name(otel.finished(), "chat m")
    assert hex_ids(model)[0] == inside_model


def test_audit_trace_id_prefers_the_current_span_then_state_then_context(otel: Otel) -> None:
    assert telemetry.audit_trace_id("req-trace") == "req-trace"
    assert telemetry.audit_trace_id("req-trace", [TRACE, SPAN, "01"]) == TRACE
    assert telemetry.audit_trace_id("req-trace", ["not-hex", SPAN]) == "req-trace"
    with telemetry.tool_span(tool="x", call_id="c", release="r") as t:
        assert telemetry.audit_trace_id("req-trace", [TRACE, SPAN]) == t.trace_id


def test_model_span_joins_the_callers_or_the_previous_turns_trace(otel: Otel) -> None:
    # a bare 32-hex trace id from the run context: same trace, synthetic remote parent
    with telemetry.model_span(model="m", release="r", thread_id="t", turn=1, parent=TRACE.upper()) as m1:
        assert m1.trace_id == TRACE
        ref = m1.trace_ref()
    # the next turn continues from the previous model span stored in state
    with telemetry.model_span(model="m", release="r", thread_id="t", turn=2, parent=ref) as m2:
        assert m2.trace_id == TRACE
    # a W3C traceparent: that exact parent span
    with telemetry.model_span(
        model="m", release="r", thread_id="t2", turn=1, parent=f"00-{TRACE}-{SPAN}-01"
    ) as m3:
        assert m3.trace_id == TRACE
    # a non-hex request id or nothing: a new trace
    with telemetry.model_span(model="m", release="r", thread_id="t3", turn=1, parent="req-42") as m4:
        assert m4.trace_id not in (None, TRACE)
    first, second, third, fourth = otel.finished()
    assert first.parent is not None and first.parent.is_remote
    assert ref is not None
    assert second.parent is not None and format(second.parent.span_id, "016x") == ref[1]
    assert third.parent is not None and format(third.parent.span_id, "016x") == SPAN
    assert fourth.parent is None
    # an outer current span wins over the parent argument
    with telemetry.tool_span(tool="outer", call_id="c", release="r") as outer:
        with telemetry.model_span(model="m", release="r", thread_id="t", turn=1, parent=TRACE) as inner:
            assert inner.trace_id == outer.trace_id != TRACE
        outer.set_outcome("completed")


def test_link_parent_ignores_missing_or_malformed_ids(otel: Otel) -> None:
    cases: list[tuple[str | None, str | None]] = [
        (None, None),
        ("xyz", SPAN),
        (TRACE, "short"),
        ("0" * 32, "0" * 16),
    ]
    for trace_id, span_id in cases:
        with telemetry.link_parent(trace_id, span_id) as linked:
            assert linked is None
            assert telemetry.current_trace_id() is None
            with telemetry.tool_span(tool="x", call_id="c", release="r") as t:
                t.set_outcome("completed")
    with telemetry.link_parent() as linked:  # no ref in state (an old checkpoint, no SDK)
        assert linked is None
    assert all(s.parent is None for s in otel.finished())


def test_a_sampled_out_model_span_keeps_its_tool_spans_sampled_out() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(tracer_provider=provider)
    try:
        with telemetry.model_span(model="m", release="r", thread_id="t", turn=1) as m:
            ref = m.trace_ref()
            assert not m.sampled
        assert ref is not None and not int(ref[2], 16) & 0x01
        with telemetry.link_parent(*ref), telemetry.tool_span(tool="x", call_id="c", release="r") as t:
            assert not t.sampled
            assert t.trace_id == ref[0]
            t.set_outcome("completed")
        assert exporter.get_finished_spans() == ()
    finally:
        telemetry.configure()
        provider.shutdown()


def test_counters_and_histograms_per_tool_and_outcome(otel: Otel) -> None:
    for outcome in ["completed", "completed", "failed"]:
        with telemetry.tool_span(tool="lookup_order", call_id="c", release="r1") as t:
            t.set_outcome(outcome)
    with telemetry.tool_span(tool="issue_refund", call_id="c", release="r1", kind="write") as t:
        t.set_outcome("completed")
    with telemetry.tool_span(tool="issue_refund", call_id="c", release="r1", kind="write"):
        pass  # the caller forgot to set an outcome
    telemetry.record_rejection("issue_refund", "schema_invalid", release="r1")
    telemetry.record_rejection("issue_refund", "cross_tenant")
    telemetry.record_task_completed(3, release="r1")
    telemetry.record_task_completed(5, release="r1")
    telemetry.record_task_completed(7, status="needs_review")

    calls = {
        (
            p.attributes["gen_ai.tool.name"],
            p.attributes["toolgate.outcome"],
            p.attributes["toolgate.outcome.class"],
            p.attributes.get("toolgate.rejection_code"),
        ): p.value
        for p in otel.points(telemetry.TOOL_CALLS_METRIC)
    }
    assert calls == {
        ("lookup_order", "completed", "success", None): 2,
        ("lookup_order", "failed", "execution_error", None): 1,
        ("issue_refund", "completed", "success", None): 1,
        ("issue_refund", "unset", "other", None): 1,
        ("issue_refund", "rejected", "validation", "schema_invalid"): 1,
        ("issue_refund", "rejected", "policy_violation", "cross_tenant"): 1,
    }
    durations = {
        (p.attributes["gen_ai.tool.name"], p.attributes["toolgate.outcome"]): p
        for p in otel.points(telemetry.TOOL_DURATION_METRIC)
    }
    assert set(durations) == {
        ("lookup_order", "completed"),
        ("lookup_order", "failed"),
        ("issue_refund", "completed"),
        ("issue_refund", "unset"),
    }
    lookup = durations[("lookup_order", "completed")]
    assert lookup.count == 2 and lookup.sum >= 0
    assert lookup.attributes["toolgate.releases.bundle"] == "r1"
    assert tuple(lookup.explicit_bounds) == telemetry.DURATION_BUCKETS_S

    tasks = {p.attributes["toolgate.task.status"]: p for p in otel.points(telemetry.TASK_TOOL_CALLS_METRIC)}
    assert tasks["done"].count == 2 and tasks["done"].sum == 8
    assert tasks["needs_review"].count == 1 and tasks["needs_review"].sum == 7


def test_outcome_classes_separate_policy_from_execution_health() -> None:
    assert telemetry.outcome_class("rejected", "schema_invalid") == "validation"
    assert telemetry.outcome_class("rejected", "unauthorized") == "policy_violation"
    assert telemetry.outcome_class("rejected", "rate_limited") == "rate_limited"
    assert telemetry.outcome_class("rejected", "loop_detected") == "budget"
    assert telemetry.outcome_class("failed") == "execution_error"
    assert telemetry.outcome_class("dead_lettered") == "unresolved"


def test_model_name_for_the_request_attribute() -> None:
    class Pinned:
        model_name = "gpt-4.1-2025-04-14"

    class Offline:
        pass

    assert telemetry.model_name(Pinned()) == "gpt-4.1-2025-04-14"
    assert telemetry.model_name(Offline()) == "Offline"


def test_langsmith_metadata_only_when_tracing_is_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    assert telemetry.langsmith_metadata("ops-tools/1.1.0", ["op_b", "op_a", "op_b", ""]) == {
        "toolgate_release": "ops-tools/1.1.0",
        "toolgate_operation_keys": ["op_a", "op_b"],
    }
    from langsmith.utils import get_env_var

    clear_env_cache = get_env_var.cache_clear  # type: ignore[attr-defined]  # langsmith caches env lookups
    try:
        with monkeypatch.context() as env:
            for var in (
                "LANGSMITH_TRACING",
                "LANGSMITH_TRACING_V2",
                "LANGCHAIN_TRACING",
                "LANGCHAIN_TRACING_V2",
            ):
                env.delenv(var, raising=False)
            env.setenv("LANGSMITH_TRACING", "false")
            clear_env_cache()
            assert telemetry.langsmith_enabled() is False
            assert telemetry.annotate_langsmith_run("r", ["op"]) is False
            env.setenv("LANGSMITH_TRACING", "true")
            clear_env_cache()
            assert telemetry.langsmith_enabled() is True
            assert telemetry.annotate_langsmith_run("r", ["op"]) is False  # no active LangSmith run
    finally:
        clear_env_cache()


def test_without_an_sdk_everything_is_a_no_op() -> None:
    """Import and use with opentelemetry.sdk unimportable: no spans, no ids, no errors."""
    code = """
import sys
sys.modules["opentelemetry.sdk"] = None
from toolgate import telemetry
with telemetry.model_span(model="m", release="r", thread_id="t", turn=1) as m:
    m.set_outcome("completed")
    assert m.context_ids() is None and m.trace_ref() is None
    assert telemetry.current_trace_id() is None
with telemetry.link_parent(None, None), telemetry.tool_span(tool="x", call_id="c", release="r") as t:
    t.set_outcome("completed")
telemetry.record_rejection("x", "schema_invalid")
telemetry.record_task_completed(2)
assert "opentelemetry.sdk.trace" not in sys.modules
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
