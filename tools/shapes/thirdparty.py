"""Register teams' own tools: from a Python function plus Pydantic models, or from a JSON Schema
function definition in OpenAI (Chat Completions or Responses) or Anthropic format.

Either way the result is a full `ToolSpec` (owner, risk, approval class, timeout, ...): a schema
alone is never enough to expose a capability.

Handler contract:

- ``spec_from_function``: the function is called with exactly the arguments the call kept, as
  keyword arguments (given ones plus declared non-``None`` defaults of the model), so its own
  Python defaults apply to the rest; ``ctx`` (the `HandlerContext`) when it takes one.
- ``spec_from_tool_definition``: the handler gets ``(args, ctx)`` where ``args`` is a read-only
  mapping (`FrozenArguments`, a ``dict``) of exactly the kept arguments: what the model sent plus
  declared defaults, nothing else (no ``None`` for an omitted property).
- A tool built directly on `ToolSpec` with a Pydantic model gets the model instance; its
  ``model_fields_set`` names the kept fields.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from toolgate.errors import RegistryError
from toolgate.tools.arguments import FrozenArguments, ModelArguments
from toolgate.tools.code_hash import mark_code
from toolgate.tools.declared.checks import UNSUPPORTED, OpenObjects, SchemaRefused
from toolgate.tools.declared.tools import JsonSchemaArguments, declared_model
from toolgate.tools.spec import HandlerContext, ToolSpec

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
"""Parameters of an OpenAI function that declares none (a tool without arguments)."""


def spec_from_function(
    function: Callable[..., Any], *, args_model: type[BaseModel], result_model: type[BaseModel], **spec: Any
) -> ToolSpec:
    """A ToolSpec around a plain function taking the model's fields as keyword arguments.

    The function is called with only the kept arguments (see the module docstring); it may also
    accept ``ctx`` (the `HandlerContext`) to read tenant, user or keys. Registration refuses a
    function that could not be called for every valid call: a field with no parameter, or a
    parameter without default for a field the call may omit.
    """
    spec.setdefault("name", function.__name__)
    _check_signature(function, args_model, str(spec["name"]))
    wants_ctx = "ctx" in inspect.signature(function).parameters

    def handler(args: BaseModel, ctx: HandlerContext) -> Any:
        values = {name: value for name, value in args if name in args.model_fields_set}
        return function(**values, ctx=ctx) if wants_ctx else function(**values)

    handler.__doc__ = function.__doc__
    mark_code(handler, target=function)
    spec.setdefault("description", inspect.getdoc(function) or "")
    return ToolSpec(args_model=args_model, result_model=result_model, handler=handler, **spec)


def _check_signature(function: Callable[..., Any], args_model: type[BaseModel], tool: str) -> None:
    parameters = inspect.signature(function).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    fields = args_model.model_fields
    contract = ModelArguments(args_model)
    present = {name for name, info in fields.items() if (info.alias or name) in contract.always_present}
    problems: list[tuple[str, str]] = []
    for name in fields:
        if name not in parameters and not takes_any:
            problems.append(("invalid_signature", f"{name}: the function has no parameter for this argument"))
    for name, parameter in parameters.items():
        if name == "ctx" or parameter.kind in (
            inspect.Parameter.VAR_KEYWORD,
            inspect.Parameter.VAR_POSITIONAL,
        ):
            continue
        if parameter.default is not inspect.Parameter.empty:
            continue
        if name not in fields:
            problems.append(("invalid_signature", f"{name}: parameter without default is not an argument"))
        elif name not in present:
            problems.append(
                (
                    "invalid_signature",
                    f"{name}: parameter needs a default, since a call may omit this argument",
                )
            )
    if problems:
        raise RegistryError(
            f"tool {tool!r} refused: " + "; ".join(message for _, message in problems),
            tool=tool,
            problems=problems,
        )


def parse_tool_definition(definition: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """Name, description and parameter schema of an OpenAI (Chat Completions or Responses) or
    Anthropic tool definition. An OpenAI function without ``parameters`` takes no arguments."""
    anthropic = "input_schema" in definition
    body = definition if anthropic else definition.get("function", definition)  # Chat Completions nests
    if not isinstance(body, Mapping) or not isinstance(body.get("name"), str):
        text = "a tool definition needs a name (a string) and parameters (OpenAI) or input_schema (Anthropic)"
        raise RegistryError(text, problems=[("invalid_name", text)])
    name, key = body["name"], "input_schema" if anthropic else "parameters"
    parameters = body[key] if anthropic else body.get(key, EMPTY_PARAMETERS)
    if not isinstance(parameters, Mapping):
        text = f"$: {key} must be a JSON object"
        raise RegistryError(f"tool {name!r} refused: {text}", tool=name, problems=[("invalid_schema", text)])
    description = body.get("description")
    if description is not None and not isinstance(description, str):
        text = "description must be a string"
        raise RegistryError(
            f"tool {name!r} refused: {text}", tool=name, problems=[("missing_description", text)]
        )
    return name, description or "", dict(parameters)


def spec_from_tool_definition(
    definition: Mapping[str, Any],
    *,
    handler: Callable[[FrozenArguments, HandlerContext], Any],
    result_model: type[BaseModel],
    open_objects: OpenObjects | None = "refuse",
    open_paths: Iterable[str] = (),
    **spec: Any,
) -> ToolSpec:
    """A ToolSpec whose arguments are the definition's JSON Schema, validated as declared.

    ``open_objects`` is the operator's choice for objects that accept undeclared keys (see
    `toolgate.tools.declared.tools`): ``refuse`` (this strict low-level form's default),
    ``close``, ``allow``, or None: loaded as published, closed at call time at every depth and
    open at ``open_paths`` only (what the importers, `toolgate.tools.shapes.definitions`, do).
    Every registration problem is a `RegistryError` naming the tool and the schema's JSON path.
    """
    name, description, parameters = parse_tool_definition(definition)
    try:
        contract = JsonSchemaArguments(parameters, open_objects=open_objects, open_paths=open_paths)
    except SchemaRefused as exc:
        raise RegistryError(
            f"tool {name!r} refused: {exc}",
            tool=name,
            problems=[(r.code, r.text) for r in exc.refusals],
        ) from None
    spec.setdefault("description", description)
    model = declared_model(_model_name(name), contract)
    return ToolSpec(name=name, args_model=model, result_model=result_model, handler=handler, **spec)


def _model_name(tool: str) -> str:
    words = "".join(ch if ch.isalnum() else " " for ch in tool).split()
    return "".join(word[:1].upper() + word[1:] for word in words) + "Args" if words else "ToolArgs"


__all__ = [
    "EMPTY_PARAMETERS",
    "UNSUPPORTED",
    "parse_tool_definition",
    "spec_from_function",
    "spec_from_tool_definition",
]
