"""An MCP server's tools behind the gate: loaded over stdio from a local FastMCP server (a
subprocess the MCP client starts), each wrapped with the operator policy named for it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from shapes_harness import READ, WRITE, run_read_then_write

from toolgate.errors import RegistryError
from toolgate.store import Store
from toolgate.tools.code_hash import handler_source_hash
from toolgate.tools.shapes.mcp import from_mcp

SERVER = Path(__file__).with_name("mcp_weather_server.py")


class Alert(BaseModel):
    """A created alert."""

    alert_id: str
    city: str


def _connection(log: Path) -> dict[str, Any]:
    return {"transport": "stdio", "command": sys.executable, "args": [str(SERVER), str(log)]}


def _calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_mcp_tools_run_through_the_gate(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    specs = from_mcp(
        _connection(log),
        {"get_forecast": READ, "set_alert": WRITE},
        server="weather",
        result_models={"set_alert": Alert},
        ignore={"purge_alerts"},
    )
    assert [s.name for s in specs] == ["get_forecast", "set_alert"]
    assert _calls(log) == []  # loading lists tools; it calls none
    flow = run_read_then_write(
        store,
        specs,
        ("get_forecast", {"city": "Oslo", "days": 3}),
        ("set_alert", {"city": "Oslo", "threshold_c": -4.5}),
        write_calls=lambda: sum(c["tool"] == "set_alert" for c in _calls(log)),
    )
    assert _calls(log) == [
        {"tool": "get_forecast", "args": {"city": "Oslo", "days": 3}},
        {"tool": "set_alert", "args": {"city": "Oslo", "threshold_c": -4.5}},
    ]
    assert flow.read["data"] == {"result": "Oslo: sunny for 3 day(s)"}
    assert flow.write["status"] == "completed" and flow.write["data"] == {"alert_id": "A-7", "city": "Oslo"}


def test_an_mcp_tool_without_a_policy_is_refused_at_load(tmp_path: Path) -> None:
    connection = _connection(tmp_path / "calls.jsonl")
    with pytest.raises(RegistryError, match="without an operator policy, refused: purge_alerts") as refused:
        from_mcp(connection, {"get_forecast": READ, "set_alert": WRITE}, server="weather")
    assert refused.value.tool == "purge_alerts"
    with pytest.raises(RegistryError, match="does not offer tools the policy names: get_radar"):
        from_mcp(
            connection,
            {"get_radar": READ},
            server="weather",
            ignore={"get_forecast", "set_alert", "purge_alerts"},
        )
    with pytest.raises(RegistryError, match="'set_alert' refused: its MCP server declares it writing"):
        from_mcp(connection, {"set_alert": READ}, server="weather", ignore={"get_forecast", "purge_alerts"})
    assert _calls(tmp_path / "calls.jsonl") == []


def test_mcp_code_hashes_name_server_and_tool_never_the_environment(tmp_path: Path) -> None:
    connection = {**_connection(tmp_path / "calls.jsonl"), "env": {"WEATHER_TOKEN": "s3cr3t"}}
    specs = from_mcp(
        connection, {"get_forecast": READ, "set_alert": WRITE}, server="weather", ignore={"purge_alerts"}
    )
    hashes = {s.name: handler_source_hash(s) for s in specs}
    assert hashes["get_forecast"] != hashes["set_alert"]
    without_env = from_mcp(
        _connection(tmp_path / "calls.jsonl"),
        {"get_forecast": READ},
        server="weather",
        ignore={"set_alert", "purge_alerts"},
    )
    assert handler_source_hash(without_env[0]) == hashes["get_forecast"]
