"""Spans of model and tool calls, and the trace id they share with audit events.

One span per model call (``chat {model}``, kind CLIENT) and one per tool call
(``execute_tool {tool}``, kind INTERNAL) as its child. The model node and the execute node run
as separate node invocations (possibly hours apart around an approval), so the model node keeps
`ModelSpan.trace_ref` in checkpointed state and the execute node re-enters it with `link_parent`.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

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
    RETRY_COUNT,
    THREAD_ID,
    TOOL_CALLS,
    TOOL_KIND,
    TURN,
    outcome_class,
)
from toolgate.telemetry.metrics import instruments
from toolgate.telemetry.providers import tracer

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def model_name(model: Any) -> str:
    """The model id for ``gen_ai.request.model``: ``model_name``/``model``, else the class name."""
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


# ---- trace ids and parents ----------------------------------------------------------------


def _hex_trace_id(span_context: SpanContext) -> str:
    return format(span_context.trace_id, "032x")


def _hex_span_id(span_context: SpanContext) -> str:
    return format(span_context.span_id, "016x")


def current_trace_id() -> str | None:
    """32-hex trace id of the current span when its context is valid, else ``None``.

    Audit events written inside `model_span`, `tool_span` or `link_parent` pass this as their
    ``trace_id`` so the audit log and the traces share one join key.
    """
    span_context = trace.get_current_span().get_span_context()
    return _hex_trace_id(span_context) if span_context.is_valid else None


def audit_trace_id(fallback: str | None = None, trace_ref: Sequence[Any] | None = None) -> str | None:
    """The trace id for an audit event: the current span's, else the task's stored model span
    trace (``state["trace"]``), else ``fallback`` (the run context's ``trace_id``)."""
    current = current_trace_id()
    if current:
        return current
    if trace_ref:
        candidate = str(trace_ref[0]).lower()
        if _HEX32.match(candidate) and int(candidate, 16):
            return candidate
    return fallback


def _span_context(
    trace_id_hex: Any, span_id_hex: Any, flags: Any = "01", *, remote: bool
) -> SpanContext | None:
    if not isinstance(trace_id_hex, str) or not isinstance(span_id_hex, str):
        return None
    tid, sid = trace_id_hex.lower(), span_id_hex.lower()
    if not _HEX32.match(tid) or not _HEX16.match(sid):
        return None
    try:
        trace_flags = TraceFlags(int(str(flags), 16) & 0xFF)
    except ValueError:
        trace_flags = TraceFlags(TraceFlags.SAMPLED)
    span_context = SpanContext(int(tid, 16), int(sid, 16), is_remote=remote, trace_flags=trace_flags)
    return span_context if span_context.is_valid else None


def parse_parent(value: Any) -> SpanContext | None:
    """A parent span context from a stored trace ref, a W3C ``traceparent`` or a bare trace id.

    * ``[trace_id_hex, span_id_hex]`` or ``[trace_id_hex, span_id_hex, flags_hex]``
      (`ModelSpan.trace_ref`, `ModelSpan.context_ids`): that span.
    * ``"00-<trace id>-<span id>-<flags>"``: an upstream caller's span.
    * a 32-hex trace id (e.g. ``Context.trace_id``): join that trace under a synthetic remote
      parent (the caller gave no span id), so spans and audit events share the caller's id.

    Anything else (``None``, a non-hex request id) gives ``None``: the span starts a new trace.
    """
    if isinstance(value, (list, tuple)) and len(value) in (2, 3):
        return _span_context(*value, remote=False)
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    match = _TRACEPARENT.match(text)
    if match:
        return _span_context(match.group(1), match.group(2), match.group(3), remote=True)
    if _HEX32.match(text) and int(text, 16):
        return _span_context(text, format(random.getrandbits(64) or 1, "016x"), "01", remote=True)
    return None


@contextmanager
def link_parent(
    trace_id_hex: str | None = None, span_id_hex: str | None = None, flags: str = "01"
) -> Iterator[SpanContext | None]:
    """Make the span ``(trace_id_hex, span_id_hex)`` current, so spans opened inside are its children.

    Used by the execute node with the model span's ids from state: ``link_parent(*state["trace"])``.
    Missing or malformed ids (no SDK, an old checkpoint) change nothing. Works without an SDK:
    `current_trace_id` inside returns the linked trace id.
    """
    span_context = _span_context(trace_id_hex, span_id_hex, flags, remote=False)
    if span_context is None:
        yield None
        return
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(span_context)))
    try:
        yield span_context
    finally:
        otel_context.detach(token)


# ---- spans ---------------------------------------------------------------------------------


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
        return _hex_trace_id(span_context) if span_context.is_valid else None

    @property
    def sampled(self) -> bool:
        """Whether this span is sampled (exported)."""
        return bool(self.span.get_span_context().trace_flags.sampled)

    def context_ids(self) -> tuple[str, str] | None:
        """``(trace_id_hex, span_id_hex)`` of this span, or ``None`` without an SDK."""
        span_context = self.span.get_span_context()
        if not span_context.is_valid:
            return None
        return _hex_trace_id(span_context), _hex_span_id(span_context)

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

    def _elapsed_s(self) -> float:
        return max(0.0, time.perf_counter() - self.started)


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


def _record_exception(handle: _Handle, exc: BaseException) -> None:
    handle.span.record_exception(exc)
    handle.error_kind = type(exc).__qualname__
    handle.span.set_attribute(ERROR_TYPE, handle.error_kind)
    handle.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__qualname__}: {exc}"[:200]))
    if handle.outcome is None:
        handle.outcome = "error"
        handle.span.set_attribute(OUTCOME, "error")
        handle.span.set_attribute(OUTCOME_CLASS, outcome_class("error"))


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
    with tracer().start_as_current_span(
        f"chat {model}",
        context=context,
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        handle = ModelSpan(span)
        try:
            yield handle
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                _record_exception(handle, exc)
            raise
        finally:
            elapsed = handle._elapsed_s()
            span.set_attribute(LATENCY_MS, round(elapsed * 1000, 3))
            metric_attributes: dict[str, Any] = {
                GEN_AI_OPERATION_NAME: "chat",
                GEN_AI_REQUEST_MODEL: model,
                RELEASE: release,
            }
            if handle.error_kind:
                metric_attributes[ERROR_TYPE] = handle.error_kind
            instruments().model_duration.record(elapsed, metric_attributes)


@contextmanager
def tool_span(
    *,
    tool: str,
    call_id: str,
    release: str,
    operation_key: str | None = None,
    kind: str = "read",
) -> Iterator[ToolSpan]:
    """Span ``execute_tool {tool}`` around one tool call, a child of the current (model) span.

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
    with tracer().start_as_current_span(
        f"execute_tool {tool}",
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        handle = ToolSpan(span, tool=tool, release=release)
        try:
            yield handle
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                _record_exception(handle, exc)
            raise
        finally:
            elapsed = handle._elapsed_s()
            span.set_attribute(LATENCY_MS, round(elapsed * 1000, 3))
            outcome = handle.outcome or "unset"
            metric_attributes = {GEN_AI_TOOL_NAME: tool, OUTCOME: outcome, RELEASE: release}
            inst = instruments()
            inst.tool_duration.record(elapsed, metric_attributes)
            inst.tool_calls.add(1, {**metric_attributes, OUTCOME_CLASS: outcome_class(outcome)})


__all__ = [
    "ModelSpan",
    "ToolSpan",
    "audit_trace_id",
    "current_trace_id",
    "link_parent",
    "model_name",
    "model_span",
    "parse_parent",
    "tool_span",
]
