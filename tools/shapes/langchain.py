"""Tools from LangChain: ``@tool`` functions, `StructuredTool` and any `BaseTool`.

A LangChain tool already carries a schema and its own error handling, so this shape is about
disarming the latter: the call runs on a copy whose ``handle_tool_error`` is off, and a
`ToolException` becomes a failed call instead of a success-looking string. MCP tools arrive as
LangChain tools too (`toolgate.tools.shapes.mcp` builds on `langchain_spec`), which is why the
content-and-artifact answer of an MCP tool is read here.

Its schema is generated from typed code that ignores extra keys but leaves
``additionalProperties`` unsaid, so objects are closed by default (``open_objects="close"``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ValidationError

from toolgate.errors import RegistryError, ToolExecutionError
from toolgate.tools.arguments import FrozenArguments
from toolgate.tools.code_hash import mark_code
from toolgate.tools.declared.checks import OpenObjects
from toolgate.tools.shapes.calls import TextResult, result_data, run_awaitable
from toolgate.tools.shapes.operator_policy import OperatorPolicy, log_load_warnings, policy_fields
from toolgate.tools.shapes.thirdparty import spec_from_tool_definition
from toolgate.tools.spec import HandlerContext, ToolSpec

MAX_ERROR_CHARS = 500
"""A tool's own error text is cut to this length before it becomes a failed call's message."""


def from_langchain(
    tool: BaseTool,
    policy: OperatorPolicy,
    *,
    name: str | None = None,
    description: str | None = None,
    result_model: type[BaseModel] | None = None,
    open_paths: Iterable[str] = (),
    identity_exempt: Iterable[str] = (),
    open_objects: OpenObjects | None = None,
) -> ToolSpec:
    """A tool from a LangChain ``@tool`` function, `StructuredTool` or any `BaseTool`.

    Its argument schema (``args_schema``, a Pydantic model or a JSON Schema dict; injected
    arguments excluded) becomes a declared JSON Schema tool like a provider definition, loaded as
    published: closed at call time at every depth (schemas generated from Pydantic leave
    ``additionalProperties`` unsaid although the tool ignores extra keys), open only at
    ``open_paths`` (added to the policy's), with ``identity_exempt`` added to the policy's;
    ``open_objects`` is the deprecated per-tool switch (``close`` was this importer's default). The
    call is ``tool.invoke`` (``ainvoke`` for a coroutine-only tool) on a copy whose own error
    handling is off: a failure must not come back as a success-looking string.
    """
    target = (tool.func or tool.coroutine) if isinstance(tool, StructuredTool) else tool._run
    return langchain_spec(
        tool,
        policy,
        name=name,
        description=description,
        result_model=result_model,
        open_objects=open_objects,
        code={"target": target},
        open_paths=open_paths,
        identity_exempt=identity_exempt,
    )


def langchain_spec(
    tool: BaseTool,
    policy: OperatorPolicy,
    *,
    name: str | None,
    description: str | None,
    result_model: type[BaseModel] | None,
    open_objects: OpenObjects | None,
    code: dict[str, Any],
    call: Callable[[dict[str, Any], HandlerContext], Any] | None = None,
    open_paths: Iterable[str] = (),
    identity_exempt: Iterable[str] = (),
) -> ToolSpec:
    """The `ToolSpec` of a LangChain tool whose code hash is ``code`` (`mark_code`'s ``target``
    or ``identity``): `from_langchain` names the Python it wraps, `from_mcp` its server.

    ``call`` runs the tool for the (thawed) arguments instead of the LangChain tool itself:
    `from_mcp` checks the tool's pin and calls it in one session of its own."""
    tool_name = name or tool.name
    _refuse_aliases(tool, tool_name)
    definition = convert_to_openai_tool(tool)["function"]
    if isinstance(tool.args_schema, dict):  # an MCP tool's own JSON Schema, kept as declared
        definition["parameters"] = copy.deepcopy(
            tool.args_schema
        )  # (LangChain inlines $ref, cutting recursion)
    runnable = tool.model_copy(update={"handle_tool_error": False, "handle_validation_error": False})
    coroutine_only = isinstance(tool, StructuredTool) and tool.func is None
    result = result_model or TextResult

    def run(arguments: dict[str, Any], ctx: HandlerContext) -> Any:
        return _run_tool(runnable, arguments, ctx, coroutine_only)

    run_tool = call or run

    def handler(args: FrozenArguments, ctx: HandlerContext) -> Any:
        return result_data(run_tool(args.thaw(), ctx), result)

    fields = policy_fields(policy, tool_name, open_paths, identity_exempt, open_objects)
    if description:
        fields["description"] = description
    spec = spec_from_tool_definition(
        {"name": tool_name, **{k: v for k, v in definition.items() if k != "name"}},
        handler=mark_code(handler, **code),
        result_model=result,
        **fields,
    )
    return log_load_warnings(spec)


def _refuse_aliases(tool: BaseTool, name: str) -> None:
    """LangChain describes a Pydantic ``args_schema`` by field names but validates by alias, so a
    field aliased (``from_`` as ``from``) without ``populate_by_name`` could never be called."""
    schema = tool.args_schema
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return
    config = schema.model_config
    if config.get("populate_by_name") or config.get("validate_by_name"):
        return
    aliased = [f for f, info in schema.model_fields.items() if info.alias is not None and info.alias != f]
    if aliased:
        text = (
            f"$.properties: fields {aliased} have aliases LangChain would not accept by the names it "
            "sends the model; set populate_by_name=True on the args_schema or drop the aliases"
        )
        raise RegistryError(f"tool {name!r} refused: {text}", tool=name, problems=[("invalid_schema", text)])


def _run_tool(tool: BaseTool, arguments: dict[str, Any], ctx: HandlerContext, coroutine_only: bool) -> Any:
    """``tool``'s output for ``arguments``; content-and-artifact tools answer their artifact's
    structured content when they have one (MCP), else their content."""
    call: Any = arguments
    if tool.response_format == "content_and_artifact":
        call = {"name": tool.name, "args": arguments, "id": "toolgate", "type": "tool_call"}
    try:
        output = (
            run_awaitable(lambda: tool.ainvoke(call), ctx.deadline) if coroutine_only else tool.invoke(call)
        )
    except ToolException as exc:  # the tool reports its own failure
        raise ToolExecutionError("server_error", str(exc)[:MAX_ERROR_CHARS]) from exc
    except ValidationError as exc:  # refused before it ran: nothing happened
        raise ToolExecutionError(
            "server_error", f"the tool refused arguments the gate accepted ({exc.error_count()} problem(s))"
        ) from exc
    if tool.response_format != "content_and_artifact":
        return output
    artifact = output.artifact
    if isinstance(artifact, Mapping) and isinstance(artifact.get("structured_content"), Mapping):
        return dict(artifact["structured_content"])
    return output.content


__all__ = ["from_langchain", "langchain_spec"]
