"""Where spans and metrics go: toolgate's tracer and meter, and the providers behind them.

Both resolve at use time: the providers passed to `configure`, else OpenTelemetry's global ones
(no-ops until an SDK is configured).
"""

from __future__ import annotations

from opentelemetry import metrics, trace

INSTRUMENTATION_NAME = "toolgate"
INSTRUMENTATION_VERSION = "0.1.0"

_tracer_provider: trace.TracerProvider | None = None
_meter_provider: metrics.MeterProvider | None = None


def configure(
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> None:
    """Use these providers instead of the global ones (``None`` restores the global provider).

    OpenTelemetry's global providers can be set only once per process; tests and embedders pass
    their own here instead. Metric instruments follow: they are created once per meter provider.
    """
    global _tracer_provider, _meter_provider
    _tracer_provider = tracer_provider
    _meter_provider = meter_provider


def tracer() -> trace.Tracer:
    """toolgate's tracer, resolved at use time (the override from `configure`, else the global)."""
    return trace.get_tracer(INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION, tracer_provider=_tracer_provider)


def meter() -> metrics.Meter:
    """toolgate's meter, resolved at use time (the override from `configure`, else the global)."""
    return metrics.get_meter(INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION, meter_provider=_meter_provider)


def current_meter_provider() -> object:
    """The meter provider `meter` uses now."""
    return _meter_provider if _meter_provider is not None else metrics.get_meter_provider()


__all__ = [
    "INSTRUMENTATION_NAME",
    "INSTRUMENTATION_VERSION",
    "configure",
    "current_meter_provider",
    "meter",
    "tracer",
]
