"""An adapter for a legacy SOAP service: its fault codes become toolgate's failure classes, once.

Legacy systems (core banking, tax filing, ERP) answer in SOAP envelopes and report errors as
cryptic fault codes (the chapter's §12.4). The adapter keeps the XML and the codes in one place, so
a tool's handler calls ``client.call("SubmitFiling", {...})`` and gets a dict back or one of three
failures, each of which the gateway already knows how to recover from:

* retryable: nothing happened and a later attempt may succeed (``Server.Busy``, a 503 before the
  service took the request): `ToolExecutionError` ``server_error``, ``retryable=True``;
* permanent: the request is wrong or refused and will be refused again (a ``Client`` fault, a
  validation code): `ToolExecutionError` ``caller_error`` (or ``server_error`` not retryable for a
  permanent server-side refusal such as a locked account);
* unknown outcome: the service may have committed the effect (a read timed out after the request
  was sent, a ``Server`` fault the map does not name, a transaction fault): `SoapOutcomeUnknown`, a
  `TimeoutError`, so a write's operation is recorded ``unknown`` and reconciled by its status check
  on the system of record (never resubmitted blindly, never reported failed).

An unmapped fault code is an unknown outcome, never a failure: for a write, assuming "failed"
invites a second effect. The map is data (`FaultMap`), reviewed with the tool. The transport is the
handler's egress capability (`toolgate.tools.egress.Egress`), so the adapter reaches only the
allow-listed host. Responses are bounded before they are parsed.
"""

from __future__ import annotations

import urllib.error
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from xml.sax.saxutils import escape

from toolgate.errors import ToolExecutionError

SOAP_ENV = "http://schemas.xmlsoap.org/soap/envelope/"
"""SOAP 1.1 envelope namespace."""
MAX_RESPONSE_BYTES = 1_000_000
"""A larger answer is not parsed (treated as an unknown outcome: the service did answer)."""

FaultClass = Literal["retryable", "permanent", "unknown_outcome"]


class SoapOutcomeUnknown(TimeoutError):
    """The service may or may not have done it: reconcile by status check, never resubmit blindly.

    A `TimeoutError`, so the executor records a write's outcome as ``unknown`` and reconciles it."""

    def __init__(self, message: str, *, fault_code: str | None = None) -> None:
        super().__init__(message)
        self.fault_code = fault_code


@dataclass(frozen=True)
class Fault:
    """One SOAP fault as the service sent it."""

    code: str
    """``faultcode`` without its namespace prefix (``Client``, ``Server``, ``Server.Busy``)."""
    detail_code: str | None
    """The service's own code inside ``detail`` (``<code>``, ``<errorCode>``), when it sends one."""
    message: str
    """``faultstring``, bounded (shown to reviewers, never parsed)."""


@dataclass(frozen=True)
class FaultMap:
    """Which fault codes are retryable or permanent; anything else is an unknown outcome.

    The detail code decides first (it is the service's own, most specific word), then the
    ``faultcode`` (``Server.Busy``), then its class before the first dot (``Client``)."""

    retryable: frozenset[str] = frozenset({"Server.Busy", "Server.Unavailable"})
    permanent: frozenset[str] = frozenset({"Client", "VersionMismatch", "MustUnderstand"})
    """Permanent codes; a permanent code that starts with ``Client`` (or a detail code the tool's
    reviewers marked as the caller's) is the caller's fault, any other the server's."""
    caller_codes: frozenset[str] = frozenset()
    """Permanent detail codes that mean the arguments are wrong (the model may fix them)."""

    def classify(self, fault: Fault) -> FaultClass:
        """The failure class of ``fault``."""
        for code in (fault.detail_code, fault.code, fault.code.split(".", 1)[0]):
            if code is None:
                continue
            if code in self.retryable:
                return "retryable"
            if code in self.permanent or code in self.caller_codes:
                return "permanent"
        return "unknown_outcome"

    def caller_fault(self, fault: Fault) -> bool:
        """True when a permanent fault is the caller's (``caller_error``), not the server's."""
        return fault.code.split(".", 1)[0] == "Client" or fault.detail_code in self.caller_codes


Post = Callable[[str, bytes, dict[str, str], float], tuple[int, bytes]]
"""Sends one POST: ``(url, body, headers, timeout_s) -> (status, body)``; raises `TimeoutError`
when no answer came in time, `ConnectionRefusedError` (an `OSError`) when nothing was sent."""


def egress_post(http: Any) -> Post:
    """`Post` through a handler's egress capability (``ctx.http``): only its allow-listed hosts."""

    def post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, bytes]:
        response = http.request("POST", url, headers=headers, content=body, timeout_s=timeout_s)
        return response.status, response.body

    return post


def envelope(operation: str, namespace: str, arguments: Mapping[str, Any]) -> bytes:
    """The SOAP 1.1 request for ``operation`` with one element per argument (text escaped)."""
    parts = "".join(f"<m:{name}>{escape(str(value))}</m:{name}>" for name, value in arguments.items())
    return (
        f'<?xml version="1.0" encoding="utf-8"?>'
        f'<soap:Envelope xmlns:soap="{SOAP_ENV}"><soap:Body>'
        f'<m:{operation} xmlns:m="{escape(namespace)}">{parts}</m:{operation}>'
        f"</soap:Body></soap:Envelope>"
    ).encode()


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_response(data: bytes) -> dict[str, str] | Fault:
    """The first element of the body as ``{child: text}``, or its `Fault`; `ValueError` when the
    answer is not a SOAP envelope."""
    if len(data) > MAX_RESPONSE_BYTES:
        raise ValueError("response too large")
    root = ET.fromstring(data)
    body = root.find(f"{{{SOAP_ENV}}}Body")
    if _local(root.tag) != "Envelope" or body is None or len(body) == 0:
        raise ValueError("not a SOAP envelope")
    first = body[0]
    if _local(first.tag) == "Fault":
        code = (first.findtext("faultcode") or "").strip().rsplit(":", 1)[-1]
        detail = first.find("detail")
        detail_code = None
        if detail is not None:
            for element in detail.iter():
                if _local(element.tag) in ("code", "errorCode", "faultCode") and (element.text or "").strip():
                    detail_code = (element.text or "").strip()
                    break
        return Fault(code=code, detail_code=detail_code, message=(first.findtext("faultstring") or "")[:300])
    return {_local(child.tag): (child.text or "") for child in first}


@dataclass
class SoapClient:
    """One legacy SOAP endpoint behind the adapter (one per tool, with its own `FaultMap`)."""

    url: str
    namespace: str
    post: Post
    faults: FaultMap = field(default_factory=FaultMap)
    timeout_s: float = 10.0

    def call(self, operation: str, arguments: Mapping[str, Any]) -> dict[str, str]:
        """Call ``operation``: its result fields, or one classified failure (see the module)."""
        headers = {"Content-Type": "text/xml; charset=utf-8", "SOAPAction": f'"{self.namespace}/{operation}"'}
        try:
            status, data = self.post(
                self.url, envelope(operation, self.namespace, arguments), headers, self.timeout_s
            )
        except TimeoutError as exc:  # sent, no answer: it may have happened
            raise SoapOutcomeUnknown(f"{operation}: no answer in {self.timeout_s:g}s; reconcile") from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise SoapOutcomeUnknown(f"{operation}: no answer in {self.timeout_s:g}s; reconcile") from exc
            raise ToolExecutionError(
                "server_error", f"{operation}: the service could not be reached", retryable=True
            ) from exc
        except ConnectionRefusedError as exc:  # nothing was sent
            raise ToolExecutionError(
                "server_error", f"{operation}: the service could not be reached", retryable=True
            ) from exc
        try:
            parsed = parse_response(data)
        except (ValueError, ET.ParseError):
            parsed = None
        if isinstance(parsed, Fault):
            raise self._failure(operation, parsed)
        if parsed is not None and status == 200:
            return parsed
        if status in (429, 503):  # refused before it was taken
            raise ToolExecutionError("server_error", f"{operation}: service busy ({status})", retryable=True)
        if 400 <= status < 500:
            raise ToolExecutionError("caller_error", f"{operation}: request refused ({status})")
        raise SoapOutcomeUnknown(f"{operation}: unreadable answer ({status}); reconcile")

    def _failure(self, operation: str, fault: Fault) -> Exception:
        code = fault.detail_code or fault.code
        text = f"{operation}: fault {code}: {fault.message}"
        kind = self.faults.classify(fault)
        if kind == "retryable":
            return ToolExecutionError("server_error", text, retryable=True)
        if kind == "permanent":
            return ToolExecutionError(
                "caller_error" if self.faults.caller_fault(fault) else "server_error", text
            )
        return SoapOutcomeUnknown(f"{text}; the effect may exist: reconcile", fault_code=code)


__all__ = [
    "Fault",
    "FaultClass",
    "FaultMap",
    "Post",
    "SoapClient",
    "SoapOutcomeUnknown",
    "egress_post",
    "envelope",
    "parse_response",
]
