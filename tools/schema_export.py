"""Export argument models as provider tool schemas, and check them against strict-mode rules.

OpenAI strict form: every object closed (``additionalProperties: false``), every property listed
in ``required``, optional values expressed as nullable, no ``default``, and only the keyword
subset every strict provider accepts. Numeric, length and pattern constraints are not sent as
keywords; they are written into the field's description (the model still reads them) and are
enforced by the Pydantic model on our side, which remains the authority. Anthropic form:
``name`` / ``description`` / ``input_schema``, from the same strict schema.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

STRICT_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "description",
    }
)
"""Keywords kept in the strict form (the strictest common subset of the providers)."""

CONSTRAINT_WORDS = {
    "minimum": "minimum",
    "maximum": "maximum",
    "exclusiveMinimum": "greater than",
    "exclusiveMaximum": "less than",
    "minLength": "min length",
    "maxLength": "max length",
    "minItems": "min items",
    "maxItems": "max items",
    "pattern": "pattern",
    "format": "format",
    "multipleOf": "multiple of",
    "ge": "at least",
    "le": "at most",
    "gt": "after",
    "lt": "before",
    "uniqueItems": "unique items",
}
"""Constraint keywords moved into descriptions, with their words."""

_DROP = ("title", "default", "examples")


def _strictify(node: Any) -> Any:
    if isinstance(node, list):
        return [_strictify(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    constraints: list[str] = []
    for key, value in node.items():
        if key in _DROP:
            continue
        if key in CONSTRAINT_WORDS:
            constraints.append(f"{CONSTRAINT_WORDS[key]} {value}")
            continue
        out[key] = _strictify(value) if key != "properties" else {k: _strictify(v) for k, v in value.items()}
    if constraints:
        text = "Constraints: " + ", ".join(constraints) + "."
        out["description"] = f"{out['description']} {text}" if out.get("description") else text
    if out.get("type") == "object" or "properties" in out:
        props = out.get("properties", {})
        out["type"] = "object"
        out["properties"] = props
        out["required"] = list(props)
        out["additionalProperties"] = False
    return out


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema rewritten to the providers' strict-mode rules."""
    schema = copy.deepcopy(model.model_json_schema())
    defs = schema.pop("$defs", None)
    strict: dict[str, Any] = _strictify(schema)
    if defs:
        strict["$defs"] = {name: _strictify(body) for name, body in defs.items()}
    return strict


def strict_problems(schema: Any, path: str = "$", depth: int = 0) -> list[str]:
    """Every way ``schema`` breaks the strict-mode rules (empty when it complies)."""
    problems: list[str] = []
    if depth > 10:
        return [f"{path}: nested deeper than 10 levels"]
    if isinstance(schema, list):
        for i, item in enumerate(schema):
            problems += strict_problems(item, f"{path}[{i}]", depth + 1)
        return problems
    if not isinstance(schema, dict):
        return problems
    for key in schema:
        if key not in STRICT_KEYWORDS:
            problems.append(f"{path}: unsupported keyword {key!r}")
    if schema.get("type") == "object" or "properties" in schema:
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            problems.append(f"{path}: object is not closed (additionalProperties must be false)")
        if sorted(schema.get("required", [])) != sorted(props):
            problems.append(f"{path}: every property must be required (use null for optional values)")
        for name, sub in props.items():
            problems += strict_problems(sub, f"{path}.{name}", depth + 1)
    for key in ("items", "anyOf", "$defs"):
        if key in schema:
            value = schema[key]
            if key == "$defs":
                for name, sub in value.items():
                    problems += strict_problems(sub, f"{path}.$defs.{name}", depth + 1)
            else:
                problems += strict_problems(value, f"{path}.{key}", depth + 1)
    return problems


def openai_tool(name: str, description: str, model: type[BaseModel]) -> dict[str, Any]:
    """OpenAI function tool in strict form (Chat Completions shape, accepted by ``bind_tools``)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": strict_json_schema(model),
            "strict": True,
        },
    }


def anthropic_tool(name: str, description: str, model: type[BaseModel]) -> dict[str, Any]:
    """Anthropic tool definition (``input_schema``), closed like the strict form."""
    return {"name": name, "description": description, "input_schema": strict_json_schema(model)}


__all__ = ["STRICT_KEYWORDS", "anthropic_tool", "openai_tool", "strict_json_schema", "strict_problems"]
