"""The SOAP legacy adapter against a local HTTP server speaking SOAP 1.1 and its faults.

Each fault code lands in its failure class: retryable (``server_error``, retryable), permanent
(``caller_error``, or ``server_error`` not retryable) or unknown outcome (`SoapOutcomeUnknown`, a
`TimeoutError`), and an unmapped code is an unknown outcome, never a failure. Through the real
executor, an approved refund whose legacy service answers with each fault ends ``failed`` or
``unknown`` accordingly, with the service called once.
"""

from __future__ import annotations

import contextlib
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from support import Harness

from toolgate.errors import ToolExecutionError
from toolgate.tools import Registry
from toolgate.tools.egress import Egress
from toolgate.tools.legacy_soap import (
    SOAP_ENV,
    FaultMap,
    SoapClient,
    SoapOutcomeUnknown,
    egress_post,
)
from toolgate.tools.spec import HandlerContext

NAMESPACE = "urn:legacy:payments"
FAULTS = FaultMap(
    retryable=frozenset({"Server.Busy", "SYS-BUSY"}),
    permanent=frozenset({"Client", "ACCT-LOCKED"}),
    caller_codes=frozenset({"VAL-017"}),
)
"""The reviewed map of this service's codes."""


def fault_body(faultcode: str, detail: str | None, text: str = "see detail") -> bytes:
    inner = (
        f"<detail><e:error xmlns:e='urn:legacy:errors'><e:code>{detail}</e:code></e:error></detail>"
        if detail
        else ""
    )
    return (
        f"<soap:Envelope xmlns:soap='{SOAP_ENV}'><soap:Body><soap:Fault>"
        f"<faultcode>soap:{faultcode}</faultcode><faultstring>{text}</faultstring>{inner}"
        "</soap:Fault></soap:Body></soap:Envelope>"
    ).encode()


def ok_body(refund_id: str) -> bytes:
    return (
        f"<soap:Envelope xmlns:soap='{SOAP_ENV}'><soap:Body>"
        f"<m:IssueRefundResponse xmlns:m='{NAMESPACE}'><m:refund_id>{refund_id}</m:refund_id>"
        "<m:status>refunded</m:status></m:IssueRefundResponse></soap:Body></soap:Envelope>"
    ).encode()


@dataclass
class LegacyService:
    """Answers each POST with the next scripted ``(status, body)``; ``hold`` blocks an answer."""

    script: list[tuple[int, bytes]]
    port: int = 0
    received: list[dict[str, Any]] = field(default_factory=list)
    hold: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/payments"


@pytest.fixture
def legacy() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []
    holds: list[threading.Event] = []

    def start(*script: tuple[int, bytes], hold: bool = False) -> LegacyService:
        service = LegacyService(list(script), hold=threading.Event() if hold else None)
        if service.hold is not None:
            holds.append(service.hold)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = ET.fromstring(raw).find(f"{{{SOAP_ENV}}}Body")
                assert body is not None
                operation = body[0]
                with service.lock:
                    service.received.append(
                        {
                            "action": self.headers.get("SOAPAction"),
                            "content_type": self.headers.get("Content-Type"),
                            "operation": operation.tag,
                            "fields": {child.tag.rsplit("}", 1)[-1]: child.text for child in operation},
                        }
                    )
                    status, data = service.script.pop(0)
                if service.hold is not None:
                    service.hold.wait(30)  # the client gives up first; released at teardown
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a held answer's client gave up
                    self.send_response(status)
                    self.send_header("Content-Type", "text/xml; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        service.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return service

    yield start
    for hold in holds:
        hold.set()
    for server in servers:
        server.shutdown()
        server.server_close()


def client_for(service: LegacyService, timeout_s: float = 5.0) -> SoapClient:
    egress = Egress("issue_refund", frozenset({f"127.0.0.1:{service.port}"}))
    return SoapClient(service.url, NAMESPACE, egress_post(egress), FAULTS, timeout_s=timeout_s)


def test_a_call_sends_an_envelope_and_returns_the_result_fields(legacy: Any) -> None:
    service = legacy((200, ok_body("R-77")))
    result = client_for(service).call(
        "IssueRefund", {"order_id": "O-5512", "amount_cents": 4999, "note": "a<b&c"}
    )
    assert result == {"refund_id": "R-77", "status": "refunded"}
    [seen] = service.received
    assert seen["operation"] == f"{{{NAMESPACE}}}IssueRefund"
    assert seen["fields"] == {
        "order_id": "O-5512",
        "amount_cents": "4999",
        "note": "a<b&c",
    }  # escaped, read back
    assert seen["action"] == f'"{NAMESPACE}/IssueRefund"' and seen["content_type"].startswith("text/xml")


@pytest.mark.parametrize(
    ("status", "body", "kind", "retryable"),
    [
        (500, fault_body("Server.Busy", None), "server_error", True),
        (500, fault_body("Server", "SYS-BUSY"), "server_error", True),
        (503, b"", "server_error", True),
        (500, fault_body("Client", None), "caller_error", False),
        (500, fault_body("Server", "VAL-017"), "caller_error", False),
        (500, fault_body("Server", "ACCT-LOCKED"), "server_error", False),
    ],
    ids=["busy-faultcode", "busy-detail", "http-503", "client", "validation-detail", "account-locked"],
)
def test_retryable_and_permanent_faults_are_classified(
    legacy: Any, status: int, body: bytes, kind: str, retryable: bool
) -> None:
    service = legacy((status, body))
    with pytest.raises(ToolExecutionError) as failed:
        client_for(service).call("IssueRefund", {"order_id": "O-5512"})
    assert (failed.value.kind, failed.value.retryable) == (kind, retryable)
    assert len(service.received) == 1


@pytest.mark.parametrize(
    "body",
    [fault_body("Server", "TXN-9999"), fault_body("Server", None), b"<html>gateway error</html>"],
    ids=["unmapped-detail", "bare-server-fault", "not-soap"],
)
def test_an_unmapped_fault_or_an_unreadable_answer_is_an_unknown_outcome(legacy: Any, body: bytes) -> None:
    service = legacy((500, body))
    with pytest.raises(SoapOutcomeUnknown) as unknown:
        client_for(service).call("IssueRefund", {"order_id": "O-5512"})
    assert isinstance(unknown.value, TimeoutError) and "reconcile" in str(unknown.value)


def _entity_answer(tmp_path: Any, kind: str) -> bytes:
    """A 200 answer whose result field is an XML entity: ten levels of tenfold expansion (a
    billion "lol"s), or a file on this host (the external entity a hostile service names)."""
    if kind == "billion laughs":
        levels = '<!ENTITY lol0 "lol">' + "".join(
            f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
        )
        dtd, use = f"<!DOCTYPE e [{levels}]>", "&lol9;"
    else:
        secret = tmp_path / "host-secret.txt"
        secret.write_text("HOST-SECRET-0042", encoding="utf-8")
        dtd, use = f'<!DOCTYPE e [<!ENTITY x SYSTEM "file://{secret}">]>', "&x;"
    return (
        f'<?xml version="1.0"?>{dtd}<soap:Envelope xmlns:soap="{SOAP_ENV}"><soap:Body>'
        f"<m:IssueRefundResponse xmlns:m=\"urn:x\"><m:refund_id>{use}</m:refund_id>"
        "</m:IssueRefundResponse></soap:Body></soap:Envelope>"
    ).encode()


@pytest.mark.parametrize("kind", ["billion laughs", "external entity"])
def test_an_answer_with_an_entity_expansion_or_an_external_entity_is_never_expanded(
    legacy: Any, tmp_path: Any, kind: str
) -> None:
    """A hostile service's entities are not expanded (the parser's amplification limit) nor
    fetched (no external entity is resolved): the answer is unreadable, an unknown outcome to
    reconcile, and nothing of the host's files reaches the result or the message."""
    service = legacy((200, _entity_answer(tmp_path, kind)))
    with pytest.raises(SoapOutcomeUnknown) as unknown:
        client_for(service).call("IssueRefund", {"order_id": "O-5512"})
    assert "unreadable answer" in str(unknown.value) and "HOST-SECRET" not in str(unknown.value)


def test_no_answer_in_time_is_an_unknown_outcome(legacy: Any) -> None:
    service = legacy((200, ok_body("R-78")), hold=True)
    with pytest.raises(SoapOutcomeUnknown, match="no answer"):
        client_for(service, timeout_s=0.5).call("IssueRefund", {"order_id": "O-5512"})
    assert len(service.received) == 1  # it was sent: the effect may exist


def test_nothing_listening_is_retryable() -> None:
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = probe.server_address[1]
    probe.server_close()  # a port nobody listens on now
    client = SoapClient(
        f"http://127.0.0.1:{port}/payments",
        NAMESPACE,
        egress_post(Egress("issue_refund", frozenset({f"127.0.0.1:{port}"}))),
        FAULTS,
    )
    with pytest.raises(ToolExecutionError) as failed:
        client.call("IssueRefund", {"order_id": "O-5512"})
    assert (failed.value.kind, failed.value.retryable) == ("server_error", True)


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        (ok_body("R-79"), "succeeded", None),
        # a retryable fault on a write may have followed its effect: reconciled, never failed
        (fault_body("Server", "SYS-BUSY"), "unknown", "server_error"),
        (fault_body("Server", "VAL-017"), "failed", "caller_error"),
        (fault_body("Server", "TXN-9999"), "unknown", "timeout"),
    ],
    ids=["ok", "retryable", "permanent", "unknown-outcome"],
)
def test_an_approved_refund_through_the_adapter_ends_in_its_fault_class(
    store: Any, legacy: Any, body: bytes, status: str, kind: str | None
) -> None:
    service = legacy((200 if kind is None else 500, body))
    harness = Harness(store)
    refund = harness.registry.tools["issue_refund"]

    def through_legacy(args: Any, ctx: HandlerContext) -> Any:
        assert ctx.http is not None
        client = SoapClient(service.url, NAMESPACE, egress_post(ctx.http), FAULTS)
        answer = client.call("IssueRefund", {"order_id": args.order_id, "amount_cents": args.amount_cents})
        return refund.result_model.model_validate(
            {**answer, "order_id": args.order_id, "amount_cents": args.amount_cents}
        )

    soap_refund = replace(
        refund, handler=through_legacy, egress_hosts=frozenset({f"127.0.0.1:{service.port}"})
    )
    specs = [soap_refund if s.name == "issue_refund" else s for s in harness.registry.tools.values()]
    registry = Registry.of(harness.registry.release, specs, harness.system)
    proposal, gateway = harness.approved_refund(registry, f"t-soap-{status}")
    delivery = gateway.executor.deliver(proposal["operation_key"], worker_id="w-soap", wait_s=30)
    op = store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == status == delivery.status
    assert len(service.received) == 1  # called once, never resubmitted
    if kind is not None:
        assert op.error is not None and op.error["kind"] == kind
    else:
        assert op.result is not None and op.result["refund_id"] == "R-79"
