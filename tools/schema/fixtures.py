"""A positive and a negative fixture per tool, checked against the tool's real argument contract.

The seeds' schema check (``valid_fixture=PASS unknown_alias=REJECTED``) asks two questions of each
contract: does a known-good call validate, and is a value outside an enumerated or patterned set
refused? The good call is the schema's own example: the model's top-level ``examples`` when it
declares them, else one built from each required field's ``examples``, ``const``, first ``enum``
value or ``default`` (numbers and booleans may use their lower bound); a string field with none of
those cannot be made up, so the fixture is ``MISSING`` rather than guessed. The negative fixture
is the good one with its first enumerated or patterned string replaced by an alias no contract
should know.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal

from toolgate.tools.arguments import ArgumentContract, ArgumentsInvalid
from toolgate.tools.schema.walk import resolve_pointer

UNKNOWN_ALIAS = "zz-unknown-alias"
"""The value put in place of a known one; no enum or sensible pattern accepts it."""

FixtureResult = Literal["PASS", "FAIL", "MISSING"]
AliasResult = Literal["REJECTED", "ACCEPTED", "N/A"]

_NONE = object()


def _value(root: Mapping[str, Any], node: Any) -> Any:
    """An example value for ``node``, or `_NONE` when none can be stated without guessing."""
    if isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
        try:
            node = resolve_pointer(root, node["$ref"])
        except KeyError:
            return _NONE
    if not isinstance(node, Mapping):
        return _NONE
    if isinstance(node.get("examples"), list) and node["examples"]:
        return copy.deepcopy(node["examples"][0])
    for key in ("const", "default"):
        if key in node:
            return copy.deepcopy(node[key])
    if isinstance(node.get("enum"), list) and node["enum"]:
        return copy.deepcopy(node["enum"][0])
    for alternative in node.get("anyOf", ()):
        value = _value(root, alternative)
        if value is not _NONE:
            return value
    kind = node.get("type")
    if kind == "boolean":
        return False
    if kind in ("integer", "number"):
        low = node.get("minimum", node["exclusiveMinimum"] + 1 if "exclusiveMinimum" in node else 0)
        return int(low) if kind == "integer" else low
    if kind == "object" and isinstance(node.get("properties"), Mapping):
        return _object(root, node)
    if kind == "array":
        item = _value(root, node.get("items", {}))
        return _NONE if item is _NONE else [item] * max(1, int(node.get("minItems", 1)))
    return _NONE


def _object(root: Mapping[str, Any], node: Mapping[str, Any]) -> Any:
    built = {}
    for name in node.get("required", ()):
        value = _value(root, node["properties"].get(name, {}))
        if value is _NONE:
            return _NONE
        built[name] = value
    return built


def example_arguments(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """The schema's known-good arguments, or None when they cannot be stated without guessing."""
    examples = schema.get("examples")
    if isinstance(examples, list) and examples and isinstance(examples[0], Mapping):
        return dict(copy.deepcopy(examples[0]))
    built = _object(schema, schema) if isinstance(schema.get("properties"), Mapping) else {}
    return None if built is _NONE else dict(built)


def _alias_field(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """The first top-level string argument restricted by an enum or pattern."""
    for name, node in schema.get("properties", {}).items():
        if name not in arguments or not isinstance(arguments[name], str):
            continue
        if isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
            try:
                node = resolve_pointer(schema, node["$ref"])
            except KeyError:
                continue
        if isinstance(node, Mapping) and ("enum" in node or "pattern" in node):
            return str(name)
    return None


def check_fixtures(contract: ArgumentContract) -> tuple[FixtureResult, AliasResult]:
    """Validate the positive fixture and the unknown-alias fixture through ``contract.parse``."""
    schema = contract.json_schema()
    good = example_arguments(schema)
    if good is None:
        return "MISSING", "N/A"
    try:
        contract.parse(good)
    except ArgumentsInvalid:
        return "FAIL", "N/A"
    field = _alias_field(schema, good)
    if field is None:
        return "PASS", "N/A"
    try:
        contract.parse({**good, field: UNKNOWN_ALIAS})
    except ArgumentsInvalid:
        return "PASS", "REJECTED"
    return "PASS", "ACCEPTED"


__all__ = ["UNKNOWN_ALIAS", "check_fixtures", "example_arguments"]
