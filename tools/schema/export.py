"""Export argument models as provider tool schemas, and check them against strict-mode rules.

OpenAI strict form: every object closed (``additionalProperties: false``), every property listed
in ``required``, optional values expressed as nullable, no ``default``, and only the keyword
subset every strict provider accepts. Numeric, length and pattern constraints are not sent as
keywords; they are written into the field's description (the model still reads them) and are
enforced on our side (the Pydantic model or the declared JSON Schema), which remains the authority.
Anthropic form: ``name`` / ``description`` / ``input_schema``, from the same parameters.

Text the model reads is plain text (`toolgate.tools.model_text.plain_text`): every export renders
reStructuredText inline markup in the tool description and in the parameters' descriptions and
titles.

When the strict form is sent (`exported_parameters`): only when it says exactly what the tool
declares, i.e. every property at every depth is required and every object closed. Strict mode
makes the model send every property, an optional one as ``null``, so "omitted" could no longer be
told apart from ``null`` (PATCH-style tools break). A tool with any optional property is therefore
sent its schema as declared with ``strict: false``: the model may omit, and toolgate validates
exactly what was declared. Tools whose arguments are all required keep strict mode.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from toolgate.tools.declared.tools import contract_of
from toolgate.tools.model_text import plain_text, plain_text_schema
from toolgate.tools.wire import wire_schema

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
        if key in ("enum", "const"):  # values, not schemas: sent exactly as declared
            out[key] = copy.deepcopy(value)
            continue
        out[key] = _strictify(value) if key != "properties" else {k: _strictify(v) for k, v in value.items()}
    if constraints:
        text = "Constraints: " + ", ".join(constraints) + "."
        out["description"] = f"{out['description']} {text}" if out.get("description") else text
    if out.get("type") == "object" or "properties" in out:
        props = out.get("properties", {})
        if not isinstance(out.get("type"), list):  # ["object", "null"] stays nullable
            out["type"] = "object"
        out["properties"] = props
        out["required"] = list(props)
        out["additionalProperties"] = False
    return out


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema rewritten to the providers' strict-mode rules.

    For a tool registered from a JSON Schema (`toolgate.tools.declared.tools.DeclaredArguments`) it is
    the parameters the model is sent (`exported_parameters`): the strict form when the declared
    schema has one, else the declared schema itself, so a manifest never hashes a lossy rewrite.
    Descriptions are `plain_text` either way."""
    if contract_of(model) is not None:
        return exported_parameters(model)[0]
    return _strict_form(plain_text_schema(model.model_json_schema()))


def _strict_form(schema: dict[str, Any]) -> dict[str, Any]:
    schema = copy.deepcopy(schema)
    defs = schema.pop("$defs", None)
    strict: dict[str, Any] = _strictify(schema)
    if defs:
        strict["$defs"] = {name: _strictify(body) for name, body in defs.items()}
    return strict


def exported_parameters(model: type[BaseModel]) -> tuple[dict[str, Any], bool]:
    """The parameters a provider is sent for ``model``, and whether they are in strict form.

    Strict form only when every object of the declared schema is closed and requires all its
    properties (see the module docstring); otherwise the declared schema (titles dropped). Its
    descriptions are `plain_text`, rendered before constraints are written into them, so a
    pattern is sent exactly as declared."""
    declared = plain_text_schema(model.model_json_schema())
    if _fully_required(declared):
        strict = _strict_form(declared)
        if not strict_problems(strict):
            return strict, True
    return _untitled(declared), False


def _fully_required(node: Any) -> bool:
    """Every object closed and requiring every property, at every depth (``$defs`` included)."""
    if isinstance(node, list):
        return all(_fully_required(item) for item in node)
    if not isinstance(node, dict):
        return True
    if node.get("type") == "object" or "properties" in node:
        props = node.get("properties", {})
        if node.get("additionalProperties") is not False or not isinstance(props, dict):
            return False
        if set(node.get("required", [])) != set(props):
            return False
    for key, value in node.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            if not all(_fully_required(sub) for sub in value.values()):
                return False
        elif key not in ("enum", "const", "default", "examples", "required") and not _fully_required(value):
            return False
    return True


def _untitled(node: Any) -> Any:
    """``node`` without ``title`` keywords (Pydantic adds one to every model and field)."""
    if isinstance(node, list):
        return [_untitled(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
            out[key] = {name: _untitled(sub) for name, sub in value.items()}
        elif key in ("enum", "const", "default", "examples"):
            out[key] = copy.deepcopy(value)
        else:
            out[key] = _untitled(value)
    return out


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
    """OpenAI function tool (Chat Completions shape, accepted by ``bind_tools``), strict when the
    arguments allow it (`exported_parameters`). ``name`` is what the model calls: pass the
    tool's ``wire_name``. ``description`` is sent as `plain_text`."""
    parameters, strict = exported_parameters(model)
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": plain_text(description),
            "parameters": parameters,
            "strict": strict,
        },
    }


def anthropic_tool(name: str, description: str, model: type[BaseModel]) -> dict[str, Any]:
    """Anthropic tool definition (``input_schema``), the same parameters and description text as
    `openai_tool`, with property keys Anthropic refuses renamed to wire keys (the declared name
    in their description, `toolgate.tools.wire.wire_schema`)."""
    return {
        "name": name,
        "description": plain_text(description),
        "input_schema": wire_schema(exported_parameters(model)[0]),
    }


__all__ = [
    "STRICT_KEYWORDS",
    "anthropic_tool",
    "exported_parameters",
    "openai_tool",
    "strict_json_schema",
    "strict_problems",
]
