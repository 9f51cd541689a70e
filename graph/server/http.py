"""The approval API and the reviewer console, served by the LangGraph server beside the graph.

``langgraph.json`` mounts `app` (``"http": {"app": "toolgate.graph.server.http:app"}``); the server
merges these routes with its own and runs this app's lifespan. Every ``/toolgate/...`` route
authenticates its caller by bearer token (`IdentityDirectory.authenticate_bearer`) and answers
only about proposals of the caller's tenant that the caller may review (a role of the tool's
approval class) or requested. Anything else answers 404 exactly like an unknown id (no oracle),
and is audited as ``api.refused``. A request refused for load answers ``503`` with ``Retry-After``
(`toolgate.graph.server.serving`). Decisions go through `decide` and `edit_proposal`, the same
code as the CLI, so this door adds no authority of its own.

This module only assembles the app: the routes (read views in `toolgate.graph.server.reads`,
deciding views in `toolgate.graph.server.decisions`, both answered by
`toolgate.graph.server.serving`), the console's static files, and the lifespan that runs the
background waker (`toolgate.graph.worker.waker`), which wakes threads whose approval was decided
elsewhere (the CLI, another server).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from toolgate.graph.gateway import Gateway
from toolgate.graph.server.decisions import approve, edit, reject
from toolgate.graph.server.reads import list_proposals, me, show_operation, show_proposal, show_trace
from toolgate.graph.server.runtime_refusals import RuntimeRefusals
from toolgate.graph.server.serving import View, serve
from toolgate.graph.worker.waker import WAKER_INTERVAL_S, run_waker, wake_quietly
from toolgate.graph.worker.waker import langgraph_client as loopback_client
from toolgate.settings import read_settings

CONSOLE_DIR = Path(__file__).resolve().parent / "console"
"""The console's static files (package data of ``toolgate.graph``)."""

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


def _server_gateway() -> Gateway:
    """The gateway of this server process (`server_parts`, built on first use)."""
    from toolgate.graph.server.process import server_parts  # the server's parts only when serving

    return server_parts().gateway


def _server_reviewing_gateway(release_id: str) -> Gateway | None:
    """The server's gateway of ``release_id`` while release control serves that release."""
    from toolgate.graph.server.process import server_parts

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
    langgraph_client: Callable[[], Any] = loopback_client,
    wake: Callable[[str], Awaitable[bool]] = wake_quietly,
) -> Starlette:
    """The approval API and console over the gateway ``gateway()`` returns (called per request;
    it must be cheap after the first call). ``reviewing(release_id)`` gives the gateway of another
    release release control serves (decisions on its proposals use its rules), or None.
    ``waker_interval_s=None`` runs no background waker; ``wake`` wakes the thread a decision
    changed (default: a run on this LangGraph server)."""

    def api(path: str, name: str, view: View, method: str = "GET") -> BaseRoute:
        async def endpoint(request: Request) -> Response:
            return await serve(request, gateway, view, body=method == "POST", reviewing=reviewing, wake=wake)

        return Route(path, endpoint, methods=[method], name=name)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stop = asyncio.Event()
        task = (
            asyncio.create_task(run_waker(gateway, langgraph_client, waker_interval_s, stop))
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
        api("/toolgate/me", "me", me),
        api("/toolgate/proposals", "list", list_proposals),
        api("/toolgate/proposals/{proposal_id}", "show", show_proposal),
        api("/toolgate/proposals/{proposal_id}/approve", "approve", approve, "POST"),
        api("/toolgate/proposals/{proposal_id}/reject", "reject", reject, "POST"),
        api("/toolgate/proposals/{proposal_id}/edit", "edit", edit, "POST"),
        api("/toolgate/operations/{operation_key}", "operation", show_operation),
        api("/toolgate/operations/{operation_key}/trace", "trace", show_trace),
        Route("/console", _console_file("index.html", "text/html; charset=utf-8"), methods=["GET"]),
        Route("/console/", _console_slash, methods=["GET"]),
        # browsers ask for it on their own; answered here so it never reaches the auth middleware
        Route("/favicon.ico", lambda request: Response(status_code=204), methods=["GET"]),
        Route("/console/app.js", _console_file("app.js", "text/javascript; charset=utf-8"), methods=["GET"]),
        Route(
            "/console/console.css", _console_file("console.css", "text/css; charset=utf-8"), methods=["GET"]
        ),
    ]
    # with langgraph.json's middleware_order auth_first, the runtime runs this inside its own
    # authentication, around its routes too: what it refuses a caller is audited
    return Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(RuntimeRefusals)])


def _configured_waker_interval() -> float | None:
    """``TOOLGATE_WAKER_INTERVAL_S`` (seconds; ``0`` runs no background waker)."""
    seconds = read_settings().waker_interval_s
    return seconds if seconds > 0 else None


app = create_app(waker_interval_s=_configured_waker_interval())
"""What ``langgraph.json`` mounts: the API and console over this server's `server_parts`."""

__all__ = ["app", "create_app"]
