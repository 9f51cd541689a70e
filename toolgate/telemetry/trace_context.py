"""Trace context: which trace and parent span a piece of work belongs to, as ids that outlive a process.

Separate from the spans themselves because its users are wider than the span wrappers: audit
events take `current_trace_id` / `audit_trace_id` as their join key to the traces (the store
calls it with no span of its own), the execute node re-enters a checkpointed model span with
`link_parent` (hours later, maybe in another process), and a caller's W3C ``traceparent`` or bare
trace id is read with `parse_parent`. All of it is hex ids and OpenTelemetry contexts, no span is
opened here.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def hex_trace_id(span_context: SpanContext) -> str:
    """The trace id of ``span_context`` as 32 lowercase hex digits."""
    return format(span_context.trace_id, "032x")


def hex_span_id(span_context: SpanContext) -> str:
    """The span id of ``span_context`` as 16 lowercase hex digits."""
    return format(span_context.span_id, "016x")


def current_trace_id() -> str | None:
    """32-hex trace id of the current span when its context is valid, else ``None``.

    Audit events written inside `model_span`, `tool_span` or `link_parent` pass this as their
    ``trace_id`` so the audit log and the traces share one join key.
    """
    span_context = trace.get_current_span().get_span_context()
    return hex_trace_id(span_context) if span_context.is_valid else None


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


__all__ = [
    "audit_trace_id",
    "current_trace_id",
    "hex_span_id",
    "hex_trace_id",
    "link_parent",
    "parse_parent",
]
