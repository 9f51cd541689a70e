"""OpenTelemetry export by the standard ``OTEL_*`` variables (issue 28, item 3), against a local
OTLP/HTTP receiver each test starts: spans and metrics from ``toolgate run`` (a process of its
own, as an operator runs it) and from the real ``langgraph dev`` server; without the variables
nothing is configured, no exporter thread starts and no connection is tried."""

from __future__ import annotations

import contextlib
import gzip
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from server_support import client_as, people_server
from support import TEST_KEY, cli_env, kv_lines, seed_people, toolgate

from toolgate.tools.demo.identities import demo_token

REQUEST = "My blender arrived broken, order O-5512. Please refund it."
ARRIVAL_TIMEOUT_S = 60.0


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    resource: dict[str, Any]
    scope: str
    name: str
    attributes: dict[str, Any]


@dataclass
class OtlpReceiver:
    """What a local OTLP/HTTP receiver got: decoded spans, metric names, raw bodies, headers."""

    url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    metrics: set[str] = field(default_factory=set)
    bodies: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, what: str, ready: Callable[[], bool]) -> None:
        """Until ``ready()`` holds (checked on every export that arrives), or fail."""
        with self.changed:
            if not self.changed.wait_for(ready, timeout=ARRIVAL_TIMEOUT_S):
                names = sorted({(s.service, s.name) for s in self.spans})
                pytest.fail(
                    f"no {what} within {ARRIVAL_TIMEOUT_S:.0f}s; got spans {names}, metrics {self.metrics}"
                )

    def names(self, service: str) -> set[str]:
        with self.changed:
            return {s.name for s in self.spans if s.service == service}

    def add(self, path: str, headers: dict[str, str], body: bytes) -> bytes:
        with self.changed:
            self.paths.append(path)
            self.headers.append(headers)
            self.bodies.append(body)
            if path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            self.spans.append(
                                ReceivedSpan(
                                    service=str(resource.get("service.name")),
                                    resource=resource,
                                    scope=scope_spans.scope.name,
                                    name=span.name,
                                    attributes={a.key: _value(a.value) for a in span.attributes},
                                )
                            )
                answer = ExportTraceServiceResponse().SerializeToString()
            else:
                metrics_request = ExportMetricsServiceRequest.FromString(body)
                for resource_metrics in metrics_request.resource_metrics:
                    for scope_metrics in resource_metrics.scope_metrics:
                        self.metrics.update(m.name for m in scope_metrics.metrics)
                answer = ExportMetricsServiceResponse().SerializeToString()
            self.changed.notify_all()
            return answer


@contextlib.contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """An OTLP/HTTP (protobuf) receiver on a free loopback port: POST /v1/traces and /v1/metrics."""
    received = OtlpReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path not in ("/v1/traces", "/v1/metrics"):
                self.send_response(404)
                self.end_headers()
                return
            answer = received.add(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    received.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()


def otel_env(receiver: OtlpReceiver, service: str) -> dict[str, str]:
    """The standard variables an operator sets, pointing at ``receiver``."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": service,
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=otel-test",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-otel-test=from-env",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


# A `toolgate` process that also reports, at its very end, what telemetry it set up and which
# connections it tried (an audit hook sees every socket connect and name lookup).
PROBE = r"""
import json, sys, threading
tried = []
def audit(event, args):
    if event in ("socket.connect", "socket.getaddrinfo"):
        tried.append([event, repr(args[1] if event == "socket.connect" else args[:2])])
sys.addaudithook(audit)
report_path = sys.argv.pop(1)
providers = {}
def snapshot():
    from opentelemetry import metrics, trace
    providers["tracer_provider"] = type(trace.get_tracer_provider()).__name__
    providers["meter_provider"] = type(metrics.get_meter_provider()).__name__
    providers["threads"] = sorted(t.name for t in threading.enumerate())
def write_report():
    # registered before the command runs, so it runs after every exit hook the command adds
    # (atexit is last in, first out): after the SDK's own shutdown has flushed the exports
    with open(report_path, "w") as report:
        json.dump({**providers, "tried": tried}, report)
import atexit
atexit.register(write_report)
try:
    from toolgate.cli.app import main
    main()
finally:
    snapshot()  # what the command left installed and running, before the exit hooks shut it down
"""


def probed_toolgate(args: list[str], env: dict[str, str], tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    """``toolgate ARGS`` in a process of its own, and that process's telemetry `PROBE` report."""
    report = tmp_path / "probe.json"
    if "--as" in args:
        env = {**env, "TOOLGATE_TOKEN": demo_token(args[args.index("--as") + 1])}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=env["TOOLGATE_DATA_DIR"],
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result, json.loads(report.read_text(encoding="utf-8"))


def check_nothing_secret_in(receiver: OtlpReceiver, *secrets: str) -> None:
    for body in receiver.bodies:
        for secret in secrets:
            assert secret.encode() not in body, f"{secret!r} left the machine in an OTLP export"


def test_toolgate_run_exports_its_spans_to_the_otlp_endpoint_the_variables_name(tmp_path: Path) -> None:
    seed_people(tmp_path)
    with otlp_receiver() as receiver:
        env = cli_env(tmp_path, **otel_env(receiver, "toolgate-cli-test"))
        result, probe = probed_toolgate(
            ["run", REQUEST, "--as", "cust-ada", "--thread", "t-otel"], env, tmp_path
        )
        assert "status=awaiting_approval" in result.stdout, result.stdout
        # the command has ended: whatever it sent arrived before it exited (flushed at exit)
        spans = list(receiver.spans)
        metric_names = set(receiver.metrics)

    assert probe["tracer_provider"] == "TracerProvider" and probe["meter_provider"] == "MeterProvider"
    port = receiver.url.rsplit(":", 1)[1]
    assert probe["tried"], "no export was attempted"
    assert all(port in target for _, target in probe["tried"]), probe["tried"]  # the receiver only

    services = {s.service for s in spans}
    assert services == {"toolgate-cli-test"}
    assert {s.resource.get("deployment.environment") for s in spans} == {"otel-test"}
    names = {s.name for s in spans}
    assert "execute_tool lookup_order" in names, names
    assert any(name.startswith("chat ") for name in names), names
    assert {s.scope for s in spans if s.name.startswith(("chat ", "execute_tool "))} == {"toolgate"}
    (lookup,) = [s for s in spans if s.name == "execute_tool lookup_order"]
    assert lookup.attributes["gen_ai.tool.name"] == "lookup_order"
    assert lookup.attributes["toolgate.outcome"] == "completed"
    assert lookup.attributes["toolgate.principal.hash"] != "cust-ada"
    assert {"toolgate.tool.calls", "gen_ai.client.operation.duration"} <= metric_names
    assert {h.get("x-otel-test") for h in receiver.headers} == {"from-env"}  # OTEL_EXPORTER_OTLP_HEADERS
    check_nothing_secret_in(receiver, TEST_KEY.decode(), demo_token("cust-ada"), "cust-ada", REQUEST)


def test_the_worker_exports_the_span_of_the_write_it_delivers(tmp_path: Path) -> None:
    seed_people(tmp_path)
    env = cli_env(tmp_path)  # the run and the approval export nothing: no OTEL_* variables
    ran = toolgate(["run", REQUEST, "--as", "cust-ada", "--thread", "t-otel-worker"], env)
    proposal = next(row["proposal"] for row in kv_lines(ran.stdout) if "proposal" in row)
    toolgate(["approve", proposal, "--as", "fiona"], env)
    with otlp_receiver() as receiver:
        worker_env = {**env, **otel_env(receiver, "toolgate-worker-test")}
        result, probe = probed_toolgate(["worker", "run", "--once"], worker_env, tmp_path)
        assert "succeeded=1" in result.stdout, result.stdout
        spans = list(receiver.spans)
    assert probe["tracer_provider"] == "TracerProvider"
    # the delivery, then the thread the worker answers from the store (its resume gets the stored
    # result: a duplicate delivery, flagged so)
    refunds = [s for s in spans if s.name == "execute_tool issue_refund"]
    (refund,) = [s for s in refunds if not s.attributes.get("toolgate.duplicate_delivery")]
    assert [s.attributes.get("toolgate.duplicate_delivery") for s in refunds].count(True) == 1
    assert "thread=t-otel-worker answered=resumed" in result.stdout, result.stdout
    assert refund.service == "toolgate-worker-test"
    assert refund.attributes["toolgate.outcome"] == "completed"
    assert refund.attributes["toolgate.tool.kind"] == "write"
    check_nothing_secret_in(receiver, TEST_KEY.decode(), demo_token("fiona"), "cust-ada", "fiona")


def test_without_the_variables_nothing_is_configured_and_no_connection_is_tried(tmp_path: Path) -> None:
    seed_people(tmp_path)
    env = cli_env(tmp_path)  # holds no OTEL_* variable
    result, probe = probed_toolgate(
        ["run", REQUEST, "--as", "cust-ada", "--thread", "t-quiet"], env, tmp_path
    )
    assert "status=awaiting_approval" in result.stdout, result.stdout
    assert probe["tracer_provider"] == "ProxyTracerProvider"
    assert probe["meter_provider"] == "_ProxyMeterProvider"
    assert not [name for name in probe["threads"] if name.lower().startswith("otel")], probe["threads"]
    assert probe["tried"] == []


@pytest.mark.parametrize(
    ("variables", "warning"),
    [
        ({"OTEL_SDK_DISABLED": "true"}, None),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}, None),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTLP protocol grpc is not supported"),
        (
            {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"},
            "OTEL_TRACES_EXPORTER=console is not supported",
        ),
    ],
    ids=["sdk-disabled", "exporters-none", "grpc-refused", "console-refused"],
)
def test_an_endpoint_is_not_enough_when_the_variables_turn_export_off(
    tmp_path: Path, variables: dict[str, str], warning: str | None
) -> None:
    seed_people(tmp_path)
    env = {
        **cli_env(tmp_path),
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",  # never reached: nothing is configured
        **variables,
    }
    result, probe = probed_toolgate(["run", "hello", "--as", "cust-ada", "--thread", "t-off"], env, tmp_path)
    assert probe["tracer_provider"] == "ProxyTracerProvider"
    assert probe["meter_provider"] == "_ProxyMeterProvider"
    assert probe["tried"] == []
    if warning is None:
        assert result.stderr == ""
    else:  # one line saying why nothing is exported
        (line,) = result.stderr.splitlines()
        assert warning in line


@pytest.mark.server
@pytest.mark.slow
def test_the_server_exports_a_runs_spans_to_the_otlp_endpoint(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with otlp_receiver() as receiver:
        workdir = tmp_path_factory.mktemp("lgdev-otel")
        with people_server(workdir, otel_env(receiver, "toolgate-server-test")) as server:
            with client_as(server, "cust-ada") as client:
                thread = client.threads.create()
                result = client.runs.wait(
                    thread["thread_id"],
                    "toolgate",
                    input={"messages": [{"role": "user", "content": REQUEST}]},
                )
            assert isinstance(result, dict) and result.get("status") == "awaiting_approval", result
            receiver.wait_for(
                "server tool span",
                lambda: any(
                    s.service == "toolgate-server-test" and s.name == "execute_tool lookup_order"
                    for s in receiver.spans
                ),
            )
        names = receiver.names("toolgate-server-test")
        check_nothing_secret_in(receiver, TEST_KEY.decode(), demo_token("cust-ada"), REQUEST)
    assert any(name.startswith("chat ") for name in names), names
    assert "execute_tool lookup_order" in names


def test_an_endpoint_without_the_sdk_installed_is_one_warning_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from opentelemetry import trace

    from toolgate.telemetry import otel_env

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    for name in (
        "OTEL_SDK_DISABLED",
        "OTEL_TRACES_EXPORTER",
        "OTEL_METRICS_EXPORTER",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(otel_env, "_configured", ())
    # the `otel` extra not installed: its exporter module cannot be imported
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with caplog.at_level("WARNING", logger=otel_env.__name__):
        assert otel_env.configure_from_env() == ()
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    (record,) = caplog.records
    assert "OpenTelemetry SDK is not installed" in record.getMessage()
    assert "langgraph-toolgate[otel]" in record.getMessage()
