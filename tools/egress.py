"""A handler's network reach: HTTP to the hosts its spec allows, and nowhere else.

A tool that calls out declares `toolgate.tools.spec.ToolSpec.egress_hosts` (``host`` for any port,
``host:port`` for one). Its handler gets an `Egress` in ``ctx.http``: an urllib-based client that
refuses any other host, and any redirect away from an allowed one, with
`toolgate.errors.CapabilityDenied` (``egress``), and reads no body past `MAX_RESPONSE_BYTES`.
A handler that goes around it (``socket``, ``urllib``, a library of its own) is caught too: while
it runs, its `Egress` is the current `EGRESS_SCOPE`, and a process-wide audit hook
(`install_guard`, on ``socket.getaddrinfo``, ``socket.connect``, ``socket.sendto`` and
``socket.sendmsg``) refuses every connection to a host outside the allowlist, and any new process
(it would run outside the hook). Each refusal is remembered on the `Egress` (`Egress.denials`), so
a handler that swallows the exception still fails.
"""

from __future__ import annotations

import contextvars
import ipaddress
import json as jsonlib
import re
import socket
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from toolgate.errors import CapabilityDenied, ToolExecutionError

HOST = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,252}))(:([0-9]{1,5}))?$")
"""An allowlist entry: a host name or IP (IPv6 in brackets), optionally ``:port``."""

EGRESS_SCOPE: contextvars.ContextVar[Egress | None] = contextvars.ContextVar("toolgate_egress", default=None)
"""The running handler's egress capability (set around the handler call, in its thread)."""


def host_problems(entry: str) -> list[str]:
    """Why an ``egress_hosts`` entry is malformed (a scheme, path, wildcard or bad port)."""
    match = HOST.match(entry)
    if match is None or (match.group(4) is not None and not 0 < int(match.group(4)) < 65536):
        return [f"egress host must be host or host:port, got {entry!r}"]
    return []


def _split(entry: str) -> tuple[str, int | None]:
    host, sep, port = entry.rpartition(":") if not entry.endswith("]") else (entry, "", "")
    if not sep or "]" in port or (host.count(":") and not host.startswith("[")):
        return entry.strip("[]").lower(), None
    return host.strip("[]").lower(), int(port)


@dataclass(eq=False)
class EgressResponse:
    """One HTTP response (any status; `raise_for_status` classifies failures)."""

    status: int
    headers: dict[str, str]
    body: bytes = field(repr=False)

    def json(self) -> Any:
        return jsonlib.loads(self.body or b"null")

    def raise_for_status(self) -> EgressResponse:
        """401/403: ``credential_refused`` (a revoked or insufficient credential: never retried); other 4xx:
        ``caller_error``; 5xx: retryable ``server_error``."""
        if self.status in (401, 403):
            raise ToolExecutionError(
                "credential_refused", f"the downstream refused the credential ({self.status})"
            )
        if 400 <= self.status < 500:
            raise ToolExecutionError("caller_error", f"the downstream refused the request ({self.status})")
        if self.status >= 500:
            raise ToolExecutionError("server_error", f"the downstream failed ({self.status})", retryable=True)
        return self


MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""The largest body `Egress` reads from a downstream: a larger one is never held in memory whole
(`ResponseTooLarge`), whatever the tool's own output bound, which applies only once the handler
returned."""


class ResponseTooLarge(Exception):
    """A downstream answered with more than the capability reads (`MAX_RESPONSE_BYTES`). Not a
    `ToolExecutionError`: the downstream did answer, so a write's outcome is unknown (reconciled),
    never failed; a read fails ``server_error``."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx is returned as is: following it could leave the allowlist


class Egress:
    """HTTP for one handler call, limited to its tool's allowlist."""

    def __init__(
        self,
        tool: str,
        hosts: frozenset[str],
        *,
        timeout_s: float = 10.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.tool = tool
        self.hosts = frozenset(_split(entry) for entry in hosts)
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.denials: list[CapabilityDenied] = []
        self._addresses: dict[str, set[str]] = {}
        self._opener = urllib.request.build_opener(_NoRedirect())

    def __repr__(self) -> str:
        return f"Egress(tool={self.tool!r}, hosts={sorted(h for h, _ in self.hosts)!r})"

    def allows(self, host: str, port: int | None) -> bool:
        """True when ``host`` (a name or an address) and ``port`` are in the allowlist."""
        host = host.strip("[]").lower()
        for allowed, allowed_port in self.hosts:
            if allowed_port is not None and port is not None and allowed_port != port:
                continue
            if host == allowed or host in self._resolved(allowed):
                return True
        return False

    def _resolved(self, host: str) -> set[str]:
        """The addresses an allowed name resolves to (a connection names an address, not a name),
        looked up once per call."""
        found = self._addresses.get(host)
        if found is not None:
            return found
        try:
            found = {str(ipaddress.ip_address(host))}
        except ValueError:
            token = EGRESS_SCOPE.set(None)  # the lookup itself is not the handler's
            try:
                found = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
            except OSError:
                found = set()
            finally:
                EGRESS_SCOPE.reset(token)
        self._addresses[host] = found
        return found

    def deny(self, host: str, port: int | None) -> CapabilityDenied:
        """Remember and return the refusal of ``host:port``."""
        target = f"{host}:{port}" if port is not None else host
        denied = CapabilityDenied("egress", target, f"tool {self.tool!r} may not reach {target}")
        self.denials.append(denied)
        return denied

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        json: Any = None,
        content: bytes | None = None,
        timeout_s: float | None = None,
    ) -> EgressResponse:
        """Send one request to an allowed host; `CapabilityDenied` for any other (nothing is sent).
        The body is ``json`` encoded, or ``content`` as given (an XML envelope, with its own
        ``Content-Type`` among ``headers``)."""
        parts = urllib.parse.urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ToolExecutionError("server_error", "egress supports http and https URLs only")
        if not self.allows(parts.hostname, port):
            raise self.deny(parts.hostname, port)
        data = content if json is None else jsonlib.dumps(json).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method.upper(), headers=dict(headers or {}))
        if json is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(request, timeout=timeout_s or self.timeout_s) as response:
                return EgressResponse(response.status, dict(response.headers.items()), self._body(response))
        except urllib.error.HTTPError as exc:
            with exc:
                return EgressResponse(exc.code, dict(exc.headers.items()), self._body(exc))

    def _body(self, response: Any) -> bytes:
        """The body, read no further than one byte past the bound (`ResponseTooLarge` then)."""
        data: bytes = response.read(self.max_response_bytes + 1)
        if len(data) > self.max_response_bytes:
            raise ResponseTooLarge(f"the downstream answered more than {self.max_response_bytes} bytes")
        return data

    def get(self, url: str, **kwargs: Any) -> EgressResponse:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> EgressResponse:
        return self.request("POST", url, **kwargs)


def _address(args: tuple[Any, ...], event: str) -> tuple[str, int | None] | None:
    if event == "socket.getaddrinfo":
        host, port = args[0], args[1]
        if host is None:
            return None
        name = host.decode("idna") if isinstance(host, bytes) else str(host)
        return name, int(port) if isinstance(port, int) or (
            isinstance(port, str) and port.isdigit()
        ) else None
    address = args[1]
    if address is None:  # a ``sendmsg`` on a connected socket: its ``connect`` was judged
        return None
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return str(address), None  # a Unix socket path: never on an allowlist


_SOCKET_EVENTS = frozenset({"socket.connect", "socket.getaddrinfo", "socket.sendmsg", "socket.sendto"})
_PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.spawn", "os.fork", "os.forkpty"}
)
"""A new process would run outside this hook: a confined handler may not start one."""


def _guard(event: str, args: tuple[Any, ...]) -> None:
    if event not in _SOCKET_EVENTS and event not in _PROCESS_EVENTS:
        return
    scope = EGRESS_SCOPE.get()
    if scope is None:
        return
    if event in _PROCESS_EVENTS:
        raise scope.deny(f"process:{event}", None)
    found = _address(args, event)
    if found is not None and not scope.allows(*found):
        raise scope.deny(*found)


_installed = threading.Lock()
_done: list[bool] = []


def install_guard() -> None:
    """Install the audit hook once per process (audit hooks cannot be removed)."""
    with _installed:
        if not _done:
            sys.addaudithook(_guard)
            _done.append(True)


__all__ = [
    "EGRESS_SCOPE",
    "MAX_RESPONSE_BYTES",
    "Egress",
    "EgressResponse",
    "ResponseTooLarge",
    "host_problems",
    "install_guard",
]
