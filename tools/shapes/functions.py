"""Tools from typed Python functions: the signature is the argument schema, the return annotation
the result contract.

This shape alone derives a schema from Python types (the other shapes are handed a declared JSON
Schema), so the signature rules live here: which parameters become arguments, which one receives
the context, and why ``*args``, ``**kwargs`` and unannotated parameters are refused (they would
make an open schema). Calling and result mapping are shared (`toolgate.tools.shapes.calls`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, create_model

from toolgate.errors import RegistryError
from toolgate.tools.code_hash import mark_code
from toolgate.tools.shapes.calls import ctx_parameter, invoke, result_data, type_hints
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.shapes.thirdparty import spec_from_function
from toolgate.tools.spec import HandlerContext, StrictArgs, ToolResult, ToolSpec


def from_function(
    function: Callable[..., Any],
    policy: OperatorPolicy,
    *,
    name: str | None = None,
    description: str | None = None,
    args_model: type[BaseModel] | None = None,
    result_model: type[BaseModel] | None = None,
) -> ToolSpec:
    """A tool from a typed Python function, sync or ``async def``.

    Without ``args_model`` the arguments are the function's annotated parameters (defaults
    kept, closed and strict); a parameter named ``ctx`` or annotated `HandlerContext` receives
    the context instead. Without ``result_model`` the return annotation decides: a Pydantic model
    is the result, any other type ``T`` becomes ``{"result": T}``. ``*args``, ``**kwargs`` and
    unannotated parameters are refused: they would make an open schema. ``async def`` functions
    run to completion in the executor's worker thread.
    """
    tool = name or str(getattr(function, "__name__", ""))
    if not tool:
        raise RegistryError("a tool from a callable without __name__ needs name=...")
    ctx_name = ctx_parameter(function)
    model = args_model or create_model(
        f"{_camel(tool)}Args", __base__=StrictArgs, **_signature_fields(function, tool, ctx_name)
    )
    wrap = result_model is None and not _returns_model(function)
    result = result_model or _result_model(function, tool)

    def call(ctx: HandlerContext, **values: Any) -> Any:
        output = invoke(function, values, ctx, ctx_name)
        return {"result": output} if wrap else result_data(output, result)

    return spec_from_function(
        mark_code(call, target=function),
        args_model=model,
        result_model=result,
        name=tool,
        description=description or inspect.getdoc(getattr(function, "func", function)) or "",
        **policy.spec_fields(tool),
    )


def _signature_fields(function: Callable[..., Any], tool: str, ctx_name: str | None) -> dict[str, Any]:
    """Argument fields from the signature: every annotated keyword parameter but the context."""
    hints = type_hints(function)
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(function).parameters.values():
        annotation = hints.get(parameter.name, parameter.annotation)
        if parameter.name == ctx_name:
            continue
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise RegistryError(
                f"tool {tool!r} refused: parameter {parameter.name!r} is not a keyword argument"
            )
        if annotation is inspect.Parameter.empty:
            raise RegistryError(f"tool {tool!r} refused: parameter {parameter.name!r} has no type annotation")
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (annotation, default)
    return fields


def _return_annotation(function: Callable[..., Any]) -> Any:
    return type_hints(function).get("return", inspect.Signature.empty)


def _returns_model(function: Callable[..., Any]) -> bool:
    annotation = _return_annotation(function)
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _result_model(function: Callable[..., Any], tool: str) -> type[BaseModel]:
    annotation = _return_annotation(function)
    if annotation is inspect.Signature.empty:
        raise RegistryError(f"tool {tool!r} refused: no return annotation; give result_model=...")
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return create_model(f"{_camel(tool)}Result", __base__=ToolResult, result=(annotation, ...))


def _camel(name: str) -> str:
    return "".join(
        part[:1].upper() + part[1:] for part in name.replace(".", "_").replace("-", "_").split("_")
    )


__all__ = ["from_function"]
