"""Register teams' own tools: from a Python function plus Pydantic models, or from a JSON Schema
function definition in OpenAI or Anthropic format.

Either way the result is a full `ToolSpec` (owner, risk, approval class, timeout, ...): a schema
alone is never enough to expose a capability. JSON Schema definitions are converted to a closed,
strict Pydantic model; anything that cannot be expressed strictly (open objects, ``oneOf``,
conditionals, tuple items, external references) is a registration error naming its path.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from toolgate.errors import RegistryError
from toolgate.tools.spec import HandlerContext, ToolSpec

UNSUPPORTED = (
    "oneOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "patternProperties",
    "dependentRequired",
    "dependentSchemas",
    "prefixItems",
    "unevaluatedProperties",
    "propertyNames",
)
_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


def spec_from_function(
    function: Callable[..., Any], *, args_model: type[BaseModel], result_model: type[BaseModel], **spec: Any
) -> ToolSpec:
    """A ToolSpec around a plain function taking the model's fields as keyword arguments.

    The function may also accept ``ctx`` (the `HandlerContext`) to read tenant, user or keys.
    """
    wants_ctx = "ctx" in inspect.signature(function).parameters

    def handler(args: BaseModel, ctx: HandlerContext) -> Any:
        values = {name: getattr(args, name) for name in type(args).model_fields}
        return function(**values, ctx=ctx) if wants_ctx else function(**values)

    handler.__doc__ = function.__doc__
    spec.setdefault("name", function.__name__)
    spec.setdefault("description", inspect.getdoc(function) or "")
    return ToolSpec(args_model=args_model, result_model=result_model, handler=handler, **spec)


def parse_tool_definition(definition: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """Name, description and parameter schema of an OpenAI (Chat Completions or Responses) or
    Anthropic tool definition."""
    if "input_schema" in definition:  # Anthropic
        return (
            str(definition["name"]),
            str(definition.get("description", "")),
            dict(definition["input_schema"]),
        )
    body = definition.get("function", definition)  # Chat Completions nests under "function"
    if "parameters" not in body or "name" not in body:
        raise RegistryError(
            "a tool definition needs a name and parameters (OpenAI) or input_schema (Anthropic)"
        )
    return str(body["name"]), str(body.get("description", "")), dict(body["parameters"])


def spec_from_tool_definition(
    definition: Mapping[str, Any],
    *,
    handler: Callable[[Any, HandlerContext], Any],
    result_model: type[BaseModel],
    **spec: Any,
) -> ToolSpec:
    """A ToolSpec whose argument model is converted from a provider tool definition."""
    name, description, parameters = parse_tool_definition(definition)
    model = model_from_json_schema(_model_name(name), parameters)
    spec.setdefault("description", description)
    return ToolSpec(name=name, args_model=model, result_model=result_model, handler=handler, **spec)


def model_from_json_schema(name: str, schema: Mapping[str, Any]) -> type[BaseModel]:
    """A closed, strict Pydantic model equivalent to ``schema`` (an object schema)."""
    defs = dict(schema.get("$defs", {}) or schema.get("definitions", {}))
    converter = _Converter(defs)
    annotation = converter.convert(schema, "$", name)
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        raise RegistryError("$: tool parameters must be an object schema")
    return annotation


def _model_name(tool: str) -> str:
    return "".join(part.capitalize() for part in tool.split("_")) + "Args"


class _Converter:
    def __init__(self, defs: Mapping[str, Any]) -> None:
        self.defs = defs
        self.models: dict[str, type[BaseModel]] = {}
        self.resolving: set[str] = set()

    def convert(self, node: Mapping[str, Any], path: str, name: str) -> Any:
        for keyword in UNSUPPORTED:
            if keyword in node:
                raise RegistryError(f"{path}: {keyword!r} cannot be expressed in strict mode")
        if "$ref" in node:
            return self._ref(str(node["$ref"]), path)
        if "anyOf" in node:
            options = [
                self.convert(option, f"{path}.anyOf[{i}]", f"{name}Option{i}")
                for i, option in enumerate(node["anyOf"])
            ]
            return Union[tuple(options)]  # noqa: UP007 - built at run time
        if "enum" in node:
            return self._literal(node["enum"], path)
        if "const" in node:
            return self._literal([node["const"]], path)
        kind = node.get("type")
        if isinstance(kind, list):
            non_null = [k for k in kind if k != "null"]
            if len(non_null) != 1:
                raise RegistryError(f"{path}: a type list must be one type plus 'null'")
            inner = self.convert({**node, "type": non_null[0]}, path, name)
            return inner | None if "null" in kind else inner
        if kind == "object":
            return self._object(node, path, name)
        if kind == "array":
            if "items" not in node or not isinstance(node["items"], Mapping):
                raise RegistryError(f"{path}: an array needs one 'items' schema")
            item = self.convert(node["items"], f"{path}[]", f"{name}Item")
            return list[item]  # type: ignore[valid-type]
        scalar = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}
        if kind in scalar:
            return scalar[kind]
        raise RegistryError(f"{path}: unsupported or missing type {kind!r}")

    def _literal(self, values: list[Any], path: str) -> Any:
        if not values or not all(isinstance(v, str | int | bool) or v is None for v in values):
            raise RegistryError(f"{path}: enum values must be strings, integers, booleans or null")
        return Literal[tuple(values)]

    def _ref(self, ref: str, path: str) -> Any:
        for prefix in ("#/$defs/", "#/definitions/"):
            if ref.startswith(prefix):
                key = ref[len(prefix) :]
                break
        else:
            raise RegistryError(f"{path}: only local $ref to $defs is supported, got {ref!r}")
        if key in self.models:
            return self.models[key]
        if key not in self.defs:
            raise RegistryError(f"{path}: $ref {ref!r} is not defined")
        if key in self.resolving:
            raise RegistryError(f"{path}: recursive $ref {ref!r} cannot be expressed in strict mode")
        self.resolving.add(key)
        model = self.convert(self.defs[key], f"$defs.{key}", key)
        self.resolving.discard(key)
        self.models[key] = model
        return model

    def _object(self, node: Mapping[str, Any], path: str, name: str) -> type[BaseModel]:
        if node.get("additionalProperties", False) is not False:
            raise RegistryError(
                f"{path}: open objects (additionalProperties) cannot be expressed in strict mode"
            )
        required = set(node.get("required", []))
        fields: dict[str, Any] = {}
        for prop, sub in (node.get("properties") or {}).items():
            if not isinstance(sub, Mapping):
                raise RegistryError(f"{path}.{prop}: property schema must be an object")
            annotation = self.convert(sub, f"{path}.{prop}", f"{name}{prop.title().replace('_', '')}")
            constraints = _constraints(sub)
            if prop in required:
                fields[prop] = (annotation, Field(..., description=sub.get("description"), **constraints))
            else:
                fields[prop] = (
                    annotation | None,
                    Field(
                        None,
                        description=sub.get("description"),
                        **constraints,
                    ),
                )
        model: type[BaseModel] = create_model(name, __config__=_STRICT, **fields)
        model.__doc__ = node.get("description") or f"Arguments converted from JSON Schema ({path})."
        return model


def _constraints(node: Mapping[str, Any]) -> dict[str, Any]:
    names = {
        "minimum": "ge",
        "maximum": "le",
        "exclusiveMinimum": "gt",
        "exclusiveMaximum": "lt",
        "minLength": "min_length",
        "maxLength": "max_length",
        "pattern": "pattern",
        "minItems": "min_length",
        "maxItems": "max_length",
        "multipleOf": "multiple_of",
    }
    return {names[k]: v for k, v in node.items() if k in names}


__all__ = [
    "model_from_json_schema",
    "parse_tool_definition",
    "spec_from_function",
    "spec_from_tool_definition",
]
