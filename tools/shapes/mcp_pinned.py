"""MCP tools pinned at load and checked against their server before every call.

Why: an MCP tool's code runs in a server the release does not hold, and that server can change
a tool after it was loaded and reviewed: its schema, its description, its hints, what the model
and the reviewer were told it is. So each tool is pinned at load: SHA-256 over the canonical JSON
of its definition as the server lists it (`tool_pin`: name, description, input schema, output
schema when it has one, annotations). The pin is part of the tool's code identity
(`toolgate.tools.shapes.mcp.from_mcp`), so a release reloaded with a changed tool drifts from its
reviewed manifest and needs a review again.

Before every call, `PinnedTool.call` lists the server's tools again (every page) in the call's
own session (for stdio, its own server process) and recomputes the tool's pin: a tool changed or
gone is refused (`toolgate.errors.ToolDrifted`) without being called. Only then is it called, in
that same session, so the check and the call speak to the same server.

The call and its answer mirror ``langchain-mcp-adapters`` (whose own tools open a session per
call, which the check could not share): structured content when the tool answers some, else its
content as LangChain content blocks (text as text; anything else keeps only its type, which
`toolgate.tools.shapes.calls.result_data` refuses); an ``isError`` result is the tool's own
failure (``server_error`` with its text). The adapters are an optional extra, imported only when
a server is reached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolgate.canonical import digest
from toolgate.errors import ToolDrifted, ToolExecutionError
from toolgate.tools.handler import HandlerContext
from toolgate.tools.shapes.calls import run_awaitable
from toolgate.tools.shapes.langchain import MAX_ERROR_CHARS

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import CallToolResult, ContentBlock
    from mcp.types import Tool as McpTool

MAX_LIST_PAGES = 1000
"""Pages of a server's tool list read at most (the adapters' own bound): a server that pages on
forever fails the load or the call instead of holding it."""
UNREADABLE = "unreadable"
"""The pin found for a listed definition that has no canonical JSON form (never a SHA-256)."""


def pinned_definition(tool: McpTool) -> dict[str, Any]:
    """What a tool's pin covers, as its server lists it: name, description, input schema, output
    schema (only when it has one) and annotations (the hints, without unset ones)."""
    definition: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.inputSchema,
        "annotations": (
            tool.annotations.model_dump(mode="json", exclude_none=True) if tool.annotations else None
        ),
    }
    if tool.outputSchema is not None:
        definition["outputSchema"] = tool.outputSchema
    return definition


def tool_pin(tool: McpTool) -> str:
    """SHA-256 of the canonical JSON of `pinned_definition`.

    Raises:
        ValueError: the definition has no canonical JSON form (a NaN in a schema).
    """
    try:
        return digest(pinned_definition(tool))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"MCP tool {tool.name!r} has a definition without a canonical JSON form") from exc


async def listed_tools(session: ClientSession) -> list[McpTool]:
    """Every tool the server lists, all pages.

    Raises:
        RuntimeError: the server lists more than `MAX_LIST_PAGES` pages.
    """
    from mcp.types import PaginatedRequestParams

    tools: list[McpTool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        if not page.nextCursor:
            return tools
        cursor = page.nextCursor
    raise RuntimeError(f"the MCP server lists more than {MAX_LIST_PAGES} pages of tools")


@dataclass(frozen=True, kw_only=True)
class PinnedTool:
    """One MCP tool as loaded: where its server is, its name and its pin."""

    connection: Mapping[str, Any] = field(repr=False)
    """The ``langchain-mcp-adapters`` connection a call opens its session with (it may hold
    secrets: env, headers, auth)."""
    name: str
    """The tool's name as its server lists it."""
    pin: str
    """`tool_pin` of the tool as listed at load."""

    def check(self, listed: Sequence[McpTool]) -> None:
        """Refuse (`ToolDrifted`) unless the server lists this tool exactly as pinned (every entry
        of that name, should a server list it twice)."""
        same_name = [tool for tool in listed if tool.name == self.name]
        if not same_name:
            raise ToolDrifted(self.name, self.pin, None)
        for tool in same_name:
            try:
                found = tool_pin(tool)
            except ValueError:
                found = UNREADABLE
            if found != self.pin:
                raise ToolDrifted(self.name, self.pin, found)

    def run(self, arguments: dict[str, Any], ctx: HandlerContext) -> Any:
        """`call` from the handler's worker thread, cancelled at the call's deadline."""
        return run_awaitable(lambda: self.call(arguments), ctx.deadline)

    async def call(self, arguments: dict[str, Any]) -> Any:
        """Check the pin, then call the tool with ``arguments``, both in one session; the tool's
        structured content, or its content blocks.

        Raises:
            ToolDrifted: the server lists the tool changed or not at all (it was not called).
            ToolExecutionError: ``server_error`` when the session or the listing failed before the
                call was sent (it was not called), or when the tool answered ``isError``.
        """
        from langchain_mcp_adapters.sessions import create_session

        connection: Any = dict(self.connection)  # one of the adapters' TypedDicts, checked by them
        answer: CallToolResult | None = None
        failure: Exception | None = None
        sent = False  # from here on the tool may have run: failures are the executor's to judge
        try:
            async with create_session(connection) as session:
                await session.initialize()
                try:  # raised outside: the session's exit may swallow it (as the adapters do)
                    self.check(await _listed_before_call(session))
                    sent = True
                    answer = await session.call_tool(self.name, arguments)
                except Exception as exc:
                    failure = exc
        except Exception as exc:
            if sent:
                raise
            # nothing was sent: a failed call, never an unknown outcome (a refusal stays one)
            failure = failure or ToolExecutionError(
                "server_error", f"the MCP session failed before the call ({type(exc).__name__})"
            )
        if failure is not None:
            raise failure
        if answer is None:
            raise RuntimeError("the MCP session ended before the tool answered")
        return call_output(answer)


async def _listed_before_call(session: ClientSession) -> list[McpTool]:
    try:
        return await listed_tools(session)
    except Exception as exc:  # nothing was sent yet
        raise ToolExecutionError(
            "server_error",
            f"the MCP server's tools could not be listed before the call ({type(exc).__name__})",
        ) from exc


def call_output(result: CallToolResult) -> Any:
    """What a tool's answer becomes, as the adapters convert it (see the module docstring)."""
    blocks = [_block(content) for content in result.content]
    if result.isError:
        raise ToolExecutionError("server_error", _error_text(blocks)[:MAX_ERROR_CHARS])
    if isinstance(result.structuredContent, Mapping):
        return dict(result.structuredContent)
    return blocks


def _block(content: ContentBlock) -> dict[str, Any]:
    """A LangChain content block: text (also an embedded text resource) as text, anything else
    by its type alone."""
    text = getattr(content, "text", None)
    if text is None and content.type == "resource":
        text = getattr(getattr(content, "resource", None), "text", None)
    if isinstance(text, str):
        return {"type": "text", "text": text}
    return {"type": content.type}


def _error_text(blocks: Sequence[Mapping[str, Any]]) -> str:
    """An ``isError`` answer's message: its text, else what it held (the adapters' wording)."""
    texts = [str(block["text"]) for block in blocks if block["type"] == "text"]
    if texts:
        return "\n".join(texts)
    if blocks:
        return f"MCP tool returned an error with no text content ({len(blocks)} non-text content block(s))."
    return "MCP tool returned an error with empty content."


__all__ = ["MAX_LIST_PAGES", "PinnedTool", "call_output", "listed_tools", "pinned_definition", "tool_pin"]
