"""Tools from provider JSON definitions: an OpenAI (Chat Completions or Responses) or Anthropic
tool definition, plus the Python function that implements it.

The definition is the schema, taken as published (`spec_from_tool_definition`, kept arguments
only); the function is only called. A definition loads as it was published: objects that leave
``additionalProperties`` unsaid (or true) load, and calls are closed at every depth instead, open
only at the paths the operator names (``open_paths`` here or in the `OperatorPolicy`); a published
default that fails its own schema is dropped with a load warning. ``open_objects``, the per-tool
switch of before (``refuse``, ``close``, ``allow``), still works and is deprecated: it cannot say
which path is free-form. Calling and result mapping are shared (`toolgate.tools.shapes.calls`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from toolgate.errors import RegistryError
from toolgate.tools.arguments import FrozenArguments
from toolgate.tools.code_hash import mark_code
from toolgate.tools.declared.checks import OpenObjects
from toolgate.tools.shapes.calls import TextResult, ctx_parameter, invoke, result_data
from toolgate.tools.shapes.operator_policy import OperatorPolicy, log_load_warnings, policy_fields
from toolgate.tools.shapes.thirdparty import parse_tool_definition, spec_from_tool_definition
from toolgate.tools.spec import HandlerContext, ToolSpec


def from_openai(
    definition: Mapping[str, Any],
    function: Callable[..., Any],
    policy: OperatorPolicy,
    *,
    result_model: type[BaseModel] | None = None,
    open_paths: Iterable[str] = (),
    identity_exempt: Iterable[str] = (),
    open_objects: OpenObjects | None = None,
) -> ToolSpec:
    """A tool from an OpenAI definition (Chat Completions or Responses) and the function that
    implements it, called with the kept arguments as keywords (``ctx`` too if it asks): what the
    model sent plus declared defaults, so the function's own defaults apply to the rest.
    ``open_paths`` and ``identity_exempt`` add to the policy's own (see the module docstring);
    ``open_objects`` is the deprecated per-tool switch."""
    if "input_schema" in definition:
        raise RegistryError("an Anthropic definition (input_schema): use from_anthropic")
    return _definition_spec(
        definition, function, policy, result_model, open_paths, identity_exempt, open_objects
    )


def from_anthropic(
    definition: Mapping[str, Any],
    function: Callable[..., Any],
    policy: OperatorPolicy,
    *,
    result_model: type[BaseModel] | None = None,
    open_paths: Iterable[str] = (),
    identity_exempt: Iterable[str] = (),
    open_objects: OpenObjects | None = None,
) -> ToolSpec:
    """A tool from an Anthropic definition (``input_schema``) and the function that implements
    it, called like `from_openai`'s, with the same ``open_paths``, ``identity_exempt`` and
    deprecated ``open_objects``."""
    if "input_schema" not in definition:
        raise RegistryError("an Anthropic definition needs input_schema: use from_openai for OpenAI ones")
    return _definition_spec(
        definition, function, policy, result_model, open_paths, identity_exempt, open_objects
    )


def _definition_spec(
    definition: Mapping[str, Any],
    function: Callable[..., Any],
    policy: OperatorPolicy,
    result_model: type[BaseModel] | None,
    open_paths: Iterable[str],
    identity_exempt: Iterable[str],
    open_objects: OpenObjects | None,
) -> ToolSpec:
    name = parse_tool_definition(definition)[0]
    ctx_name = ctx_parameter(function)
    result = result_model or TextResult

    def handler(args: FrozenArguments, ctx: HandlerContext) -> Any:
        return result_data(invoke(function, args.thaw(), ctx, ctx_name), result)

    spec = spec_from_tool_definition(
        definition,
        handler=mark_code(handler, target=function),
        result_model=result,
        **policy_fields(policy, name, open_paths, identity_exempt, open_objects),
    )
    return log_load_warnings(spec)


__all__ = ["from_anthropic", "from_openai"]
