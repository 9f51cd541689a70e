"""What the LangGraph runtime itself refuses an authenticated caller, on the audit trail.

The auth handler (`toolgate.graph.server.auth`) audits every refusal it makes (403, with a code).
Most of what it decides, though, it decides as a *filter* it hands the runtime (the caller's own
threads, or their tenant's for reviewers), and the runtime answers a thread or run the filter
does not reach with 404, a create naming someone else's thread with 409, a body it cannot read
with 422: refusals toolgate's code never sees. Someone walking other people's thread ids got
nothing back, and nothing was recorded either.

`RuntimeRefusals` is an ASGI middleware on this server's app (``langgraph.json``: ``"http":
{"middleware_order": "auth_first"}``, so it runs inside the runtime's authentication and sees the
caller it established). After the runtime answers an authenticated caller with a client error
other than 401 and 403 (sign-in and the handler's own refusals, audited where they are made), it
audits ``access.refused`` with the caller, a stable code and the request's method, path and
status. A 404 cannot say whether the thread is someone else's or does not exist (the runtime does
not tell, and the answer must not either): the code says both. Requests with no authenticated
caller (the server's own loopback, toolgate's ``/toolgate`` routes, which audit their own
refusals as ``api.refused``) pass untouched.

The event is written before the answer's first byte leaves (a caller that heard the refusal
finds it on the record). Nothing here changes an answer: a failure to write the event is logged,
never raised into the runtime's response.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

AUDITED_ELSEWHERE = frozenset({401, 403})
"""Refusals audited where they are made: a failed sign-in (`IdentityDirectory`) and the auth
handler's own (`toolgate.graph.server.auth._refuse`)."""



def refusal_code(status: int) -> str:
    """The stable code ``access.refused`` carries for the runtime's ``status``."""
    if status == 404:
        code = "not_found_or_hidden"
    elif status == 409:
        code = "conflict"
    elif status == 422:
        code = "invalid_request"
    else:
        code = "request_refused"
    return code


class RuntimeRefusals:
    """ASGI middleware auditing the runtime's client errors to authenticated callers (see the module)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = int(message["status"])
                if 400 <= status < 500 and status not in AUDITED_ELSEWHERE:
                    caller = _caller(scope.get("user"))
                    if caller is not None:  # on the record before the caller hears it
                        await _audit(caller, scope, status)
            await send(message)

        await self.app(scope, receive, watched)


def _caller(user: Any) -> str | None:
    """The authenticated caller's user id, as the runtime's authentication set it (None: nobody)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    try:
        identity = user.identity
    except Exception:  # an unauthenticated placeholder without one
        return None
    return identity if isinstance(identity, str) and identity else None


async def _audit(user_id: str, scope: Scope, status: int) -> None:
    from toolgate.graph.server.process import server_parts  # the server's parts only when serving

    detail = {"method": str(scope.get("method", "")), "path": str(scope.get("path", ""))[:512], "status": status}
    try:
        auditor = server_parts().gateway.auditor
        await asyncio.to_thread(
            auditor.record, "access.refused", "refused", user_id=user_id, code=refusal_code(status), detail=detail
        )
    except Exception:  # the answer went out already; the failure must be seen, not raised
        logger.exception("could not audit the runtime's %s to %s %s", status, detail["method"], detail["path"])


__all__ = ["AUDITED_ELSEWHERE", "RuntimeRefusals", "refusal_code"]
