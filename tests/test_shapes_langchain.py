"""LangChain tools behind the gate: ``@tool`` functions, `StructuredTool` and a `BaseTool` subclass,
each with its own schema closed and strict, called once through ``invoke`` after approval."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from langchain_core.tools import BaseTool, StructuredTool, ToolException, tool
from pydantic import BaseModel, ConfigDict
from shapes_harness import READ, WRITE, run_read_then_write

from toolgate.errors import ToolExecutionError
from toolgate.store import Store
from toolgate.tools.shapes.langchain import from_langchain
from toolgate.tools.spec import HandlerContext


class AlertArgs(BaseModel):
    """Arguments of an alert."""

    city: str
    threshold_c: float


class Alert(BaseModel):
    """A created alert."""

    model_config = ConfigDict(extra="ignore")
    alert_id: str
    city: str


def test_langchain_at_tool_functions_run_through_the_gate(store: Store) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    @tool
    def lookup_weather(city: str, units: Literal["c", "f"] = "c") -> str:
        """Current weather for one city."""
        calls.append(("lookup_weather", {"city": city, "units": units}))
        return f"{city}: 21 {units}"

    @tool
    def open_alert(city: str, threshold_c: float) -> dict[str, Any]:
        """Open an alert for one city."""
        calls.append(("open_alert", {"city": city, "threshold_c": threshold_c}))
        return {"alert_id": "A-1", "city": city, "internal_note": "dropped by the result contract"}

    specs = [from_langchain(lookup_weather, READ), from_langchain(open_alert, WRITE, result_model=Alert)]
    flow = run_read_then_write(
        store,
        specs,
        ("lookup_weather", {"city": "Oslo", "units": "f"}),
        ("open_alert", {"city": "Oslo", "threshold_c": -2.5}),
        write_calls=lambda: sum(name == "open_alert" for name, _ in calls),
    )
    assert calls == [
        ("lookup_weather", {"city": "Oslo", "units": "f"}),
        ("open_alert", {"city": "Oslo", "threshold_c": -2.5}),
    ]
    assert flow.read["data"] == {"result": "Oslo: 21 f"}
    assert flow.write["status"] == "completed" and flow.write["data"] == {"alert_id": "A-1", "city": "Oslo"}


def test_structured_tool_and_base_tool_run_through_the_gate(store: Store) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    def forecast(city: str, days: int) -> str:
        calls.append(("city_forecast", {"city": city, "days": days}))
        return json.dumps({"ignored": True})  # text: a TextResult answers it as text

    class AlertTool(BaseTool):
        name: str = "raise_alert"
        description: str = "Raise an alert for one city."
        args_schema: type[BaseModel] = AlertArgs

        def _run(self, city: str, threshold_c: float, **_: Any) -> str:
            calls.append(("raise_alert", {"city": city, "threshold_c": threshold_c}))
            return json.dumps({"alert_id": "A-2", "city": city})  # a JSON object: taken as is

    structured = StructuredTool.from_function(forecast, name="city_forecast", description="Forecast.")
    flow = run_read_then_write(
        store,
        [from_langchain(structured, READ), from_langchain(AlertTool(), WRITE, result_model=Alert)],
        ("city_forecast", {"city": "Tromsø", "days": 3}),
        ("raise_alert", {"city": "Tromsø", "threshold_c": -20.0}),
        write_calls=lambda: sum(name == "raise_alert" for name, _ in calls),
    )
    assert calls == [
        ("city_forecast", {"city": "Tromsø", "days": 3}),
        ("raise_alert", {"city": "Tromsø", "threshold_c": -20.0}),
    ]
    assert flow.read["data"] == {"result": '{"ignored": true}'}
    assert flow.write["data"] == {"alert_id": "A-2", "city": "Tromsø"}


def test_a_tool_reporting_failure_is_a_failed_call_not_a_success_text() -> None:
    def flaky(city: str) -> str:
        raise ToolException("upstream weather service is down")

    # the tool's own handling would turn the failure into a normal-looking answer
    forgiving = StructuredTool.from_function(flaky, description="Always fails.", handle_tool_error=True)
    assert forgiving.invoke({"city": "Oslo"}) == "upstream weather service is down"
    spec = from_langchain(forgiving, READ)
    args = spec.handler_arguments(spec.parse_arguments({"city": "Oslo"}))
    with pytest.raises(ToolExecutionError, match="upstream weather service is down"):
        spec.handler(args, HandlerContext(tenant_id="acme", user_id="sam"))
    assert spec.args_model.model_config.get("extra") == "forbid"
