"""OpenTelemetry spans and metrics for model and tool calls, and LangSmith run metadata.

One span per model call (``chat {model}``, kind CLIENT) and one per tool call
(``execute_tool {tool}``, kind INTERNAL) as its child, with the OpenTelemetry GenAI semantic
convention attributes where they exist (``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.response.id``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``error.type``) and
``toolgate.*`` attributes for the rest (release, outcome, operation key, retry count, latency).
Audit events written inside a span carry its trace id (`current_trace_id`), so an incident can
pivot from the trace to the audit log on one join key.

Metrics (one meter, ``toolgate``):

* ``toolgate.tool.calls`` (counter): tool calls by tool, outcome and outcome class; rejections
  at dispatch also carry ``toolgate.rejection_code``.
* ``toolgate.tool.duration`` (histogram, seconds): tool latency by tool and outcome; the backend
  derives p50/p95/p99 per tool from it.
* ``toolgate.task.tool_calls`` (histogram): tool calls per finished task, by task status.
* ``gen_ai.client.operation.duration`` (histogram, seconds): model call latency.
* ``gen_ai.client.token.usage`` (histogram): input and output tokens per model call, by
  ``gen_ai.token.type``, as the provider reported them; the model span carries the turn's
  ``gen_ai.usage.*`` figures, reasoning included (`toolgate.telemetry.tokens`).

Nothing leaves the machine by default. This module needs only ``opentelemetry-api``: without an
SDK provider configured every tracer and meter is the API's no-op, spans record nothing and no
exporter exists. A provider comes from the standard ``OTEL_*`` variables (`configure_from_env`,
called at start by the CLI, the worker and the server; needs the ``otel`` extra), or from the
operator (``opentelemetry-instrument`` or code calling ``trace.set_tracer_provider``).
LangSmith metadata is attached only when LangSmith tracing is enabled (``LANGSMITH_TRACING=true``
or an active LangSmith run); otherwise nothing is sent either.

In LangGraph the model node and the execute node run as separate node invocations (possibly in
separate processes, hours apart around an approval), so the model span cannot simply be the
current span when tools run. The model node stores `ModelSpan.trace_ref` in the checkpointed
state and the execute node re-enters it with `link_parent`, which makes tool spans its children.
"""

from __future__ import annotations

from toolgate.telemetry.attributes import outcome_class
from toolgate.telemetry.langsmith_runs import annotate_langsmith_run, langsmith_enabled, langsmith_metadata
from toolgate.telemetry.metrics import (
    DURATION_BUCKETS_S,
    MODEL_DURATION_METRIC,
    TASK_TOOL_CALL_BUCKETS,
    TASK_TOOL_CALLS_METRIC,
    TOOL_CALLS_METRIC,
    TOOL_DURATION_METRIC,
    instruments,
    record_rejection,
    record_task_completed,
)
from toolgate.telemetry.otel_env import configure_from_env
from toolgate.telemetry.providers import configure, meter, tracer
from toolgate.telemetry.spans import ModelSpan, ToolSpan, model_name, model_span, tool_span
from toolgate.telemetry.tool_caller import ToolCaller
from toolgate.telemetry.trace_context import audit_trace_id, current_trace_id, link_parent, parse_parent

__all__ = [
    "DURATION_BUCKETS_S",
    "MODEL_DURATION_METRIC",
    "TASK_TOOL_CALLS_METRIC",
    "TASK_TOOL_CALL_BUCKETS",
    "TOOL_CALLS_METRIC",
    "TOOL_DURATION_METRIC",
    "ModelSpan",
    "ToolCaller",
    "ToolSpan",
    "annotate_langsmith_run",
    "audit_trace_id",
    "configure",
    "configure_from_env",
    "current_trace_id",
    "instruments",
    "langsmith_enabled",
    "langsmith_metadata",
    "link_parent",
    "meter",
    "model_name",
    "model_span",
    "outcome_class",
    "parse_parent",
    "record_rejection",
    "record_task_completed",
    "tool_span",
    "tracer",
]
