"""The official MCP client against ``toolgate mcp serve`` (a helper module, not a pytest plugin).

`StdioSession` keeps one ``mcp.ClientSession`` over ``stdio_client`` open on its own event-loop
thread, so that a test module shares one server process and its tests stay synchronous; the
HTTP tests open a session per test with `http_session` (a streamable HTTP session is cheap).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

T = TypeVar("T")
CALL_TIMEOUT = timedelta(seconds=120)


def serve_command(*args: str) -> list[str]:
    """``toolgate mcp serve ARGS`` as a command line of this interpreter."""
    return [sys.executable, "-m", "toolgate", "mcp", "serve", *args]


def answer(result: CallToolResult) -> dict[str, Any]:
    """A call's structured answer (checked equal to its text content)."""
    [content] = result.content
    text = json.loads(getattr(content, "text", "null"))
    assert result.structuredContent == text
    return dict(text)


def meta_for(request_id: str) -> dict[str, Any]:
    """The ``_meta`` of a call that names the client's own request id (its retries send it again)."""
    return {"toolgate/request_id": request_id}


class StdioSession:
    """One stdio MCP session to a server process, driven from synchronous tests."""

    def __init__(self, args: list[str], env: Mapping[str, str], cwd: Path) -> None:
        command, *rest = serve_command(*args)
        self.params = StdioServerParameters(command=command, args=rest, env=dict(env), cwd=str(cwd))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._stop: asyncio.Event | None = None
        self._ready: asyncio.Future[ClientSession] | None = None
        self._task: Any = None

    def open(self) -> StdioSession:
        """Start the server and initialize the session (raises what initializing raised)."""

        async def opened() -> ClientSession:
            self._stop = asyncio.Event()
            self._ready = self.loop.create_future()
            self._task = asyncio.ensure_future(self._hold())
            return await self._ready

        self.session = self.run(opened())
        return self

    async def _hold(self) -> None:
        assert self._ready is not None and self._stop is not None
        try:
            async with stdio_client(self.params) as (read, write), ClientSession(read, write) as session:
                await asyncio.wait_for(session.initialize(), 60)
                self._ready.set_result(session)
                await self._stop.wait()
        except BaseException as exc:  # reported to the opener; the session is over
            if not self._ready.done():
                self._ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))

    def run(self, work: Awaitable[T]) -> T:
        """Run ``work`` on the session's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(_awaited(work), self.loop).result(timeout=180)

    def call(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        """One ``tools/call``."""
        return self.run(self.session.call_tool(name, arguments, CALL_TIMEOUT, meta=meta))

    def close(self) -> None:
        """End the session (the server process exits) and the loop."""

        async def closed() -> None:
            if self._stop is not None:
                self._stop.set()
            if self._task is not None:
                await asyncio.wait_for(self._task, 60)

        try:
            self.run(closed())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)
            self.loop.close()


async def _awaited(work: Awaitable[T]) -> T:
    return await work


@asynccontextmanager
async def http_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """An initialized streamable HTTP session to ``url`` (with ``token`` as its bearer, if any)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=300)) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


ProgressSeen = Callable[[float, float | None, str | None], Awaitable[None]]
"""What ``call_tool`` calls with each progress notification."""

__all__ = [
    "CALL_TIMEOUT",
    "ProgressSeen",
    "StdioSession",
    "answer",
    "http_session",
    "meta_for",
    "serve_command",
]
