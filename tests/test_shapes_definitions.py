"""OpenAI and Anthropic JSON tool definitions behind the gate, each with the function that
implements it (sync for one, async for the other)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from shapes_harness import READ, WRITE, run_read_then_write

from toolgate.errors import RegistryError
from toolgate.store import Store
from toolgate.tools.shapes.definitions import from_anthropic, from_openai
from toolgate.tools.spec import HandlerContext

FORECAST = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name."},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city"],
}
ALERT = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "threshold_c": {"type": "number"}},
    "required": ["city", "threshold_c"],
    "additionalProperties": False,
}


class Alert(BaseModel):
    """A created alert."""

    alert_id: str
    city: str


def _definitions(provider: str) -> tuple[dict[str, Any], dict[str, Any]]:
    if provider == "openai":  # Chat Completions nests under "function"; Responses does not
        return (
            {
                "type": "function",
                "function": {"name": "forecast", "description": "Forecast.", "parameters": FORECAST},
            },
            {"type": "function", "name": "add_alert", "description": "Add an alert.", "parameters": ALERT},
        )
    return (
        {"name": "forecast", "description": "Forecast.", "input_schema": FORECAST},
        {"name": "add_alert", "description": "Add an alert.", "input_schema": ALERT},
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_provider_definitions_run_through_the_gate(store: Store, provider: str) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    def forecast(**arguments: Any) -> str:
        calls.append(("forecast", arguments))
        return f"{arguments['city']}: sunny"

    async def add_alert(city: str, threshold_c: float, ctx: HandlerContext) -> dict[str, Any]:
        calls.append(("add_alert", {"city": city, "threshold_c": threshold_c}))
        return {"alert_id": ctx.require_idempotency_key()[:8], "city": city}

    shape = from_openai if provider == "openai" else from_anthropic
    read_def, write_def = _definitions(provider)
    specs = [
        shape(read_def, forecast, READ, open_objects="close"),  # FORECAST leaves additionalProperties unsaid
        shape(write_def, add_alert, WRITE, result_model=Alert),
    ]
    flow = run_read_then_write(
        store,
        specs,
        ("forecast", {"city": "Oslo"}),
        ("add_alert", {"city": "Oslo", "threshold_c": 2.5}),
        write_calls=lambda: sum(name == "add_alert" for name, _ in calls),
    )
    # the optional argument the model left out stays out: the implementation applies its default
    assert calls == [("forecast", {"city": "Oslo"}), ("add_alert", {"city": "Oslo", "threshold_c": 2.5})]
    assert flow.read["data"] == {"result": "Oslo: sunny"}
    assert flow.write["data"]["city"] == "Oslo" and len(flow.write["data"]["alert_id"]) == 8


def test_a_definition_in_the_wrong_shape_is_refused() -> None:
    openai_def, _ = _definitions("openai")
    anthropic_def, _ = _definitions("anthropic")
    with pytest.raises(RegistryError, match="use from_openai"):
        from_anthropic(openai_def, lambda **_: "", READ)
    with pytest.raises(RegistryError, match="use from_anthropic"):
        from_openai(anthropic_def, lambda **_: "", READ)
