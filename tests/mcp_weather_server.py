"""A tiny stdio MCP server for tests/test_shapes_mcp.py: one read tool, one write tool, and one
tool no operator policy covers. Every call is appended to the log file named by argv[1]."""

from __future__ import annotations

import json
import sys

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

server = FastMCP("weather", log_level="WARNING")


def _log(tool: str, arguments: dict[str, object]) -> None:
    with open(sys.argv[1], "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": tool, "args": arguments}) + "\n")


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


if __name__ == "__main__":
    server.run()
