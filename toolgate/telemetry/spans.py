"""Spans of model and tool calls: the handles callers record on, and the wrappers that time them.

One span per model call (``chat {model}``, kind CLIENT) and one per tool call
(``execute_tool {tool}``, kind INTERNAL) as its child. Both wrappers share one lifecycle
(`_timed_span`): open the span as current, mark it ERROR on an exception, set its latency and
record its metrics on exit; they differ only in attributes and in what they record. Which trace
a span joins, and the ids audit events share with it, are `toolgate.telemetry.trace_context`.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind, Status, StatusCode

from toolgate.telemetry.attributes import (
    DUPLICATE_DELIVERY,
    ERROR_OUTCOMES,
    ERROR_TYPE,
    GEN_AI_OPERATION_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_ID,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_NAME,
    GEN_AI_TOOL_TYPE,
    LATENCY_MS,
    OPERATION_KEY,
    OUTCOME,
    OUTCOME_CLASS,
    RELEASE,
    RESULT_BYTES,
    RETRY_COUNT,
    THREAD_ID,
    TOOL_CALLS,
    TOOL_KIND,
    TURN,
    outcome_class,
)
from toolgate.telemetry.metrics import instruments
from toolgate.telemetry.providers import tracer
from toolgate.telemetry.tool_caller import ToolCaller
from toolgate.telemetry.trace_context import hex_span_id, hex_trace_id, parse_parent


def model_name(model: Any) -> str:
    """The model id for ``gen_ai.request.model``: ``model_name``/``model``, else the class name."""
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


# ---- handles -------------------------------------------------------------------------------


@dataclass
class _Handle:
    span: Span
    started: float = field(default_factory=time.perf_counter)
    outcome: str | None = None
    error_kind: str | None = None
    retry_count: int = 0

    def set(self, key: str, value: Any) -> None:
        """Set one span attribute (``None`` is skipped)."""
        if value is not None:
            self.span.set_attribute(key, value)

    @property
    def trace_id(self) -> str | None:
        """32-hex trace id of this span, or ``None`` without an SDK."""
        span_context = self.span.get_span_context()
        return hex_trace_id(span_context) if span_context.is_valid else None

    @property
    def sampled(self) -> bool:
        """Whether this span is sampled (exported)."""
        return bool(self.span.get_span_context().trace_flags.sampled)

    def context_ids(self) -> tuple[str, str] | None:
        """``(trace_id_hex, span_id_hex)`` of this span, or ``None`` without an SDK."""
        span_context = self.span.get_span_context()
        if not span_context.is_valid:
            return None
        return hex_trace_id(span_context), hex_span_id(span_context)

    def trace_ref(self) -> list[str] | None:
        """``[trace_id_hex, span_id_hex, flags_hex]`` for checkpointed state (``state["trace"]``).

        The flags keep a sampled-out model span's children sampled out under a parent-based sampler.
        """
        ids = self.context_ids()
        if ids is None:
            return None
        return [*ids, format(int(self.span.get_span_context().trace_flags), "02x")]

    def set_retry_count(self, count: int) -> None:
        """Retries (model: transport retries; tool: re-deliveries after an unknown outcome)."""
        self.retry_count = int(count)
        self.span.set_attribute(RETRY_COUNT, self.retry_count)

    def set_outcome(self, outcome: str, *, error_kind: str | None = None) -> None:
        """Record the outcome; failures and unresolved outcomes mark the span ERROR."""
        self.outcome = outcome
        self.span.set_attribute(OUTCOME, outcome)
        self.span.set_attribute(OUTCOME_CLASS, outcome_class(outcome))
        if error_kind is not None or outcome in ERROR_OUTCOMES:
            self.error_kind = error_kind or outcome
            self.span.set_attribute(ERROR_TYPE, self.error_kind)
            self.span.set_status(Status(StatusCode.ERROR, self.error_kind))


@dataclass
class ModelSpan(_Handle):
    """Handle of one model call's span."""

    def set_response_id(self, response_id: str | None) -> None:
        """The provider's response id (``gen_ai.response.id``)."""
        self.set(GEN_AI_RESPONSE_ID, response_id)

    def set_tool_calls(self, count: int) -> None:
        """How many tool calls the response proposed (parsed and unparseable)."""
        self.span.set_attribute(TOOL_CALLS, int(count))

    def add_retry(self, attempt: int, status: int | None = None, delay_s: float | None = None) -> None:
        """One transport retry: a span event and the running retry count."""
        attributes: dict[str, Any] = {"attempt": int(attempt)}
        if status is not None:
            attributes["http.response.status_code"] = int(status)
        if delay_s is not None:
            attributes["delay_ms"] = round(delay_s * 1000)
        self.span.add_event("retry", attributes)
        self.set_retry_count(max(self.retry_count, int(attempt)))


@dataclass
class ToolSpan(_Handle):
    """Handle of one tool call's span."""

    tool: str = ""
    release: str = ""

    def set_duplicate_delivery(self, duplicate: bool) -> None:
        """True when the result came from the store instead of running the handler."""
        self.span.set_attribute(DUPLICATE_DELIVERY, bool(duplicate))

    def set_result_bytes(self, size: int) -> None:
        """Bytes of the (bounded) result the model is given."""
        self.span.set_attribute(RESULT_BYTES, int(size))


# ---- the shared lifecycle and the two wrappers ---------------------------------------------

_H = TypeVar("_H", bound=_Handle)


def _record_exception(handle: _Handle, exc: BaseException) -> None:
    """The exception as a span event and the span's ERROR status: its class and where it was
    raised (the frames), never its message. Loaded code (a handler, a model client) may put a
    password or a key into what it raises, and spans leave the machine for whoever reads the
    tracing backend; the message is in the redacted log line, found by the span's trace id."""
    kind = type(exc).__qualname__
    handle.span.record_exception(
        exc,
        attributes={
            "exception.message": kind,
            "exception.stacktrace": "".join(traceback.format_tb(exc.__traceback__)) + kind,
        },
    )
    handle.error_kind = kind
    handle.span.set_attribute(ERROR_TYPE, kind)
    handle.span.set_status(Status(StatusCode.ERROR, kind))
    if handle.outcome is None:
        handle.outcome = "error"
        handle.span.set_attribute(OUTCOME, "error")
        handle.span.set_attribute(OUTCOME_CLASS, outcome_class("error"))


@contextmanager
def _timed_span(
    name: str,
    make_handle: Callable[[Span], _H],
    record: Callable[[_H, float], None],
    *,
    kind: SpanKind,
    attributes: dict[str, Any],
    context: otel_context.Context | None = None,
) -> Iterator[_H]:
    """Span ``name`` as the current span, yielding its handle; an exception marks it ERROR and
    propagates. On exit, however it ends, the span gets its latency and ``record(handle, elapsed_s)``
    records the wrapper's metrics."""
    with tracer().start_as_current_span(
        name,
        context=context,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        handle = make_handle(span)
        try:
            yield handle
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                _record_exception(handle, exc)
            raise
        finally:
            elapsed = max(0.0, time.perf_counter() - handle.started)
            span.set_attribute(LATENCY_MS, round(elapsed * 1000, 3))
            record(handle, elapsed)


@contextmanager
def model_span(
    *, model: str, release: str, thread_id: str, turn: int, parent: Any = None
) -> Iterator[ModelSpan]:
    """Span ``chat {model}`` (CLIENT) around one model call; exceptions mark it ERROR and propagate.

    ``parent`` (optional) is used only when no span is current: the previous model span's
    ``state["trace"]`` (so every turn of a task is one trace) or the run context's ``trace_id``
    (a 32-hex id or a W3C traceparent) so spans join the caller's trace; see `parse_parent`.
    """
    attributes: dict[str, Any] = {
        GEN_AI_OPERATION_NAME: "chat",
        GEN_AI_REQUEST_MODEL: model,
        RELEASE: release,
        THREAD_ID: thread_id,
        TURN: int(turn),
    }
    context = None
    if not trace.get_current_span().get_span_context().is_valid:
        parent_context = parse_parent(parent)
        if parent_context is not None:
            context = trace.set_span_in_context(NonRecordingSpan(parent_context))

    def record(handle: ModelSpan, elapsed: float) -> None:
        metric_attributes: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: "chat",
            GEN_AI_REQUEST_MODEL: model,
            RELEASE: release,
        }
        if handle.error_kind:
            metric_attributes[ERROR_TYPE] = handle.error_kind
        instruments().model_duration.record(elapsed, metric_attributes)

    with _timed_span(
        f"chat {model}", ModelSpan, record, kind=SpanKind.CLIENT, attributes=attributes, context=context
    ) as handle:
        yield handle


@contextmanager
def tool_span(
    *,
    tool: str,
    call_id: str,
    release: str,
    operation_key: str | None = None,
    kind: str = "read",
    who: ToolCaller | None = None,
) -> Iterator[ToolSpan]:
    """Span ``execute_tool {tool}`` around one tool call, a child of the current (model) span;
    ``who`` adds the tool version, principal hash, tenant and argument size (`ToolCaller`).

    On exit it records ``toolgate.tool.duration`` and counts ``toolgate.tool.calls`` by tool and
    outcome (``unset`` when the caller never set one, ``error`` on an exception).
    """
    attributes: dict[str, Any] = {
        GEN_AI_OPERATION_NAME: "execute_tool",
        GEN_AI_TOOL_NAME: tool,
        GEN_AI_TOOL_CALL_ID: call_id,
        GEN_AI_TOOL_TYPE: "function",
        RELEASE: release,
        TOOL_KIND: kind,
    }
    if operation_key:
        attributes[OPERATION_KEY] = operation_key
    if who is not None:
        attributes.update(who.attributes())

    def record(handle: ToolSpan, elapsed: float) -> None:
        outcome = handle.outcome or "unset"
        metric_attributes = {GEN_AI_TOOL_NAME: tool, OUTCOME: outcome, RELEASE: release}
        inst = instruments()
        inst.tool_duration.record(elapsed, metric_attributes)
        inst.tool_calls.add(1, {**metric_attributes, OUTCOME_CLASS: outcome_class(outcome)})

    def make_handle(span: Span) -> ToolSpan:
        return ToolSpan(span, tool=tool, release=release)

    with _timed_span(
        f"execute_tool {tool}", make_handle, record, kind=SpanKind.INTERNAL, attributes=attributes
    ) as handle:
        yield handle


__all__ = ["ModelSpan", "ToolSpan", "model_name", "model_span", "tool_span"]
