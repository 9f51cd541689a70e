"""How one approval-API route is answered over HTTP, whatever the route is about.

A route's logic (a `View`) is plain synchronous code over the store that gets an authenticated
caller and a bounded request (`ViewInput`) and returns a `Reply` or raises a `Refusal`. This
module is the rest, the same for every route: reading at most `MAX_BODY_BYTES`, parsing a body
strictly (`body_fields`), authenticating the bearer token, running the view in a worker thread
(the store is synchronous, and ``langgraph dev`` refuses blocking calls on the event loop), the
stable JSON form of every error, and waking the thread a decision changed. Keeping it apart lets
the views read as the rules of who sees and decides what, with no HTTP in them.

Load shedding: a view (or the gateway it is served over) refused for load
(`toolgate.policy.admission.Overloaded`, already audited as ``admission.overloaded``) answers
``503`` with ``Retry-After`` (whole seconds, rounded up) and the stable error body
``{"error": "overloaded", "message", "retry_after_s", "kind", "scope"}``; any refusal that
carries ``retry_after_s`` gets the same header. The caller is authenticated first: a request
without a valid token gets its ``401``, never learns about load.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from toolgate import json_limits
from toolgate.errors import ConfigurationError, IdentityError, NotFoundError, RegistryError
from toolgate.graph.gateway import Gateway
from toolgate.graph.server.client_address import client_address
from toolgate.graph.worker.waker import wake_quietly
from toolgate.policy.admission import Overloaded
from toolgate.policy.output import redacted_traceback
from toolgate.policy.principal import Principal
from toolgate.policy.sign_in_throttle import SignInThrottled

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
"""Largest request body read; a decision or an edit is far smaller."""
BAD_REQUEST = frozenset({"invalid_json", "invalid_body", "invalid_status", "invalid_page", "body_too_large"})
"""Codes of requests refused for their shape (422, 413), audited here as ``api.refused``."""
NO_STORE = {"Cache-Control": "no-store"}
"""Headers of every API answer: none is ever cached."""


class Refusal(Exception):
    """A route's answer other than success: HTTP status, stable code, readable message."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.extra = extra


@dataclass(frozen=True)
class ViewInput:
    """What a view may read from the request (already bounded; the body not yet parsed)."""

    path: Mapping[str, str]
    query: Mapping[str, str]
    raw_body: bytes | None = None
    reviewing: Callable[[str], Gateway | None] = lambda release_id: None
    """The gateway of a release release control serves beside this one (a candidate's proposal
    is decided under its own release's rules), or None."""


@dataclass(frozen=True)
class Reply:
    """A view's successful answer."""

    body: dict[str, Any]
    status: int = 200
    wake: str | None = None
    """Thread to wake once the answer is ready (a decision changed its operation)."""


View = Callable[[Gateway, Principal, ViewInput], Reply]
"""A route's logic: runs in a worker thread with the authenticated caller."""


# ---- request bodies ------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate keys in a JSON object")
    return dict(pairs)


def body_fields(raw: bytes | None, types: Mapping[str, type], *, required: Iterable[str]) -> dict[str, Any]:
    """The body as a JSON object with exactly the allowed ``types`` (a 422 refusal otherwise).

    Duplicate keys and NaN/Infinity are refused: the bytes a reviewer sent must mean one thing."""
    try:
        body = json_limits.loads(
            (raw or b"").decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_unique_keys
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refusal(422, "invalid_json", f"the body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise Refusal(422, "invalid_body", "the body must be a JSON object")
    unknown = sorted(set(body) - set(types))
    if unknown:
        raise Refusal(422, "invalid_body", f"unknown field(s): {', '.join(unknown)}")
    missing = sorted(set(required) - set(body))
    if missing:
        raise Refusal(422, "invalid_body", f"missing field(s): {', '.join(missing)}")
    for name, kind in types.items():
        if name in body and not isinstance(body[name], kind):
            expected = "a string" if kind is str else "an object" if kind is dict else kind.__name__
            raise Refusal(422, "invalid_body", f"{name} must be {expected}")
    return body


# ---- serving -------------------------------------------------------------------------------


def retry_after_header(seconds: float) -> str:
    """``Retry-After`` for a wait of ``seconds``: whole seconds, rounded up (never negative)."""
    return str(max(0, math.ceil(seconds)))


def _error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    headers = {**NO_STORE, **({"WWW-Authenticate": "Bearer"} if status == 401 else {})}
    if isinstance(extra.get("retry_after_s"), int | float):
        headers["Retry-After"] = retry_after_header(extra["retry_after_s"])
    return JSONResponse({"error": code, "message": message, **extra}, status_code=status, headers=headers)


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


async def _read_body(request: Request) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise Refusal(413, "body_too_large", f"the body exceeds {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _run_view(
    gw: Gateway,
    token: str | None,
    view: View,
    inp: ViewInput,
    source: str | None = None,
    body_refused: Refusal | None = None,
) -> Reply:
    """Authenticate, then answer (in a worker thread: every step reads or writes the store).
    ``body_refused``: the body was refused as it was read (too large), answered once the caller
    is known, so an unauthenticated request gets its ``401`` and a signed-in one is audited.

    Failed sign-ins are throttled per client address (``source``) and audited as counted events
    (`toolgate.policy.sign_in_throttle`): a throttled caller gets ``429 sign_in_throttled`` with
    ``Retry-After``, whatever token it sent."""
    try:
        caller = gw.directory.authenticate_bearer(token, source=source)  # audits its own refusals
    except SignInThrottled as exc:
        raise Refusal(429, exc.code, str(exc), retry_after_s=exc.retry_after_s) from exc
    except IdentityError as exc:
        raise Refusal(401, exc.code, str(exc)) from exc
    try:
        if body_refused is not None:
            raise body_refused
        return view(gw, caller, inp)
    except Refusal as exc:
        if exc.code in BAD_REQUEST:  # refused before any rule that audits its own refusals
            gw.auditor.record(
                "api.refused",
                "refused",
                user_id=caller.user_id,
                code=exc.code,
                detail={"status": exc.status, "path": dict(inp.path), "tenant_id": caller.tenant_id},
            )
        raise


async def serve(
    request: Request,
    gateway: Callable[[], Gateway],
    view: View,
    *,
    body: bool,
    reviewing: Callable[[str], Gateway | None],
    wake: Callable[[str], Awaitable[bool]] = wake_quietly,
) -> Response:
    """Answer ``request`` with ``view`` over ``gateway()``: its reply as JSON (with ``woken`` when
    it woke a thread), or a stable JSON error; never a traceback. ``wake`` wakes the thread a
    decision changed (default: this LangGraph server's loopback run; the MCP server wakes its own
    tasks)."""
    try:
        raw_body, body_refused = None, None
        if body:
            try:
                raw_body = await _read_body(request)
            except Refusal as exc:  # judged after sign-in (`_run_view`)
                body_refused = exc
        inp = ViewInput(
            path=dict(request.path_params),
            query=dict(request.query_params),
            raw_body=raw_body,
            reviewing=reviewing,
        )
        gw = await run_in_threadpool(gateway)
        source = client_address(request.scope)
        reply = await run_in_threadpool(_run_view, gw, _bearer(request), view, inp, source, body_refused)
    except Refusal as exc:
        return _error(exc.status, exc.code, str(exc), **exc.extra)
    except Overloaded as exc:  # no free slot: audited where it was refused; try again later
        return _error(
            503, exc.code, str(exc), retry_after_s=exc.retry_after_s, kind=exc.kind, scope=exc.scope
        )
    except NotFoundError:  # removed between our read and decide's: same answer as never there
        return _error(404, "not_found", "no such proposal")
    except (ConfigurationError, RegistryError) as exc:
        log.error("toolgate is not configured to serve %s:\n%s", request.url.path, redacted_traceback(exc))
        return _error(503, "unavailable", "toolgate is not configured on this server (see its log)")
    except Exception as exc:  # the client gets a stable error, the log the traceback (redacted)
        log.error("toolgate route %s failed:\n%s", request.url.path, redacted_traceback(exc))
        return _error(500, "internal_error", "internal error (see the server log)")
    woken = await wake(reply.wake) if reply.wake else False
    payload = {**reply.body, "woken": woken} if reply.wake else reply.body
    return JSONResponse(payload, status_code=reply.status, headers=NO_STORE)


__all__ = [
    "BAD_REQUEST",
    "MAX_BODY_BYTES",
    "NO_STORE",
    "Refusal",
    "Reply",
    "View",
    "ViewInput",
    "body_fields",
    "retry_after_header",
    "serve",
]
