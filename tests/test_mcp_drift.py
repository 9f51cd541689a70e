"""MCP tools pinned at load and checked before every call (issue 27, item 4).

A real stdio MCP server (tests/mcp_weather_server.py) whose tool list the test changes between
calls through a JSON file the server reads on every tools/list. The server appends every call it
runs to a log file: the effect counter. A tool that changed or is gone is refused ``tool_drifted``
before it is called (0 effects), audited with both pins, until a reload (which drifts the release
from its reviewed manifest).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import BaseModel
from shapes_harness import READ, RELEASE, WRITE, run_read_then_write
from support import audit_events, principal, start, tool_messages

from toolgate.canonical import digest
from toolgate.errors import ToolDrifted, ToolExecutionError
from toolgate.graph import Context
from toolgate.graph.bootstrap import initialize_store
from toolgate.graph.gateway import Gateway
from toolgate.graph.review.decisions import decide
from toolgate.policy.identities import IdentityDirectory
from toolgate.store import Store
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry, ToolSpec
from toolgate.tools.code_hash import handler_source_hash
from toolgate.tools.demo import REFUND_RELEASE, DemoSystem
from toolgate.tools.demo.identities import seed_demo_identities
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.manifest import effective_manifest, manifest_drift, tool_fingerprint
from toolgate.tools.shapes.functions import from_function
from toolgate.tools.shapes.mcp import from_mcp

SERVER = Path(__file__).with_name("mcp_weather_server.py")
FORECAST = {"tool": "get_forecast", "args": {"city": "Oslo", "days": 3}}
CHANGES: dict[str, dict[str, Any] | None] = {
    "description": {"description": "Forecast for one city; also posts it to a public channel."},
    "input_schema": {
        "inputSchema": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "notify": {"type": "string"},
            },
            "required": ["city"],
        }
    },
    "output_schema": {"outputSchema": {"type": "object", "properties": {"result": {"type": "integer"}}}},
    "annotations": {"annotations": {"readOnlyHint": False, "destructiveHint": True}},
    "removed": None,
}
"""Ways a server changes ``get_forecast`` under the gateway (None: it stops listing it)."""


class Alert(BaseModel):
    """A created alert."""

    alert_id: str
    city: str


class Weather:
    """One server process per call, configured by the test: its call log and its changes file."""

    def __init__(self, tmp_path: Path) -> None:
        self.log = tmp_path / "calls.jsonl"
        self.changes = tmp_path / "changes.json"

    def connection(self) -> dict[str, Any]:
        return {
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(SERVER), str(self.log), str(self.changes)],
        }

    def load(self) -> list[ToolSpec]:
        return from_mcp(
            self.connection(),
            {"get_forecast": READ, "set_alert": WRITE},
            server="weather",
            result_models={"set_alert": Alert},
            ignore={"purge_alerts"},
        )

    def change(self, **changes: Any) -> None:
        self.changes.write_text(json.dumps(changes), encoding="utf-8")

    def calls(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


def _gateway(store: Store, specs: list[ToolSpec]) -> Gateway:
    initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
    return open_test_app(
        release=DEMO_RELEASES[REFUND_RELEASE],
        tools=Registry.of(RELEASE, specs, DemoSystem(store)),
        model=ScriptedChatModel(responses=[]),
        store=store,
        start=False,
    ).gateway


def _by_name(specs: list[ToolSpec]) -> dict[str, ToolSpec]:
    return {spec.name: spec for spec in specs}


def test_an_unchanged_tool_is_checked_across_every_page_and_called(store: Store, tmp_path: Path) -> None:
    weather = Weather(tmp_path)
    weather.change(page_size=1)  # one tool per page: the load and every call read all pages
    specs = weather.load()
    pins = {spec.name: tool_fingerprint(spec)["remote_pin"] for spec in specs}
    assert sorted(pins) == ["get_forecast", "set_alert"] and all(len(p) == 64 for p in pins.values())
    flow = run_read_then_write(
        store,
        specs,
        ("get_forecast", {"city": "Oslo", "days": 3}),
        ("set_alert", {"city": "Oslo", "threshold_c": -4.5}),
        write_calls=lambda: sum(c["tool"] == "set_alert" for c in weather.calls()),
    )
    assert weather.calls() == [FORECAST, {"tool": "set_alert", "args": {"city": "Oslo", "threshold_c": -4.5}}]
    assert flow.read["data"] == {"result": "Oslo: sunny for 3 day(s)"}
    assert flow.write["data"] == {"alert_id": "A-7", "city": "Oslo"}
    assert audit_events(store, "handler.tool_drifted") == []


def test_a_tool_changed_mid_session_is_refused_at_its_next_call_with_no_effect(
    store: Store, tmp_path: Path
) -> None:
    """Through the graph: a read runs, a write waits for approval, the server changes both tools;
    the approved write and the next read are refused ``tool_drifted`` and the server runs neither."""
    weather = Weather(tmp_path)
    specs = weather.load()
    pins = {spec.name: tool_fingerprint(spec)["remote_pin"] for spec in specs}
    initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
    seed_demo_identities(IdentityDirectory(store))
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("get_forecast", {"city": "Oslo", "days": 3}, "call_read")),
            ai("", tool_call("set_alert", {"city": "Oslo", "threshold_c": -4.5}, "call_write")),
            ai("", tool_call("get_forecast", {"city": "Oslo", "days": 2}, "call_read_again")),
            ai("Done."),
        ]
    )
    app = open_test_app(
        release=DEMO_RELEASES[REFUND_RELEASE],
        tools=Registry.of(RELEASE, specs, DemoSystem(store)),
        model=model,
        store=store,
        start=False,
    )
    graph = app.compiled(checkpointer=InMemorySaver())
    paused = start(graph, "Check the weather, set an alert, check again.", "sam", "t-drift")
    proposal = paused["__interrupt__"][0].value["toolgate"]["proposals"][0]
    assert weather.calls() == [FORECAST]
    weather.change(
        tools={
            "get_forecast": CHANGES["description"],
            "set_alert": {"annotations": {"readOnlyHint": False, "destructiveHint": True}},
        }
    )
    decide(app.gateway_with(model), proposal["proposal_id"], principal("omar"), "approve")
    final = graph.invoke(
        Command(resume={"wake": True}), {"configurable": {"thread_id": "t-drift"}}, context=Context()
    )
    model.assert_complete()
    messages = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(final)}
    assert messages["call_read"]["status"] == "completed"
    for call_id in ("call_write", "call_read_again"):
        assert (messages[call_id]["status"], messages[call_id]["error"], messages[call_id]["retryable"]) == (
            "failed",
            "tool_drifted",
            False,
        )
    assert weather.calls() == [FORECAST]  # 0 effects after the change
    [(stored, operation)] = store.proposals.list()
    assert stored.tool == "set_alert" and operation.status == "failed"
    assert operation.error is not None and operation.error["kind"] == "tool_drifted"
    drifted = audit_events(store, "handler.tool_drifted")
    assert [(e.tool, e.code, e.result, e.detail["tool"], e.detail["pinned"]) for e in drifted] == [
        ("set_alert", "tool_drifted", "refused", "set_alert", pins["set_alert"]),
        ("get_forecast", "tool_drifted", "refused", "get_forecast", pins["get_forecast"]),
    ]
    for event in drifted:
        assert len(event.detail["found"]) == 64 and event.detail["found"] != event.detail["pinned"]
    outcomes = {(e.event, e.tool, e.code) for e in store.audit.events()}
    assert ("handler.finished", "set_alert", "tool_drifted") in outcomes
    assert ("call.failed", "get_forecast", "tool_drifted") in outcomes
    assert ("operation.completed", "set_alert", None) not in outcomes


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_any_change_to_a_listed_definition_refuses_the_next_call(
    store: Store, tmp_path: Path, change: str
) -> None:
    weather = Weather(tmp_path)
    forecast = _by_name(weather.load())["get_forecast"]
    gateway = _gateway(store, [forecast])
    assert gateway.executor.run_read(forecast, {"city": "Oslo", "days": 3}, principal("sam")) == {
        "result": "Oslo: sunny for 3 day(s)"
    }
    weather.change(tools={"get_forecast": CHANGES[change]})
    with pytest.raises(ToolDrifted) as refused:
        gateway.executor.run_read(forecast, {"city": "Oslo", "days": 3}, principal("sam"))
    assert (refused.value.kind, refused.value.retryable) == ("tool_drifted", False)
    assert weather.calls() == [FORECAST]  # the refused call never reached the tool
    [event] = audit_events(store, "handler.tool_drifted")
    pinned = tool_fingerprint(forecast)["remote_pin"]
    found = None if change == "removed" else refused.value.found
    assert event.detail == {"tool": "get_forecast", "pinned": pinned, "found": found}
    assert (refused.value.pinned, refused.value.found is None) == (pinned, change == "removed")
    assert (
        "no longer offered" in refused.value.message
        if change == "removed"
        else "changed" in refused.value.message
    )


def test_a_reload_pins_the_changed_tool_and_drifts_the_release(tmp_path: Path) -> None:
    weather = Weather(tmp_path)
    loaded = _by_name(weather.load())
    again = _by_name(weather.load())  # another server process, nothing changed: the same pins
    assert {n: handler_source_hash(s) for n, s in again.items()} == {
        n: handler_source_hash(s) for n, s in loaded.items()
    }

    def manifest(specs: dict[str, ToolSpec]) -> dict[str, Any]:
        return effective_manifest(
            "weather/1.0.0",
            list(specs.values()),
            policy_version="1",
            policy_sha256="0" * 64,
            instructions="",
            pinned_models=["offline"],
        )

    reviewed = manifest(loaded)
    assert manifest(again) == reviewed
    weather.change(tools={"set_alert": {"annotations": {"readOnlyHint": False, "idempotentHint": True}}})
    reloaded = _by_name(weather.load())
    assert handler_source_hash(reloaded["set_alert"]) != handler_source_hash(loaded["set_alert"])
    assert handler_source_hash(reloaded["get_forecast"]) == handler_source_hash(loaded["get_forecast"])
    assert digest(manifest(reloaded)) != digest(reviewed)
    assert manifest_drift(reviewed, manifest(reloaded)) == [
        "tool set_alert: handler_revision drifted",  # the revision proposals are pinned to holds the pin
        "tool set_alert: code_sha256 drifted",
        "tool set_alert: remote_pin drifted",
    ]
    assert weather.calls() == []  # loading lists tools; it calls none


def test_an_error_result_fails_the_call_with_the_tools_own_text(store: Store, tmp_path: Path) -> None:
    weather = Weather(tmp_path)
    forecast = _by_name(weather.load())["get_forecast"]
    gateway = _gateway(store, [forecast])
    weather.change(fail={"get_forecast": "radar offline"})
    with pytest.raises(ToolExecutionError) as failed:
        gateway.executor.run_read(forecast, {"city": "Oslo", "days": 3}, principal("sam"))
    assert failed.value.kind == "server_error" and "radar offline" in failed.value.message
    assert weather.calls() == [FORECAST]  # it ran (the pin matched), and answered an error
    assert audit_events(store, "handler.tool_drifted") == []


def test_a_session_that_fails_before_the_call_fails_the_call_never_leaving_it_unknown(
    store: Store, tmp_path: Path
) -> None:
    """Nothing was sent to the tool, so the call failed (a write would be ``failed``, not
    ``unknown``): the server exits before it answers its session's first request."""
    weather = Weather(tmp_path)
    forecast = _by_name(weather.load())["get_forecast"]
    gateway = _gateway(store, [forecast])
    weather.change(exit_at_start=3)
    with pytest.raises(ToolExecutionError) as failed:
        gateway.executor.run_read(forecast, {"city": "Oslo", "days": 3}, principal("sam"))
    assert (failed.value.kind, failed.value.retryable) == ("server_error", False)
    assert failed.value.message.startswith("the MCP session failed before the call")
    assert weather.calls() == []


@pytest.fixture
def weather_over_http(tmp_path: Path) -> Iterator[tuple[Weather, str]]:
    """The weather server as one long-lived streamable HTTP process (every call a new session
    to it), and its URL; stopped after the test."""
    weather = Weather(tmp_path)
    port_file = tmp_path / "port"
    process = subprocess.Popen(
        [sys.executable, str(SERVER), str(weather.log), str(weather.changes), str(port_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():  # readiness: the server writes its port once it listens
            assert process.poll() is None and time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.05)
        yield weather, f"http://127.0.0.1:{port_file.read_text(encoding='utf-8')}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_streamable_http_server_changing_a_tool_is_refused_too(
    store: Store, weather_over_http: tuple[Weather, str]
) -> None:
    weather, url = weather_over_http
    [forecast] = from_mcp(
        {"transport": "streamable_http", "url": url},
        {"get_forecast": READ},
        server="weather",
        ignore={"set_alert", "purge_alerts"},
    )
    gateway = _gateway(store, [forecast])
    assert gateway.executor.run_read(forecast, {"city": "Oslo", "days": 3}, principal("sam")) == {
        "result": "Oslo: sunny for 3 day(s)"
    }
    weather.change(tools={"get_forecast": CHANGES["input_schema"]})
    with pytest.raises(ToolDrifted):
        gateway.executor.run_read(forecast, {"city": "Oslo", "days": 3}, principal("sam"))
    assert weather.calls() == [FORECAST]
    [event] = audit_events(store, "handler.tool_drifted")
    assert event.detail["pinned"] == tool_fingerprint(forecast)["remote_pin"] != event.detail["found"]


def test_a_drift_refusal_raised_by_other_loaded_code_audits_no_words_of_its_own(
    store: Store, tmp_path: Path
) -> None:
    """Any handler can raise `ToolDrifted`: the audit names the tool by its spec and keeps a pin
    only when it is a SHA-256, so a handler cannot write a secret (or a megabyte) into the trail."""
    secret = "hunter2-password-0123456789"

    def forecast(city: str) -> str:
        """Forecast for one city."""
        raise ToolDrifted(f"other {secret}", secret, "A" * 100_000)

    spec = from_function(forecast, READ)
    gateway = _gateway(store, [spec])
    with pytest.raises(ToolExecutionError) as refused:
        gateway.executor.run_read(spec, {"city": "Oslo"}, principal("sam"))
    assert refused.value.kind == "tool_drifted"
    [event] = audit_events(store, "handler.tool_drifted")
    assert (event.tool, event.detail) == (
        "forecast",
        {"tool": "forecast", "pinned": "not_a_pin", "found": "not_a_pin"},
    )
    assert not any(secret in json.dumps(e.detail) for e in store.audit.events())
