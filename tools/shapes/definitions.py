"""Tools from provider JSON definitions: an OpenAI (Chat Completions or Responses) or Anthropic
tool definition, plus the Python function that implements it.

The definition is the schema, taken as declared (`spec_from_tool_definition`, kept arguments
only); the function is only called. Unlike the generated schemas of LangChain and MCP tools, a
hand-written definition keeps the strict default for objects that accept undeclared keys
(``open_objects="refuse"``): closing or allowing them is the operator's explicit choice.
Calling and result mapping are shared (`toolgate.tools.shapes.calls`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from toolgate.errors import RegistryError
from toolgate.tools.arguments import FrozenArguments
from toolgate.tools.code_hash import mark_code
from toolgate.tools.declared.checks import OpenObjects
from toolgate.tools.shapes.calls import TextResult, ctx_parameter, invoke, result_data
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.shapes.thirdparty import parse_tool_definition, spec_from_tool_definition
from toolgate.tools.spec import HandlerContext, ToolSpec


def from_openai(
    definition: Mapping[str, Any],
    function: Callable[..., Any],
    policy: OperatorPolicy,
    *,
    result_model: type[BaseModel] | None = None,
    open_objects: OpenObjects = "refuse",
) -> ToolSpec:
    """A tool from an OpenAI definition (Chat Completions or Responses) and the function that
    implements it, called with the kept arguments as keywords (``ctx`` too if it asks): what the
    model sent plus declared defaults, so the function's own defaults apply to the rest.
    ``open_objects`` is the operator's choice for objects that accept undeclared keys."""
    if "input_schema" in definition:
        raise RegistryError("an Anthropic definition (input_schema): use from_anthropic")
    return _definition_spec(definition, function, policy, result_model, open_objects)


def from_anthropic(
    definition: Mapping[str, Any],
    function: Callable[..., Any],
    policy: OperatorPolicy,
    *,
    result_model: type[BaseModel] | None = None,
    open_objects: OpenObjects = "refuse",
) -> ToolSpec:
    """A tool from an Anthropic definition (``input_schema``) and the function that implements
    it, called like `from_openai`'s."""
    if "input_schema" not in definition:
        raise RegistryError("an Anthropic definition needs input_schema: use from_openai for OpenAI ones")
    return _definition_spec(definition, function, policy, result_model, open_objects)


def _definition_spec(
    definition: Mapping[str, Any],
    function: Callable[..., Any],
    policy: OperatorPolicy,
    result_model: type[BaseModel] | None,
    open_objects: OpenObjects,
) -> ToolSpec:
    name = parse_tool_definition(definition)[0]
    ctx_name = ctx_parameter(function)
    result = result_model or TextResult

    def handler(args: FrozenArguments, ctx: HandlerContext) -> Any:
        return result_data(invoke(function, args.thaw(), ctx, ctx_name), result)

    return spec_from_tool_definition(
        definition,
        handler=mark_code(handler, target=function),
        result_model=result,
        open_objects=open_objects,
        **policy.spec_fields(name),
    )


__all__ = ["from_anthropic", "from_openai"]
