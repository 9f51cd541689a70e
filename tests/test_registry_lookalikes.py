"""What a release may not load however it is written: two tools a model or a reviewer cannot tell
apart, and a declared schema deep or large enough to exhaust the process that walks it. Both are
a `RegistryError` at load naming what to fix, never a crash (issue 27, item 6)."""

from __future__ import annotations

from typing import Any

import pytest

from toolgate.errors import RegistryError
from toolgate.tools import Registry
from toolgate.tools.declared.checks import MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES
from toolgate.tools.shapes.definitions import from_openai
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.spec import ToolSpec
from toolgate.tools.wire import lookalike_key

CYRILLIC_I = "\u0456"
GREEK_OMICRON = "\u03bf"
FULLWIDTH_C = "\uff43"
ZERO_WIDTH_SPACE = "\u200b"
POLICY = OperatorPolicy(risk="read-only", owner="tests", scopes=frozenset({"tickets:read"}))


def tool(name: str, parameters: dict[str, Any] | None = None) -> ToolSpec:
    definition = {
        "type": "function",
        "function": {
            "name": name,
            "description": "Read one ticket by id. Changes nothing.",
            "parameters": parameters
            or {
                "type": "object",
                "properties": {"ticket_id": {"type": "string", "maxLength": 12}},
                "required": ["ticket_id"],
                "additionalProperties": False,
            },
        },
    }
    return from_openai(definition, lambda args, ctx: {"ok": True}, POLICY)


class NoOwners:
    def ownership(self, *args: Any) -> Any:  # never asked: no tool here declares a resource
        raise AssertionError("not reached")


@pytest.mark.parametrize(
    "twin",
    [
        "Close_ticket",
        f"close_t{CYRILLIC_I}cket",
        f"cl{GREEK_OMICRON}se_ticket",
        f"{FULLWIDTH_C}lose_ticket",
        "CLOSE_TICKET",
    ],
)
def test_a_lookalike_beside_a_tool_refuses_the_release_naming_both(twin: str) -> None:
    with pytest.raises(RegistryError, match="look alike") as refused:
        Registry.of("lookalikes/1.0.0", [tool("close_ticket"), tool(twin)], NoOwners())  # type: ignore[arg-type]
    assert refused.value.problems[0][0] == "lookalike_names"
    assert "'close_ticket'" in str(refused.value) and repr(twin) in str(refused.value)


def test_a_name_with_an_invisible_character_never_loads() -> None:
    with pytest.raises(RegistryError, match="control characters"):
        tool(f"close_{ZERO_WIDTH_SPACE}ticket")
    assert lookalike_key(f"close_{ZERO_WIDTH_SPACE}ticket") == "close_ticket"


def test_names_that_only_resemble_each_other_load_side_by_side() -> None:
    names = ["close_ticket", "close_tickets", "mail", "mall", "get_file", "get_file_1", "close-ticket"]
    registry = Registry.of("distinct/1.0.0", [tool(n) for n in names], NoOwners())  # type: ignore[arg-type]
    assert sorted(registry.tools) == sorted(names)


def test_the_fold_is_what_a_reader_sees() -> None:
    assert lookalike_key(f"{FULLWIDTH_C}lose_t{CYRILLIC_I}cket") == "close_ticket"
    assert lookalike_key("Close_Ticket") == lookalike_key("close_ticket")
    assert lookalike_key("mail") != lookalike_key("mall")


def nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "maxLength": 5}
    for _ in range(levels):
        schema = {
            "type": "object",
            "properties": {"a": schema},
            "required": ["a"],
            "additionalProperties": False,
        }
    return schema


@pytest.mark.parametrize("levels", [60, 300, 5000])
def test_a_schema_nested_too_deep_is_a_registry_error_with_its_path(levels: int) -> None:
    with pytest.raises(RegistryError) as refused:
        tool("deep_read", nested(levels))
    [(code, text)] = refused.value.problems
    assert code == "schema_too_deep"
    assert text.startswith("$.properties.a.properties.a") and f"deeper than {MAX_SCHEMA_DEPTH}" in text


def test_a_schema_nested_within_the_bound_loads() -> None:
    assert tool("nested_read", nested(20)).name == "nested_read"


def test_a_schema_too_large_is_a_registry_error() -> None:
    wide = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "maxLength": 5} for i in range(MAX_SCHEMA_NODES + 1)},
        "additionalProperties": False,
    }
    with pytest.raises(RegistryError) as refused:
        tool("wide_read", wide)
    assert refused.value.problems[0][0] == "schema_too_large"


def test_a_schema_that_contains_itself_is_a_registry_error() -> None:
    looped: dict[str, Any] = {"type": "object", "additionalProperties": False}
    looped["properties"] = {"again": looped}
    with pytest.raises(RegistryError) as refused:
        tool("looped_read", looped)
    assert refused.value.problems[0][0] in ("schema_too_deep", "schema_too_large")
