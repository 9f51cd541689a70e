"""A tiny stdio MCP server for tests/test_shapes_mcp.py and tests/test_mcp_drift.py: one read tool,
one write tool, and one tool no operator policy covers. Every call is appended to the log file
named by argv[1] (the tests' effect counter). It speaks stdio, or streamable HTTP when argv[3]
names a file to write its port to.

A server that changes under the gateway: argv[2], when given, names a JSON file the server reads
on every tools/list and every call (the tests write it between calls), shaped
``{"tools": {name: changes or null}, "page_size": n, "fail": {name: message}}``:

- ``tools``: fields merged over a tool's listed definition (``description``, ``inputSchema``,
  ``annotations``...), or null to stop listing it (it stays callable: only the list changes);
- ``page_size``: list the tools in pages of this many (cursor-paginated);
- ``fail``: the tool still runs (and logs) but answers an error result with this message;
- ``exit_at_start``: the server exits with this status before it answers anything;
- ``exit_in_call``: the tool runs (and logs), then the server exits with this status before it
  answers the call (a server that dies mid-call).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.types import ListToolsRequest, ListToolsResult, Tool, ToolAnnotations

server = FastMCP("weather", log_level="WARNING")


def _changes() -> dict[str, Any]:
    path = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    return json.loads(path.read_text(encoding="utf-8")) if path is not None and path.exists() else {}


def _log(tool: str, arguments: dict[str, object]) -> None:
    with open(sys.argv[1], "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": tool, "args": arguments}) + "\n")
    if _changes().get("exit_in_call"):
        os._exit(int(_changes()["exit_in_call"]))
    failure = _changes().get("fail", {}).get(tool)
    if failure:
        raise ValueError(failure)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def get_forecast(city: str, days: int = 1) -> str:
    """Forecast for one city."""
    _log("get_forecast", {"city": city, "days": days})
    return f"{city}: sunny for {days} day(s)"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def set_alert(city: str, threshold_c: float) -> dict[str, str]:
    """Create a temperature alert for one city."""
    _log("set_alert", {"city": city, "threshold_c": threshold_c})
    return {"alert_id": "A-7", "city": city}


@server.tool()
def purge_alerts() -> str:
    """Delete every alert (no operator reviewed this one)."""
    _log("purge_alerts", {})
    return "purged"


async def _listed(request: ListToolsRequest) -> ListToolsResult:
    """The tools as FastMCP lists them, with the changes file's changes, one page of them."""
    changes = _changes()
    tools = []
    for tool in await server.list_tools():
        change = changes.get("tools", {}).get(tool.name, {})
        if change is not None:
            tools.append(Tool.model_validate({**tool.model_dump(by_alias=True, exclude_none=True), **change}))
    size = int(changes.get("page_size") or len(tools) or 1)
    start = int(request.params.cursor) if request.params and request.params.cursor else 0
    more = start + size < len(tools)
    return ListToolsResult(tools=tools[start : start + size], nextCursor=str(start + size) if more else None)


server._mcp_server.list_tools()(_listed)


def _serve_http(port_file: Path) -> None:
    """Streamable HTTP on a port the OS picks, written to ``port_file`` once the socket listens."""
    import anyio
    import uvicorn

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(64)
    written = port_file.with_suffix(".tmp")
    written.write_text(str(listening.getsockname()[1]), encoding="utf-8")
    written.rename(port_file)  # whole, or not at all
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[listening]))


if __name__ == "__main__":
    if _changes().get("exit_at_start"):
        sys.exit(int(_changes()["exit_at_start"]))
    if len(sys.argv) > 3:  # a port file: serve streamable HTTP instead of stdio
        _serve_http(Path(sys.argv[3]))
    else:
        server.run()
