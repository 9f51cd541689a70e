"""The approval API and the reviewer console, served by the LangGraph server beside the graph.

``langgraph.json`` mounts `app` (``"http": {"app": "toolgate.graph.http:app"}``); the server
merges these routes with its own and runs this app's lifespan. Every ``/toolgate/...`` route
authenticates its caller by bearer token (`IdentityDirectory.authenticate_bearer`) and answers
only about proposals of the caller's tenant that the caller may review (a role of the tool's
approval class) or requested. Anything else answers 404 exactly like an unknown id (no oracle),
and is audited as ``api.refused``. Decisions go through `decide` and `edit_proposal`, the same
code as the CLI, so this door adds no authority of its own.

After a decision the waiting thread is woken (`wake_thread`), and a background waker wakes
threads whose approval was decided elsewhere (the CLI, another server). A wake carries no
authority: the graph re-reads the store and re-checks everything, so a wrong wake is only a
useless run.

The store is synchronous: every store call runs in a worker thread, never on the server's event
loop (``langgraph dev`` refuses blocking calls there).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, get_args

import httpx
from langgraph_sdk import get_client
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from toolgate.clock import parse_iso
from toolgate.errors import (
    REJECTION_CODES,
    ApprovalError,
    ConfigurationError,
    IdentityError,
    NotFoundError,
    RegistryError,
    ToolExecutionError,
)
from toolgate.forensics import trace
from toolgate.graph.edits import edit_proposal
from toolgate.graph.gateway import Gateway
from toolgate.graph.review import ReviewOutcome, decide
from toolgate.policy.principal import Principal
from toolgate.settings import read_settings
from toolgate.store.records import OperationRecord, OperationStatus, ProposalRecord
from toolgate.tools.spec import HandlerContext

log = logging.getLogger(__name__)

ASSISTANT_ID = "toolgate"
"""The graph id in ``langgraph.json``; wake runs are created on it."""
WAKER_INTERVAL_S = 2.0
"""How often the background waker looks for threads whose approval was decided elsewhere."""
MAX_BODY_BYTES = 64 * 1024
"""Largest request body read; a decision or an edit is far smaller."""
MAX_AWAITED_PER_THREAD = 64
"""Operation keys read from one thread's (untrusted) state per waker round."""
CONSOLE_DIR = Path(__file__).resolve().parent / "console"
"""The console's static files (package data of ``toolgate.graph``)."""
STATUSES: tuple[str, ...] = get_args(OperationStatus)
"""Values of the list route's ``status`` filter (besides ``all``)."""

_NO_STORE = {"Cache-Control": "no-store"}
_CONSOLE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # everything from this origin, nothing inline, no form ever submitted by the browser itself
    # (a sign-in form posted without its script would put the token in a URL)
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}
_FORBIDDEN = frozenset({"missing_role", "cross_tenant", "reviewer_inactive", "unauthorized"})
"""Refusal codes about who the caller is (403); other decision refusals are conflicts (409)."""
_UNPROCESSABLE = (frozenset(REJECTION_CODES) | {"reason_required"}) - _FORBIDDEN
"""Refusal codes about what the caller sent: a missing reason, edited arguments dispatch refused."""


class _Refusal(Exception):
    """A route's answer other than success: HTTP status, stable code, readable message."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.extra = extra


@dataclass(frozen=True)
class _Input:
    """What a view may read from the request (already bounded; the body not yet parsed)."""

    path: Mapping[str, str]
    query: Mapping[str, str]
    raw_body: bytes | None = None
    reviewing: Callable[[str], Gateway | None] = lambda release_id: None
    """The gateway of a release release control serves beside this one (a candidate's proposal
    is decided under its own release's rules), or None."""


def _deciding_gateway(gw: Gateway, proposal: ProposalRecord, inp: _Input) -> Gateway:
    """The gateway whose rules decide ``proposal``: this process's for its own release, the
    proposal's release's while release control serves it (the store's records say which), else
    this process's, which refuses another release's proposal (``wrong_release``)."""
    if proposal.release == gw.registry.release:
        return gw
    return inp.reviewing(proposal.release) or gw


@dataclass(frozen=True)
class _Reply:
    """A view's successful answer."""

    body: dict[str, Any]
    status: int = 200
    wake: str | None = None
    """Thread to wake once the answer is ready (a decision changed its operation)."""


View = Callable[[Gateway, Principal, _Input], _Reply]
"""A route's logic: runs in a worker thread with the authenticated caller."""


# ---- who may see what ----------------------------------------------------------------------


def visible(gw: Gateway, caller: Principal, proposal: ProposalRecord) -> bool:
    """True when ``caller`` may see ``proposal``: its requester (who may follow it, and is refused
    by `decide` if they try to decide it), or a reviewer for its tenant (one of its people, or
    staff granted that tenant) holding a role of its tool's approval class."""
    if proposal.requester_id == caller.user_id and proposal.tenant_id == caller.tenant_id:
        return True
    if not caller.reviews_for(proposal.tenant_id):
        return False
    spec = gw.registry.get(proposal.tool)
    return spec is not None and bool(caller.roles & spec.approval.roles)


def _unseen(
    gw: Gateway,
    caller: Principal,
    route: str,
    what: str,
    *,
    proposal: ProposalRecord | None = None,
    operation: OperationRecord | None = None,
) -> _Refusal:
    """Audit a request for a record the caller may not see (or that does not exist) as
    ``api.refused``; the caller gets the same 404 either way."""
    gw.auditor.record(
        "api.refused",
        "refused",
        user_id=caller.user_id,
        code="not_visible" if proposal or operation else "not_found",
        proposal_id=proposal.proposal_id if proposal else None,
        operation_key=operation.operation_key if operation else None,
        tool=proposal.tool if proposal else operation.tool if operation else None,
        detail={"route": route, "status": 404, "tenant_id": caller.tenant_id},
    )
    return _Refusal(404, "not_found", f"no such {what}")


def _visible_proposal(
    gw: Gateway, caller: Principal, proposal_id: str, route: str
) -> tuple[ProposalRecord, OperationRecord]:
    proposal = gw.store.get_proposal(proposal_id)
    operation = gw.store.get_operation(proposal.operation_key) if proposal else None
    if proposal is None or operation is None:
        raise _unseen(gw, caller, route, "proposal")
    if not visible(gw, caller, proposal):
        raise _unseen(gw, caller, route, "proposal", proposal=proposal)
    return proposal, operation


def _visible_operation(
    gw: Gateway, caller: Principal, operation_key: str, route: str
) -> tuple[OperationRecord, ProposalRecord]:
    """An operation is visible through its proposal (reads have none and are not reviewed here)."""
    operation = gw.store.get_operation(operation_key)
    proposal = gw.store.get_proposal(operation.proposal_id) if operation and operation.proposal_id else None
    if operation is None:
        raise _unseen(gw, caller, route, "operation")
    if proposal is None or operation.tenant_id != proposal.tenant_id or not visible(gw, caller, proposal):
        raise _unseen(gw, caller, route, "operation", operation=operation)
    return operation, proposal


# ---- request bodies ------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate keys in a JSON object")
    return dict(pairs)


def _fields(raw: bytes | None, types: Mapping[str, type], *, required: Iterable[str]) -> dict[str, Any]:
    """The body as a JSON object with exactly the allowed ``types`` (a 422 refusal otherwise).

    Duplicate keys and NaN/Infinity are refused: the bytes a reviewer sent must mean one thing."""
    try:
        body = json.loads(
            (raw or b"").decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_unique_keys
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise _Refusal(422, "invalid_json", f"the body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise _Refusal(422, "invalid_body", "the body must be a JSON object")
    unknown = sorted(set(body) - set(types))
    if unknown:
        raise _Refusal(422, "invalid_body", f"unknown field(s): {', '.join(unknown)}")
    missing = sorted(set(required) - set(body))
    if missing:
        raise _Refusal(422, "invalid_body", f"missing field(s): {', '.join(missing)}")
    for name, kind in types.items():
        if name in body and not isinstance(body[name], kind):
            expected = "a string" if kind is str else "an object" if kind is dict else kind.__name__
            raise _Refusal(422, "invalid_body", f"{name} must be {expected}")
    return body


# ---- what a reviewer sees ------------------------------------------------------------------


def _seconds_left(proposal: ProposalRecord, now: Any) -> int:
    return max(0, int((parse_iso(proposal.expires_at) - now).total_seconds()))


def _summary(proposal: ProposalRecord, operation: OperationRecord, now: Any) -> dict[str, Any]:
    return {
        "proposal_id": proposal.proposal_id,
        "tool": proposal.tool,
        "risk": proposal.risk,
        "requester": proposal.requester_id,
        "expires_at": proposal.expires_at,
        "seconds_left": _seconds_left(proposal, now),
        "status": operation.status,
        "digest": proposal.digest,
    }


def _review_details(gw: Gateway, proposal: ProposalRecord) -> tuple[dict[str, Any] | None, str | None]:
    """The tool's extra facts for this proposal (what a preview token will create...), or why not.

    Same call as the approval node's interrupt payload. A failing lookup does not hide the rest
    of the proposal; the console shows the reason and warns against approving without them."""
    spec = gw.registry.get(proposal.tool)
    if spec is None or spec.review_details is None:
        return {}, None
    try:
        return spec.review_details(
            spec.handler_arguments(proposal.arguments),
            HandlerContext(tenant_id=proposal.tenant_id, user_id=proposal.requester_id),
        ), None
    except ToolExecutionError as exc:
        return None, f"review details unavailable: {exc}"
    except Exception:  # any other failure of a tool's lookup: logged, never shown raw
        log.warning("review details of %s failed", proposal.proposal_id, exc_info=True)
        return None, "review details unavailable (see the server log)"


def _detail(gw: Gateway, proposal: ProposalRecord, operation: OperationRecord) -> dict[str, Any]:
    details, details_error = _review_details(gw, proposal)
    superseded_by = gw.store.superseding(proposal.proposal_id)
    return {
        **_summary(proposal, operation, gw.store.now()),
        "operation_key": proposal.operation_key,
        "arguments": proposal.arguments,
        "arguments_sha256": proposal.arguments_sha256,
        "tool_version": proposal.tool_version,
        "handler_revision": proposal.handler_revision,
        "release": proposal.release,
        "effect": proposal.effect,
        "rollback": proposal.rollback,
        "approval_class": proposal.approval_class,
        "created_at": proposal.created_at,
        "supersedes": proposal.supersedes,
        "superseded_by": superseded_by.proposal_id if superseded_by else None,
        "editors": list(proposal.editors),
        "decisions": [
            {
                "reviewer": d.reviewer_id,
                "decision": d.decision,
                "authentic": d.authentic,
                "digest_bound": d.digest == proposal.digest,
                "decided_at": d.decided_at,
                "reason": d.reason,
            }
            for d in gw.store.decisions_for(proposal.proposal_id)
        ],
        "review_details": details,
        "review_details_error": details_error,
    }


# ---- views ---------------------------------------------------------------------------------


def _me(gw: Gateway, caller: Principal, inp: _Input) -> _Reply:
    return _Reply(
        {
            "user_id": caller.user_id,
            "tenant": caller.tenant_id,
            "roles": sorted(caller.roles),
            "display_name": caller.display_name,
        }
    )


def _list(gw: Gateway, caller: Principal, inp: _Input) -> _Reply:
    status = inp.query.get("status", "pending_approval")
    if status != "all" and status not in STATUSES:
        raise _Refusal(422, "invalid_status", f"status must be 'all' or one of {', '.join(STATUSES)}")
    rows = gw.store.list_proposals(None if status == "all" else status)
    now = gw.store.now()
    return _Reply({"proposals": [_summary(p, op, now) for p, op in rows if visible(gw, caller, p)]})


def _show(gw: Gateway, caller: Principal, inp: _Input) -> _Reply:
    proposal, operation = _visible_proposal(gw, caller, inp.path["proposal_id"], "proposal")
    return _Reply(_detail(gw, proposal, operation))


def _refused_decision(gw: Gateway, proposal: ProposalRecord, exc: ApprovalError) -> _Refusal:
    """The HTTP form of a refusal `decide` or `edit_proposal` already audited."""
    status = 403 if exc.code in _FORBIDDEN else 422 if exc.code in _UNPROCESSABLE else 409
    operation = gw.store.get_operation(proposal.operation_key)
    return _Refusal(status, exc.code, str(exc), status_now=operation.status if operation else None)


def _decided(outcome: ReviewOutcome) -> _Reply:
    status = outcome.operation.status
    return _Reply(
        {
            "proposal_id": outcome.proposal.proposal_id,
            "operation_key": outcome.proposal.operation_key,
            "decision": outcome.record.decision,
            "status": status,
            "verdict": outcome.verdict.status,
            "approvers": list(outcome.verdict.approvers),
            "still_needed": outcome.verdict.reason if outcome.verdict.status == "pending" else "",
        },
        wake=outcome.proposal.thread_id if status in ("approved", "rejected") else None,
    )


def _approve(gw: Gateway, caller: Principal, inp: _Input) -> _Reply:
    proposal, _ = _visible_proposal(gw, caller, inp.path["proposal_id"], "approve")
    gw = _deciding_gateway(gw, proposal, inp)
    digest = _fields(inp.raw_body, {"digest": str}, required=["digest"])["digest"]
    if not digest.strip():
        raise _Refusal(422, "invalid_body", "digest must be the proposal digest you reviewed")
    try:
        outcome = decide(gw, proposal.proposal_id, caller, "approve", seen_digest=digest)
    except ApprovalError as exc:
        raise _refused_decision(gw, proposal, exc) from exc
    return _decided(outcome)


def _reject(gw: Gateway, caller: Principal, inp: _Input) -> _Reply:
    proposal, _ = _visible_proposal(gw, caller, inp.path["proposal_id"], "reject")
    gw = _deciding_gateway(gw, proposal, inp)
    reason = _fields(inp.raw_body, {"reason": str}, required=[]).get("reason", "")
    try:  # an empty reason is refused (and audited) by decide itself
        outcome = decide(gw, proposal.proposal_id, caller, "reject", reason=reason)
    except ApprovalError as exc:
        raise _refused_decision(gw, proposal, exc) from exc
    return _decided(outcome)


def _edit(gw: Gateway, caller: Principal, inp: _Input) -> _Reply:
    proposal, _ = _visible_proposal(gw, caller, inp.path["proposal_id"], "edit")
    gw = _deciding_gateway(gw, proposal, inp)
    body = _fields(inp.raw_body, {"arguments": dict, "tool": str}, required=["arguments"])
    spec = gw.registry.get(proposal.tool)
    if spec is None or not caller.roles & spec.approval.roles:
        # checked before the edited call is judged: judging it counts against the requester's limits
        gw.auditor.record(
            "api.refused",
            "refused",
            user_id=caller.user_id,
            code="missing_role",
            proposal_id=proposal.proposal_id,
            operation_key=proposal.operation_key,
            tool=proposal.tool,
            detail={"route": "edit", "status": 403},
        )
        raise _Refusal(403, "missing_role", f"editing {proposal.tool} needs a reviewer role of its approval")
    try:
        edited = edit_proposal(
            gw,
            proposal.proposal_id,
            caller,
            tool=body.get("tool", proposal.tool),
            arguments=body["arguments"],
        )
    except ApprovalError as exc:
        raise _refused_decision(gw, proposal, exc) from exc
    return _Reply(
        {
            "proposal_id": edited.proposal_id,
            "supersedes": proposal.proposal_id,
            "operation_key": edited.operation_key,
            "status": "pending_approval",
            "digest": edited.digest,
        },
        status=201,
        wake=proposal.thread_id,  # the original was rejected: the thread re-interrupts on the new one
    )


def _operation(gw: Gateway, caller: Principal, inp: _Input) -> _Reply:
    operation, proposal = _visible_operation(gw, caller, inp.path["operation_key"], "operation")
    return _Reply(
        {
            "operation_key": operation.operation_key,
            "proposal_id": proposal.proposal_id,
            "tool": operation.tool,
            "status": operation.status,
            "result": operation.result,
            "error": operation.error,
            "attempts": operation.attempts,
            "updated_at": operation.updated_at,
        }
    )


def _trace(gw: Gateway, caller: Principal, inp: _Input) -> _Reply:
    operation, _ = _visible_operation(gw, caller, inp.path["operation_key"], "trace")
    report = trace(gw.store, gw.auditor, operation_key=operation.operation_key)
    return _Reply(
        {
            "operation_key": operation.operation_key,
            "final": report.final,
            "missing": report.missing,
            "approver": report.approver,
            "tamper_check": report.tamper_check,
            "events": [
                {
                    "seq": e.seq,
                    "event": e.event,
                    "result": e.result,
                    "code": e.code,
                    "at": e.occurred_at,
                    "actor": e.actor_id,
                    "release": e.tool_release,
                    "handler": e.handler_revision,
                }
                for e in report.events
            ],
        }
    )


# ---- serving -------------------------------------------------------------------------------


def _error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    headers = {**_NO_STORE, **({"WWW-Authenticate": "Bearer"} if status == 401 else {})}
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
            raise _Refusal(413, "body_too_large", f"the body exceeds {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _run_view(gw: Gateway, token: str | None, view: View, inp: _Input) -> _Reply:
    """Authenticate, then answer (in a worker thread: every step reads or writes the store)."""
    try:
        caller = gw.directory.authenticate_bearer(token)  # audits its own refusals
    except IdentityError as exc:
        raise _Refusal(401, exc.code, str(exc)) from exc
    return view(gw, caller, inp)


async def _wake_quietly(thread_id: str) -> bool:
    """Wake ``thread_id``; a failure is logged, never the request's failure (the decision is
    recorded, and the background waker retries)."""
    try:
        return await wake_thread(thread_id)
    except Exception:  # the server's loopback client failing must not undo a recorded decision
        log.warning("could not wake thread %s; the waker will retry", thread_id, exc_info=True)
        return False


async def _serve(
    request: Request,
    gateway: Callable[[], Gateway],
    view: View,
    *,
    body: bool,
    reviewing: Callable[[str], Gateway | None],
) -> Response:
    try:
        inp = _Input(
            path=dict(request.path_params),
            query=dict(request.query_params),
            raw_body=await _read_body(request) if body else None,
            reviewing=reviewing,
        )
        gw = await run_in_threadpool(gateway)
        reply = await run_in_threadpool(_run_view, gw, _bearer(request), view, inp)
    except _Refusal as exc:
        return _error(exc.status, exc.code, str(exc), **exc.extra)
    except NotFoundError:  # removed between our read and decide's: same answer as never there
        return _error(404, "not_found", "no such proposal")
    except (ConfigurationError, RegistryError):
        log.exception("toolgate is not configured to serve %s", request.url.path)
        return _error(503, "unavailable", "toolgate is not configured on this server (see its log)")
    except Exception:  # the client gets a stable error, the log gets the traceback
        log.exception("toolgate route %s failed", request.url.path)
        return _error(500, "internal_error", "internal error (see the server log)")
    woken = await _wake_quietly(reply.wake) if reply.wake else False
    payload = {**reply.body, "woken": woken} if reply.wake else reply.body
    return JSONResponse(payload, status_code=reply.status, headers=_NO_STORE)


# ---- waking threads ------------------------------------------------------------------------


@cache
def _langgraph_client() -> Any:
    """The in-process client of this LangGraph server (no url: calls the same server, unauthenticated
    loopback, which only trusted server code can reach)."""
    return get_client()


async def wake_thread(thread_id: str) -> bool:
    """Resume ``thread_id`` on this server so it re-reads its approvals; True when a run started.

    Replaced in tests. A thread that is not on this server (404) or is already running (409) is
    fine: whoever holds it, or the waker's next round, picks the decision up."""
    try:
        await _langgraph_client().runs.create(
            thread_id, ASSISTANT_ID, command={"resume": {"wake": True}}, multitask_strategy="reject"
        )
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code in (404, 409):
            log.info("thread %s not woken (%s)", thread_id, exc.response.status_code)
            return False
        raise
    return True


def awaited_operation_keys(values: object) -> list[str]:
    """The operation keys a thread's state says it awaits (``awaiting`` call ids -> ``calls``).

    Thread state is untrusted input (clients rewrite it): anything malformed is skipped, and the
    count is bounded. The keys only choose which threads to wake, never what a thread may do."""
    if not isinstance(values, Mapping):
        return []
    awaiting, calls = values.get("awaiting"), values.get("calls")
    if not isinstance(awaiting, list) or not isinstance(calls, Mapping):
        return []
    keys: list[str] = []
    for call_id in awaiting[:MAX_AWAITED_PER_THREAD]:
        call = calls.get(call_id) if isinstance(call_id, str) else None
        key = call.get("operation_key") if isinstance(call, Mapping) else None
        if isinstance(key, str) and 0 < len(key) <= 200 and key not in keys:
            keys.append(key)
    return keys


def _statuses(gw: Gateway, keys: Iterable[str]) -> dict[str, str]:
    operations = (gw.store.get_operation(key) for key in keys)
    return {op.operation_key: op.status for op in operations if op is not None}


Woken = dict[str, tuple[tuple[str, str], ...]]
"""Per thread, the decided operations it was last woken for (so a thread the graph left waiting
for the same reason is not woken again every round)."""


async def wake_decided_threads(gw: Gateway, client: Any, woken: Woken) -> list[str]:
    """One round of the waker: wake each interrupted thread that awaits an operation no longer
    ``pending_approval`` in the store; returns the threads a run was started on."""
    threads = await client.threads.search(status="interrupted", limit=100)
    awaited: dict[str, list[str]] = {}
    for thread in threads if isinstance(threads, list) else []:
        thread_id = thread.get("thread_id") if isinstance(thread, Mapping) else None
        if not isinstance(thread_id, str) or not thread_id:
            continue
        values = thread.get("values")
        if not isinstance(values, Mapping):
            state = await client.threads.get_state(thread_id)
            values = state.get("values") if isinstance(state, Mapping) else None
        keys = awaited_operation_keys(values)
        if keys:
            awaited[thread_id] = keys
    statuses = await run_in_threadpool(_statuses, gw, {k for keys in awaited.values() for k in keys})
    started: list[str] = []
    for thread_id, keys in awaited.items():
        decided = tuple(
            sorted(
                (k, statuses[k]) for k in keys if statuses.get(k, "pending_approval") != "pending_approval"
            )
        )
        if not decided or woken.get(thread_id) == decided:
            continue
        try:
            if await wake_thread(thread_id):
                woken[thread_id] = decided
                started.append(thread_id)
        except Exception:  # one thread failing must not keep the others asleep
            log.warning("waker: could not wake thread %s", thread_id, exc_info=True)
    for gone in set(woken) - set(awaited):
        del woken[gone]
    return started


async def _waker(
    gateway: Callable[[], Gateway], client: Callable[[], Any], interval_s: float, stop: asyncio.Event
) -> None:
    """Run `wake_decided_threads` every ``interval_s`` until ``stop``; a failed round is logged
    (once per distinct error) and the loop goes on."""
    woken: Woken = {}
    last_error: str | None = None
    while not stop.is_set():
        try:
            gw = await run_in_threadpool(gateway)
            await wake_decided_threads(gw, client(), woken)
            last_error = None
        except Exception as exc:  # store down, server still starting: try again next round
            text = f"{type(exc).__name__}: {exc}"
            if text != last_error:
                log.warning("waker round failed: %s", text, exc_info=True)
            last_error = text
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)


# ---- the app -------------------------------------------------------------------------------


def _server_gateway() -> Gateway:
    """The gateway of this server process (`server_parts`, built on first use)."""
    from toolgate.graph.server import server_parts  # the server's parts only when serving

    return server_parts().gateway


def _server_reviewing_gateway(release_id: str) -> Gateway | None:
    """The server's gateway of ``release_id`` while release control serves that release."""
    from toolgate.graph.server import server_parts

    router = server_parts().router
    return router.reviewing_gateway(release_id) if router is not None else None


def _console_file(name: str, media_type: str) -> Callable[[Request], Any]:
    async def serve(request: Request) -> Response:
        return FileResponse(CONSOLE_DIR / name, media_type=media_type, headers=_CONSOLE_HEADERS)

    return serve


async def _console_slash(request: Request) -> Response:
    # the page lives at /console so its relative links (console/app.js, toolgate/...) resolve
    # under any mount prefix
    return RedirectResponse("../console", status_code=308)


def create_app(
    gateway: Callable[[], Gateway] = _server_gateway,
    *,
    reviewing: Callable[[str], Gateway | None] = _server_reviewing_gateway,
    waker_interval_s: float | None = WAKER_INTERVAL_S,
    langgraph_client: Callable[[], Any] = _langgraph_client,
) -> Starlette:
    """The approval API and console over the gateway ``gateway()`` returns (called per request;
    it must be cheap after the first call). ``reviewing(release_id)`` gives the gateway of another
    release release control serves (decisions on its proposals use its rules), or None.
    ``waker_interval_s=None`` runs no background waker."""

    def api(path: str, view: View, method: str = "GET") -> BaseRoute:
        async def endpoint(request: Request) -> Response:
            return await _serve(request, gateway, view, body=method == "POST", reviewing=reviewing)

        return Route(path, endpoint, methods=[method], name=view.__name__.strip("_"))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stop = asyncio.Event()
        task = (
            asyncio.create_task(_waker(gateway, langgraph_client, waker_interval_s, stop))
            if waker_interval_s
            else None
        )
        try:
            yield
        finally:
            stop.set()
            if task is not None:
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(task, timeout=10)

    routes = [
        api("/toolgate/me", _me),
        api("/toolgate/proposals", _list),
        api("/toolgate/proposals/{proposal_id}", _show),
        api("/toolgate/proposals/{proposal_id}/approve", _approve, "POST"),
        api("/toolgate/proposals/{proposal_id}/reject", _reject, "POST"),
        api("/toolgate/proposals/{proposal_id}/edit", _edit, "POST"),
        api("/toolgate/operations/{operation_key}", _operation),
        api("/toolgate/operations/{operation_key}/trace", _trace),
        Route("/console", _console_file("index.html", "text/html; charset=utf-8"), methods=["GET"]),
        Route("/console/", _console_slash, methods=["GET"]),
        # browsers ask for it on their own; answered here so it never reaches the auth middleware
        Route("/favicon.ico", lambda request: Response(status_code=204), methods=["GET"]),
        Route("/console/app.js", _console_file("app.js", "text/javascript; charset=utf-8"), methods=["GET"]),
        Route(
            "/console/console.css", _console_file("console.css", "text/css; charset=utf-8"), methods=["GET"]
        ),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def _configured_waker_interval() -> float | None:
    """``TOOLGATE_WAKER_INTERVAL_S`` (seconds; ``0`` runs no background waker)."""
    seconds = read_settings().waker_interval_s
    return seconds if seconds > 0 else None


app = create_app(waker_interval_s=_configured_waker_interval())
"""What ``langgraph.json`` mounts: the API and console over this server's `server_parts`."""

__all__ = [
    "ASSISTANT_ID",
    "WAKER_INTERVAL_S",
    "app",
    "awaited_operation_keys",
    "create_app",
    "visible",
    "wake_decided_threads",
    "wake_thread",
]
