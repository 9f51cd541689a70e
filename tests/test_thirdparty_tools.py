"""Teams register their own tools from a function or a provider JSON Schema definition."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from toolgate.errors import RegistryError
from toolgate.tools import ApprovalClass, NoRollback, strict_json_schema
from toolgate.tools.schema.export import strict_problems
from toolgate.tools.shapes.thirdparty import spec_from_function, spec_from_tool_definition
from toolgate.tools.spec import ArgumentsInvalid, HandlerContext

LINE_ITEM = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "pattern": "^SKU-[0-9]+$"},
        "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
    },
    "required": ["sku", "quantity"],
    "additionalProperties": False,
}
PARAMETERS = {
    "type": "object",
    "properties": {
        "vendor_id": {"type": "string", "description": "Vendor id like 'V-100'.", "pattern": "^V-[0-9]{3}$"},
        "line_items": {"type": "array", "items": {"$ref": "#/$defs/LineItem"}, "minItems": 1, "maxItems": 5},
        "currency": {"type": "string", "enum": ["USD", "EUR", "GBP"]},
        "delivery": {
            "type": "object",
            "properties": {
                "express": {"type": "boolean"},
                "note": {"type": ["string", "null"], "maxLength": 80},
            },
            "required": ["express", "note"],
            "additionalProperties": False,
        },
        "discount_code": {"anyOf": [{"type": "string", "maxLength": 12}, {"type": "null"}]},
    },
    "required": ["vendor_id", "line_items", "currency", "delivery", "discount_code"],
    "additionalProperties": False,
    "$defs": {"LineItem": LINE_ITEM},
}
OPENAI = {
    "type": "function",
    "function": {
        "name": "order_supplies",
        "description": "Order supplies from a vendor.",
        "parameters": PARAMETERS,
        "strict": True,
    },
}
ANTHROPIC = {
    "name": "order_supplies",
    "description": "Order supplies from a vendor.",
    "input_schema": PARAMETERS,
}
VALID = {
    "vendor_id": "V-100",
    "line_items": [{"sku": "SKU-7", "quantity": 2}],
    "currency": "USD",
    "delivery": {"express": False, "note": None},
    "discount_code": None,
}


class Ack(BaseModel):
    model_config = ConfigDict(extra="ignore")
    accepted: bool


def _handler(args: Any, ctx: HandlerContext) -> Ack:
    return Ack(accepted=True)


SPEC_FIELDS: dict[str, Any] = dict(
    version="1.0.0",
    owner="procurement",
    risk="caution",
    effect="places a supplier order",
    timeout_s=10,
    max_output_bytes=2048,
    approval=ApprovalClass.role("purchasing_manager"),
    required_scopes=frozenset({"purchasing:write"}),
    handler_revision="order-supplies/1.0.0",
    rollback=NoRollback("supplier orders are cancelled by phone"),
)


@pytest.mark.parametrize("definition", [OPENAI, ANTHROPIC], ids=["openai", "anthropic"])
def test_definition_registers_and_round_trips_to_strict_form(definition: dict[str, Any]) -> None:
    spec = spec_from_tool_definition(definition, handler=_handler, result_model=Ack, **SPEC_FIELDS)
    assert spec.name == "order_supplies" and spec.is_write
    strict = strict_json_schema(spec.args_model)
    assert strict_problems(strict) == []
    assert sorted(strict["required"]) == sorted(PARAMETERS["properties"])
    assert strict["properties"]["currency"]["enum"] == ["USD", "EUR", "GBP"]
    # JSON-Schema tools validate through the spec's seam, never through a converted Pydantic model
    assert spec.parse_arguments(VALID)["line_items"][0]["quantity"] == 2
    again = spec_from_tool_definition(
        {"name": "order_supplies", "description": "Again.", "parameters": strict},
        handler=_handler,
        result_model=Ack,
        **SPEC_FIELDS,
    )
    assert again.parse_arguments(VALID) == spec.parse_arguments(VALID) == VALID


PERTURBED = [
    {**VALID, "extra": 1},
    {k: v for k, v in VALID.items() if k != "currency"},
    {**VALID, "currency": "JPY"},
    {**VALID, "vendor_id": "V-1"},
    {**VALID, "line_items": []},
    {**VALID, "line_items": [{"sku": "SKU-7", "quantity": 0}]},
    {**VALID, "line_items": [{"sku": "SKU-7", "quantity": "2"}]},
    {**VALID, "line_items": [{"sku": "SKU-7", "quantity": 2, "unit_price": 1}]},
    {**VALID, "delivery": {"express": "no", "note": None}},
    {**VALID, "delivery": {"express": False}},
    {**VALID, "delivery": {"express": False, "note": "x" * 81}},
    {**VALID, "discount_code": 5},
    {**VALID, "vendor_id": None},
]


@pytest.mark.parametrize("definition", [OPENAI, ANTHROPIC], ids=["openai", "anthropic"])
@pytest.mark.parametrize("bad", PERTURBED, ids=[f"perturbed_{i}" for i in range(len(PERTURBED))])
def test_perturbed_calls_are_rejected(definition: dict[str, Any], bad: dict[str, Any]) -> None:
    spec = spec_from_tool_definition(definition, handler=_handler, result_model=Ack, **SPEC_FIELDS)
    with pytest.raises(ArgumentsInvalid):
        spec.parse_arguments(bad)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda p: p.update(additionalProperties=True), "open objects"),
        (lambda p: p["properties"].update(x={"oneOf": [{"type": "string"}, {"type": "integer"}]}), "'oneOf'"),
        (
            lambda p: p["properties"].update(x={"type": "array", "prefixItems": [{"type": "string"}]}),
            "'prefixItems'",
        ),
        (
            lambda p: p["properties"].update(x={"$ref": "https://example.com/schema.json"}),
            "only local \\$ref",
        ),
        (lambda p: p["properties"].update(x={"type": ["string", "integer"]}), "one type plus 'null'"),
        (
            lambda p: p["properties"].update(x={"type": "object", "patternProperties": {".*": {}}}),
            "patternProperties",
        ),
    ],
)
def test_what_cannot_be_strict_is_a_registration_error(mutate: Any, message: str) -> None:
    parameters = copy.deepcopy(PARAMETERS)
    mutate(parameters)
    with pytest.raises(RegistryError, match=message):
        spec_from_tool_definition(
            {"name": "order_supplies", "parameters": parameters},
            handler=_handler,
            result_model=Ack,
            **SPEC_FIELDS,
        )


def test_function_registration_needs_a_full_spec() -> None:
    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        city: str

    def weather(city: str, ctx: HandlerContext) -> Ack:
        """Current weather for one city; use get_forecast for later days."""
        assert ctx.tenant_id == "acme"
        return Ack(accepted=city == "Boston")

    fields = {
        **SPEC_FIELDS,
        "risk": "read-only",
        "approval": ApprovalClass.none(),
        "required_scopes": frozenset({"weather:read"}),
        "handler_revision": "weather/1.0.0",
    }
    spec = spec_from_function(weather, args_model=Args, result_model=Ack, **fields)
    assert spec.name == "weather" and spec.description.startswith("Current weather")
    assert spec.handler(Args(city="Boston"), HandlerContext(tenant_id="acme", user_id="u")) == Ack(
        accepted=True
    )
    with pytest.raises(RegistryError, match="write needs an approval class"):
        spec_from_function(weather, args_model=Args, result_model=Ack, **{**fields, "risk": "danger"})
