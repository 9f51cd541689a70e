"""Typed Python functions, sync and async, behind the gate: schema from the signature, result
from the return annotation, the write proposed, approved and run exactly once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from shapes_harness import READ, WRITE, run_read_then_write

from toolgate.errors import RegistryError
from toolgate.store import Store
from toolgate.tools.shapes.calls import run_awaitable
from toolgate.tools.shapes.functions import from_function
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.spec import HandlerContext


class Weather(BaseModel):
    """Current weather of one city."""

    city: str
    celsius: float


def test_sync_function_runs_through_the_gate(store: Store) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    def get_weather(city: str, units: Literal["c", "f"] = "c") -> Weather:
        """Current weather for one city."""
        calls.append(("get_weather", {"city": city, "units": units}))
        return Weather(city=city, celsius=21.5)

    def create_alert(city: str, threshold_c: float, ctx: HandlerContext) -> str:
        """Alert when a city gets colder than the threshold."""
        calls.append(("create_alert", {"city": city, "threshold_c": threshold_c}))
        assert ctx.tenant_id == "acme" and ctx.idempotency_key
        return f"alert set for {city}"

    specs = [from_function(get_weather, READ), from_function(create_alert, WRITE)]
    assert sorted(specs[0].args_model.model_fields) == ["city", "units"]
    assert specs[0].description == "Current weather for one city."
    flow = run_read_then_write(
        store,
        specs,
        ("get_weather", {"city": "Oslo", "units": "c"}),
        ("create_alert", {"city": "Oslo", "threshold_c": -5.5}),
        write_calls=lambda: sum(name == "create_alert" for name, _ in calls),
    )
    assert calls == [
        ("get_weather", {"city": "Oslo", "units": "c"}),
        ("create_alert", {"city": "Oslo", "threshold_c": -5.5}),
    ]
    assert flow.read["data"] == {"city": "Oslo", "celsius": 21.5}
    assert flow.write["status"] == "completed" and flow.write["data"] == {"result": "alert set for Oslo"}
    assert flow.proposal["risk"] == "caution"


def test_async_function_runs_to_completion_in_the_worker_thread(store: Store) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    async def get_forecast(city: str, days: int = 1) -> list[str]:
        """Forecast for the next days."""
        await asyncio.sleep(0)
        calls.append(("get_forecast", {"city": city, "days": days}))
        return ["sunny"] * days

    async def schedule_alert(city: str, threshold_c: float) -> Weather:
        """Schedule an alert."""
        await asyncio.sleep(0.01)
        calls.append(("schedule_alert", {"city": city, "threshold_c": threshold_c}))
        return Weather(city=city, celsius=threshold_c)

    flow = run_read_then_write(
        store,
        [from_function(get_forecast, READ), from_function(schedule_alert, WRITE)],
        ("get_forecast", {"city": "Bergen", "days": 2}),
        ("schedule_alert", {"city": "Bergen", "threshold_c": 1.5}),
        write_calls=lambda: sum(name == "schedule_alert" for name, _ in calls),
    )
    assert calls == [
        ("get_forecast", {"city": "Bergen", "days": 2}),
        ("schedule_alert", {"city": "Bergen", "threshold_c": 1.5}),
    ]
    assert flow.read["data"] == {"result": ["sunny", "sunny"]}
    assert flow.write["data"] == {"city": "Bergen", "celsius": 1.5}


def test_a_write_without_approval_or_policy_is_refused_at_load() -> None:
    def delete_city(city: str) -> str:
        return city

    incomplete = OperatorPolicy(risk="danger", owner="weather-team", scopes=frozenset({"ops:restart"}))
    with pytest.raises(RegistryError, match="'delete_city' refused: a write") as refused:
        from_function(delete_city, incomplete)
    assert refused.value.tool == "delete_city"
    assert [code for code, _ in refused.value.problems] == [
        "write_without_approval",
        "missing_effect",
        "missing_rollback",
        "missing_timeout",
    ]
    with pytest.raises(TypeError, match="not the string"):
        OperatorPolicy(risk="read-only", owner="o", scopes="ops:read")  # type: ignore[arg-type]


def test_untyped_or_variadic_functions_are_refused() -> None:
    def untyped(city):  # type: ignore[no-untyped-def]
        return city

    def variadic(**kwargs: str) -> str:
        return ""

    with pytest.raises(RegistryError, match="'city' has no type annotation"):
        from_function(untyped, READ)
    with pytest.raises(RegistryError, match="'kwargs' is not a keyword argument"):
        from_function(variadic, READ)


def test_an_async_handler_is_cancelled_at_its_deadline_and_runs_beside_a_running_loop() -> None:
    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    with pytest.raises(TimeoutError):  # the executor reads this exactly like its own timeout
        run_awaitable(slow, datetime.now(UTC) + timedelta(seconds=0.05))

    async def caller() -> int:  # a caller that already runs an event loop in this thread
        async def answer() -> int:
            return 42

        return run_awaitable(answer, None)

    assert asyncio.run(caller()) == 42
