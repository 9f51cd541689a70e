"""OpenTelemetry export configured by the standard ``OTEL_*`` environment variables.

Called once at process start by the CLI (every command, the worker included) and the LangGraph
server's graph module, so an operator gets spans and metrics without writing Python. It installs
an SDK provider only when an OTLP endpoint is named (``OTEL_EXPORTER_OTLP_ENDPOINT``, or the
per-signal ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``..._METRICS_ENDPOINT``), never when
``OTEL_SDK_DISABLED=true``, and never over a provider the operator set (``opentelemetry-instrument``
or their own code wins). Without those variables nothing is imported from the SDK, no exporter
thread starts and nothing leaves the machine.

The SDK reads everything else itself: ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``
(the resource), ``OTEL_TRACES_SAMPLER`` and ``OTEL_TRACES_SAMPLER_ARG``, ``OTEL_BSP_*`` (the batch
processor), ``OTEL_METRIC_EXPORT_INTERVAL``, and the exporter's ``OTEL_EXPORTER_OTLP_*`` headers,
timeout, compression and certificate variables. ``OTEL_TRACES_EXPORTER`` /
``OTEL_METRICS_EXPORTER`` set to ``none`` turn one signal off. Only OTLP over HTTP/protobuf is
shipped (the ``otel`` extra); a gRPC or JSON protocol is refused with one warning line.

Both providers shut down (and so flush) at interpreter exit by the SDK's own exit hook: a CLI
command lives a second, and its spans are sent before the process ends.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping

from opentelemetry import metrics, trace

logger = logging.getLogger(__name__)

SUPPORTED_PROTOCOL = "http/protobuf"
"""The one OTLP protocol the ``otel`` extra's exporter speaks."""

DEFAULT_SERVICE_NAME = "toolgate"
"""``service.name`` when neither ``OTEL_SERVICE_NAME`` nor ``OTEL_RESOURCE_ATTRIBUTES`` names one."""

_lock = threading.Lock()
_configured: tuple[str, ...] = ()


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _refusal(signal: str, env: Mapping[str, str]) -> str | None:
    """Why ``signal`` (``traces``/``metrics``) is not exported though it has an endpoint, or ``None``.

    ``""`` when the variables turn it off on purpose (``OTEL_{SIGNAL}_EXPORTER=none``); a reason
    to tell the operator when they ask for what is not shipped (another exporter or protocol)."""
    upper = signal.upper()
    exporters = {e.strip().lower() for e in (env.get(f"OTEL_{upper}_EXPORTER") or "otlp").split(",")}
    if "otlp" not in exporters:
        return (
            ""
            if exporters == {"none"}
            else f"OTEL_{upper}_EXPORTER={','.join(sorted(exporters))} is not supported (only otlp or none)"
        )
    protocol = (
        env.get(f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or SUPPORTED_PROTOCOL
    )
    if protocol.strip().lower() != SUPPORTED_PROTOCOL:
        return f"OTLP protocol {protocol.strip()} is not supported (only {SUPPORTED_PROTOCOL})"
    return None


def _wanted(env: Mapping[str, str]) -> tuple[bool, bool]:
    """Which of traces and metrics to export: an endpoint, and an OTLP exporter over HTTP asked
    for; whatever is refused is said in one warning line."""
    wanted: list[bool] = []
    refusals: dict[str, list[str]] = {}
    for signal in ("traces", "metrics"):
        endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
            f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        )
        refusal = _refusal(signal, env) if endpoint else ""
        wanted.append(refusal is None)
        if refusal:
            refusals.setdefault(refusal, []).append(signal)
    if refusals:
        said = "; ".join(
            f"{reason}: no {' or '.join(signals)} exported" for reason, signals in refusals.items()
        )
        logger.warning("toolgate: %s", said)
    return wanted[0], wanted[1]


def _operator_tracer_provider() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _operator_meter_provider() -> bool:
    # the API's placeholder until someone sets a provider has no public name
    return type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"


def configure_from_env() -> tuple[str, ...]:
    """Install SDK providers with OTLP/HTTP exporters as the ``OTEL_*`` variables ask.

    Returns the signals configured by this call or an earlier one in this process (``()`` when
    none: no endpoint, ``OTEL_SDK_DISABLED=true``, the operator's own providers, or the SDK not
    installed). Safe to call more than once: once a signal is configured, later calls only
    report it.
    """
    global _configured
    with _lock:
        if not _configured:
            _configured = _configure(os.environ)
        return _configured


def _configure(env: Mapping[str, str]) -> tuple[str, ...]:
    if _truthy(env.get("OTEL_SDK_DISABLED")):
        return ()
    traces_wanted, metrics_wanted = _wanted(env)
    want_traces = traces_wanted and not _operator_tracer_provider()
    want_metrics = metrics_wanted and not _operator_meter_provider()
    if not (want_traces or want_metrics):
        return ()
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        logger.warning(
            "toolgate: an OTLP endpoint is set but the OpenTelemetry SDK is not installed (%s);"
            " install langgraph-toolgate[otel] to export spans and metrics",
            exc.name,
        )
        return ()
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    configured: list[str] = []
    if want_traces:
        tracer_provider = TracerProvider(resource=resource)  # sampler from OTEL_TRACES_SAMPLER(_ARG)
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(tracer_provider)
        configured.append("traces")
    if want_metrics:
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
        configured.append("metrics")
    return tuple(configured)


__all__ = ["DEFAULT_SERVICE_NAME", "SUPPORTED_PROTOCOL", "configure_from_env"]
