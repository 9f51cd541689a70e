"""The MCP server itself: the official ``mcp`` low-level `Server` over an `McpGate`, on stdio or
streamable HTTP.

Why the low-level server: the tools it lists are the release's specs as the principal of the
session may see them (their exported argument schemas, under their wire names), and a call's
arguments are judged by dispatch, never by the SDK (``validate_input=False``), so that a refused
call gets the gateway's stable code and audit event like any other.

Authentication is per session and per request: over stdio the session's bearer token is the
process's (``TOOLGATE_TOKEN`` or ``--token-file``), checked before the session starts and again
at every request (a token revoked mid-session stops working); over HTTP every request carries
``Authorization: Bearer`` and is refused ``401`` before it reaches the MCP session when the token
is missing, unknown, rotated or revoked. Refusals are audited ``identity.refused`` by the
identities directory.

The HTTP app also serves the approval API and the reviewer console (`create_app`) over the same
gateway, so the review places a proposal names are on this server; a decision made there wakes
the task it decided at once (the approved call runs, in the background of the reviewer's answer).
With ``wait_for_approval`` a write's call stays open until a reviewer decides (or the proposal expires), sending a progress
notification at every look while it waits; otherwise it answers with its proposal at once and the
client asks ``toolgate_outcome`` later.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolgate.errors import ConfigurationError, IdentityError, ToolgateError
from toolgate.graph.mcp.calls import OUTCOME_TOOL, REQUEST_ID_META, CallAnswer, McpGate
from toolgate.graph.server.client_address import client_address
from toolgate.graph.server.http import create_app
from toolgate.graph.server.serving import retry_after_header
from toolgate.policy.output import redacted_traceback
from toolgate.policy.principal import Principal
from toolgate.policy.sign_in_throttle import SignInThrottled
from toolgate.tools.spec import ToolSpec, model_description

if TYPE_CHECKING:  # the official ``mcp`` package is the ``mcp`` extra: imported where it is used
    from mcp import types
    from mcp.server.lowlevel import Server

log = logging.getLogger(__name__)

SERVER_NAME = "toolgate"
POLL_S = 0.5
"""How often a call waiting for a reviewer looks at the proposal's status (and reports progress)."""
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
"""The names an HTTP server on loopback answers to unless the operator names others."""
HOST_NOT_ALLOWED = "host_not_allowed"
OUTCOME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"proposal_id": {"type": "string", "description": "The id a proposed call answered."}},
    "required": ["proposal_id"],
    "additionalProperties": False,
}


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    """How the operator runs the server."""

    allowed_hosts: frozenset[str] = LOOPBACK_NAMES
    """HTTP: the host names a request's ``Host`` header may name (`allowed_hosts`)."""
    wait_for_approval: bool = False
    """A write's call waits (with progress notifications) until a reviewer decides; else it
    answers with its proposal at once."""
    poll_s: float = POLL_S
    """Seconds between two looks at a waiting proposal."""


def mcp_tool(spec: ToolSpec, registry: Any) -> types.Tool:
    """One spec as MCP lists it: wire name, the model's description, the exported arguments schema,
    and hints saying whether it writes (a write is proposed, never run at once)."""
    from mcp import types

    [definition] = registry.openai_tools([spec])
    schema = dict(definition["function"]["parameters"])
    return types.Tool(
        name=spec.wire_name,
        description=model_description(spec),
        inputSchema=schema,
        annotations=types.ToolAnnotations(
            readOnlyHint=not spec.is_write,
            destructiveHint=spec.risk == "danger",
            idempotentHint=not spec.is_write,
            openWorldHint=False,
        ),
    )


def outcome_tool() -> types.Tool:
    """``toolgate_outcome``: the outcome of one of the caller's own proposals."""
    from mcp import types

    return types.Tool(
        name=OUTCOME_TOOL,
        description=(
            "The outcome of a write you proposed: still waiting for review, rejected, expired, or its "
            "result once approved and executed. Pass the proposal_id the write answered."
        ),
        inputSchema=OUTCOME_SCHEMA,
        annotations=types.ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False),
    )


def result_of(answer: CallAnswer) -> types.CallToolResult:
    """An answer as an MCP result: the JSON object as structured content and as text."""
    from mcp import types

    text = json.dumps(answer.payload, sort_keys=True, default=str)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structuredContent=answer.payload,
        isError=answer.is_error,
    )


def refused(exc: ToolgateError) -> types.CallToolResult:
    """A request refused before any task ran (authentication, an unknown proposal id)."""
    return result_of(CallAnswer({"status": "refused", "error": exc.code, "message": str(exc)}, is_error=True))


def build_server(
    gate: McpGate, session_token: Callable[[], str | None], options: ServeOptions
) -> Server[Any, Any]:
    """The MCP server over ``gate``. ``session_token`` gives the stdio session's token; a request
    that came over HTTP is authenticated by its own ``Authorization`` header instead."""
    from mcp.server.lowlevel import Server

    server: Server[Any, Any] = Server(SERVER_NAME)

    async def principal() -> Principal:
        request = server.request_context.request
        if isinstance(request, Request):
            found, source = bearer(request), client_address(request.scope)
        else:
            found, source = session_token(), None
        return await anyio.to_thread.run_sync(gate.authenticate, found, source)

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        who = await principal()
        specs = await anyio.to_thread.run_sync(gate.tools, who)
        return [mcp_tool(spec, gate.app.registry) for spec in specs] + [outcome_tool()]

    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        context = server.request_context
        try:
            who = await principal()
            if name == OUTCOME_TOOL:
                proposal_id = str(arguments.get("proposal_id", ""))
                answer = await anyio.to_thread.run_sync(gate.outcome, who, proposal_id)
            else:
                extra = context.meta.model_extra if context.meta is not None else None
                key = (extra or {}).get(REQUEST_ID_META)
                request_key = str(key) if key is not None else None
                answer = await anyio.to_thread.run_sync(gate.call, who, name, dict(arguments), request_key)
            if answer.proposal_id is not None and options.wait_for_approval:
                answer = await _waited(gate, who, answer, context, options.poll_s)
        except ToolgateError as exc:
            return refused(exc)
        return result_of(answer)

    return server


async def _waited(
    gate: McpGate, who: Principal, answer: CallAnswer, context: Any, poll_s: float
) -> CallAnswer:
    """Wait until a reviewer decided ``answer``'s proposal (or it expired), reporting progress at
    every look; then its outcome (the task woken, the approved call executed)."""
    proposal_id = answer.proposal_id
    assert proposal_id is not None
    token = context.meta.progressToken if context.meta is not None else None
    review = answer.payload.get("review") or {}
    where = review.get("console") or review.get("cli")
    looks = 0
    while not await anyio.to_thread.run_sync(gate.decided, proposal_id):
        looks += 1
        if token is not None:
            await context.session.send_progress_notification(
                token,
                float(looks),
                message=f"proposal {proposal_id} awaits review ({where})",
                related_request_id=str(context.request_id),
            )
        await anyio.sleep(poll_s)
    return await anyio.to_thread.run_sync(gate.outcome, who, proposal_id)


def allowed_hosts(bind_host: str, named: Sequence[str] = ()) -> frozenset[str]:
    """The host names an HTTP server listening on ``bind_host`` answers to: those the operator
    ``named`` (``--allowed-host``), else the loopback names when it listens on loopback, else the
    address it listens on. A server on every address (``0.0.0.0``, ``::``) must be told its names:
    a page on another site that resolves its own name to this server (DNS rebinding) must not
    reach the approval API or ``/mcp``, whatever the browser then sends."""
    if named:
        return frozenset(name.strip().lower().strip("[]") for name in named if name.strip())
    host = bind_host.strip().lower().strip("[]")
    if host in LOOPBACK_NAMES:
        return LOOPBACK_NAMES
    if host in ("0.0.0.0", "::", ""):
        raise ConfigurationError(
            f"--host {bind_host} listens on every address: name the host names clients use to reach"
            " this server with --allowed-host (once per name)"
        )
    return frozenset({host})


def host_name(header: str) -> str:
    """The host name of a ``Host`` header, without its port (``[::1]:8080`` is ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    name, colon, port = header.rpartition(":")
    return name if colon and port.isdigit() else header


def refusal(status: int, refused: ToolgateError, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    """The answer to a request refused before it reaches a session or a route: ``refused``'s code
    and message (and ``extra`` fields), never cached."""
    return JSONResponse(
        {"error": refused.code, "message": str(refused), **extra},
        status_code=status,
        headers={**(headers or {}), "Cache-Control": "no-store"},
    )


class HostAllowed:
    """ASGI middleware over the whole HTTP server (``/mcp``, the approval API, the console): a
    request whose ``Host`` names none of the server's names is refused ``421 host_not_allowed``
    before anything reads it, counted and audited like a failed sign-in from its address (the
    sign-in throttle's counted rows, so a flood writes a bounded number of them)."""

    def __init__(self, app: ASGIApp, gate: McpGate, hosts: frozenset[str]) -> None:
        self.app, self.gate, self.hosts = app, gate, hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            request = Request(scope)
            named = host_name(request.headers.get("host", ""))
            if named not in self.hosts:
                refused = IdentityError("this server does not answer to that host name", code=HOST_NOT_ALLOWED)
                await anyio.to_thread.run_sync(self._refused, client_address(request.scope))
                await refusal(421, refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refused(self, source: str | None) -> None:
        self.gate.app.gateway.directory.throttle.failed(
            HOST_NOT_ALLOWED, source=source or "unknown", identity=None, user_id=""
        )


def bearer(request: Request) -> str | None:
    """The bearer token of ``request``, if it sent one."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None




SESSION_HEADER = "mcp-session-id"
SESSION_NOT_FOUND = "session_not_found"
MAX_SESSIONS = 10_000
"""Sessions whose opener is remembered; past it the oldest is forgotten, and a request naming it
is refused like one naming a session that never was (closed, never open to anyone else)."""


class BearerRequired:
    """ASGI middleware: an MCP request without a valid bearer token is refused ``401`` (audited
    by the directory) before it reaches a session; an address past its failed sign-ins is refused
    ``429 sign_in_throttled`` with ``Retry-After``, as the approval API refuses it.

    A session belongs to the person who opened it: the session id the server hands out is
    remembered with its opener, and a request naming it with anyone else's token is answered
    ``404 session_not_found`` (audited ``identity.refused``), as a session that does not exist
    is, where another valid token holder who learned the id could read its event stream (the
    answers to the opener's calls) or close it."""

    def __init__(self, app: ASGIApp, gate: McpGate) -> None:
        self.app, self.gate = app, gate
        self.openers: collections.OrderedDict[str, str] = collections.OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            try:
                principal = await anyio.to_thread.run_sync(
                    self.gate.authenticate, bearer(request), client_address(request.scope)
                )
            except SignInThrottled as exc:
                throttled = refusal(
                    429, exc, {"Retry-After": retry_after_header(exc.retry_after_s)}, retry_after_s=exc.retry_after_s
                )
                await throttled(scope, receive, send)
                return
            except IdentityError as exc:
                await refusal(401, exc, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
            session = request.headers.get(SESSION_HEADER)
            if session is None:  # a new session: remember who opens it
                send = self._remembering(send, principal.user_id)
            elif self.openers.get(session) != principal.user_id:
                refused = IdentityError("no such session for this caller", code=SESSION_NOT_FOUND)
                await anyio.to_thread.run_sync(self._refused, principal.user_id)
                await refusal(404, refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _remembering(self, send: Send, user_id: str) -> Send:
        """``send``, noting the session id the response hands out as ``user_id``'s."""

        async def noted(message: Message) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", []):
                    if name.decode("latin-1").lower() == SESSION_HEADER:
                        self.openers[value.decode("latin-1")] = user_id
                        while len(self.openers) > MAX_SESSIONS:
                            self.openers.popitem(last=False)
            await send(message)

        return noted

    def _refused(self, user_id: str) -> None:
        self.gate.app.gateway.auditor.record("identity.refused", "refused", user_id=user_id, code=SESSION_NOT_FOUND)


def http_app(gate: McpGate, options: ServeOptions) -> Starlette:
    """The streamable HTTP MCP endpoint at ``/mcp`` beside the approval API and console."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    server = build_server(gate, lambda: None, options)
    sessions = StreamableHTTPSessionManager(app=server)
    review = create_app(
        lambda: gate.app.gateway, reviewing=lambda release: None, waker_interval_s=None, wake=_waker(gate)
    )

    async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        await sessions.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with sessions.run():
            yield

    routes = [Route("/mcp", endpoint=BearerRequired(endpoint, gate)), *review.routes]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(HostAllowed, gate=gate, hosts=options.allowed_hosts)],
    )


def _waker(gate: McpGate) -> Callable[[str], Awaitable[bool]]:
    """How a decision made in this server's approval API wakes the task it decided: in a worker
    thread of its own, so the reviewer's answer does not wait for the approved call to run (a
    failure is logged; the client's ``toolgate_outcome`` or waiting call wakes the task again)."""

    async def wake(thread: str) -> bool:
        if not thread.startswith("mcp-"):
            return False
        running = asyncio.get_running_loop().run_in_executor(None, gate.wake_task, thread)
        running.add_done_callback(_logged)
        return True

    return wake


def _logged(done: asyncio.Future[bool]) -> None:
    if not done.cancelled() and (exc := done.exception()) is not None:
        log.warning("an MCP task woken after a decision failed:\n%s", redacted_traceback(exc))


async def serve_stdio(gate: McpGate, token: str | None, options: ServeOptions) -> None:
    """Serve one session over this process's stdin and stdout, as the holder of ``token``."""
    from mcp.server.stdio import stdio_server

    server = build_server(gate, lambda: token, options)
    stdin, stdout = protocol_streams()
    async with stdio_server(stdin, stdout) as (read, write):
        await server.run(read, write, server.create_initialization_options())


def protocol_streams() -> tuple[anyio.AsyncFile[str], anyio.AsyncFile[str]]:
    """The stdio session's channel, taken away from everything else this process runs.

    Why: over stdio, file descriptors 0 and 1 are the MCP client's. Loaded code (a handler, an
    ownership resolver, a process either starts) writing there would speak JSON-RPC to the
    client past the gate (a forged answer to a request id, a request of its own), and reading
    there would take the client's requests. So the session keeps its own copies of both, and
    descriptor 0 becomes ``/dev/null`` (at its end) and 1 a copy of stderr (the operator's log)."""
    protocol_in, protocol_out = os.dup(0), os.dup(1)
    sys.stdout.flush()
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.close(nothing)
    os.dup2(2, 1)
    reader = open(protocol_in, encoding="utf-8", errors="replace")  # noqa: SIM115 - the session's for its life
    writer = open(protocol_out, "w", encoding="utf-8")  # noqa: SIM115
    return anyio.wrap_file(reader), anyio.wrap_file(writer)


__all__ = [
    "HOST_NOT_ALLOWED",
    "LOOPBACK_NAMES",
    "OUTCOME_SCHEMA",
    "POLL_S",
    "SERVER_NAME",
    "BearerRequired",
    "HostAllowed",
    "ServeOptions",
    "allowed_hosts",
    "bearer",
    "build_server",
    "host_name",
    "http_app",
    "mcp_tool",
    "outcome_tool",
    "protocol_streams",
    "refused",
    "result_of",
    "serve_stdio",
]
