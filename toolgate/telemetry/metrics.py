"""Metrics of tool and model calls: the instruments and what records into them outside a span.

``toolgate.tool.calls`` (counter), ``toolgate.tool.duration`` and ``toolgate.task.tool_calls``
(histograms) and the GenAI ``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage``
(recorded by `toolgate.telemetry.tokens`); spans record their own call's
duration and count on exit (`toolgate.telemetry.spans`), dispatch refusals and finished tasks
are recorded here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics

from toolgate.telemetry.attributes import (
    GEN_AI_TOOL_NAME,
    OUTCOME,
    OUTCOME_CLASS,
    REJECTION_CODE,
    RELEASE,
    TASK_STATUS,
    outcome_class,
)
from toolgate.telemetry.providers import current_meter_provider, meter

TOOL_CALLS_METRIC = "toolgate.tool.calls"
TOOL_DURATION_METRIC = "toolgate.tool.duration"
TASK_TOOL_CALLS_METRIC = "toolgate.task.tool_calls"
MODEL_DURATION_METRIC = "gen_ai.client.operation.duration"
TOKEN_USAGE_METRIC = "gen_ai.client.token.usage"

# Bucket boundaries the GenAI conventions advise for gen_ai.client.operation.duration (seconds).
DURATION_BUCKETS_S = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TASK_TOOL_CALL_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30)
# Bucket boundaries the GenAI conventions advise for gen_ai.client.token.usage (powers of 4).
TOKEN_BUCKETS = tuple(4**n for n in range(14))


@dataclass(frozen=True)
class _Instruments:
    provider: object
    tool_calls: metrics.Counter
    tool_duration: metrics.Histogram
    task_tool_calls: metrics.Histogram
    model_duration: metrics.Histogram
    token_usage: metrics.Histogram


_instruments: _Instruments | None = None


def instruments() -> _Instruments:
    """The metric instruments, created once per meter provider."""
    global _instruments
    provider = current_meter_provider()
    cached = _instruments
    if cached is not None and cached.provider is provider:
        return cached
    m = meter()
    created = _Instruments(
        provider=provider,
        tool_calls=m.create_counter(
            TOOL_CALLS_METRIC, unit="{call}", description="Tool calls by tool and outcome."
        ),
        tool_duration=m.create_histogram(
            TOOL_DURATION_METRIC,
            unit="s",
            description="Tool call latency by tool and outcome.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS_S),
        ),
        task_tool_calls=m.create_histogram(
            TASK_TOOL_CALLS_METRIC,
            unit="{call}",
            description="Tool calls per finished task.",
            explicit_bucket_boundaries_advisory=[float(b) for b in TASK_TOOL_CALL_BUCKETS],
        ),
        model_duration=m.create_histogram(
            MODEL_DURATION_METRIC,
            unit="s",
            description="GenAI operation duration (model calls).",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS_S),
        ),
        token_usage=m.create_histogram(
            TOKEN_USAGE_METRIC,
            unit="{token}",
            description="Input and output tokens per model call, as the provider reported them.",
            explicit_bucket_boundaries_advisory=[float(b) for b in TOKEN_BUCKETS],
        ),
    )
    _instruments = created
    return created


def record_rejection(tool: str, code: str, *, release: str | None = None) -> None:
    """Count one call refused at dispatch (outcome ``rejected`` with its stable code)."""
    attributes: dict[str, Any] = {
        GEN_AI_TOOL_NAME: tool,
        OUTCOME: "rejected",
        OUTCOME_CLASS: outcome_class("rejected", code),
        REJECTION_CODE: code,
    }
    if release:
        attributes[RELEASE] = release
    instruments().tool_calls.add(1, attributes)


def record_task_completed(tool_calls: int, *, status: str = "done", release: str | None = None) -> None:
    """Record the tool calls of one finished task (``toolgate.task.tool_calls``)."""
    attributes: dict[str, Any] = {TASK_STATUS: status}
    if release:
        attributes[RELEASE] = release
    instruments().task_tool_calls.record(int(tool_calls), attributes)


__all__ = [
    "DURATION_BUCKETS_S",
    "MODEL_DURATION_METRIC",
    "TASK_TOOL_CALLS_METRIC",
    "TASK_TOOL_CALL_BUCKETS",
    "TOKEN_BUCKETS",
    "TOKEN_USAGE_METRIC",
    "TOOL_CALLS_METRIC",
    "TOOL_DURATION_METRIC",
    "instruments",
    "record_rejection",
    "record_task_completed",
]
