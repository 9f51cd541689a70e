"""Every common tool shape behind the same gate: typed functions (sync and async), LangChain tools,
OpenAI and Anthropic JSON definitions, and the tools of an MCP server.

Why: a team should bring the tool it already has, in the shape it already has, and get the same
dispatch, proposal, approval and exactly-once execution as a hand-written `ToolSpec`. What the
source cannot say (risk, approval class, owner, timeout, scopes, rollback) comes from an explicit
`OperatorPolicy`; only reads get defaults, and a write missing its approval class, effect,
rollback or timeout is refused at load with a `RegistryError` naming the tool.

One entry point per shape, each returning full `ToolSpec` objects for `Registry.of`:

- `from_function`: arguments from the signature, result from the return annotation (or given
  Pydantic models). ``async def`` functions run to completion in the executor's worker thread.
- `from_langchain`: ``@tool`` functions, `StructuredTool`, any `BaseTool`; the schema comes from
  its ``args_schema`` (Pydantic model or JSON Schema dict), the call is ``tool.invoke(args)``.
- `from_openai` / `from_anthropic`: a provider definition plus a function taking its arguments.
- `from_mcp`: every tool of an MCP server (through ``langchain-mcp-adapters``), each with its own
  policy; a tool the operator gave no policy for refuses the whole load.

Schemas go through `spec_from_tool_definition` (declared JSON Schema, kept arguments only).
LangChain and MCP schemas are generated from typed code that ignores extra keys but leaves
``additionalProperties`` unsaid, so their shapes close such objects by default
(``open_objects="close"``); hand-written provider definitions keep the strict default (``refuse``).

Names are passed through exactly as the source spells them.

Results: a handler's output becomes the tool's result model like this: a Pydantic model or a
mapping is taken as is; an MCP tool's structured content is preferred over its text; text
(a string, or text content blocks joined) becomes ``{"result": text}``, unless the result model
has no ``result`` field and the text is a JSON object, which is then taken as is; any other value
becomes ``{"result": value}``. Without a result model a tool answers `TextResult`. A tool's own
error (`ToolException`, an MCP ``isError`` result) is a failed call, never a success-looking text.

Async handlers: the executor calls every handler synchronously in its own worker thread (one per
call), so a coroutine runs there under `asyncio.run`, cancelled at the call's deadline; called
where an event loop already runs, it runs in a helper thread instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import typing
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ValidationError, create_model

from toolgate.errors import RegistryError, ToolExecutionError
from toolgate.tools.arguments import FrozenArguments
from toolgate.tools.declared import OpenObjects
from toolgate.tools.manifest import mark_code
from toolgate.tools.spec import (
    ApprovalClass,
    HandlerContext,
    NoRollback,
    Reconcile,
    ResourceRef,
    Risk,
    Rollback,
    SemanticCheck,
    StrictArgs,
    ToolResult,
    ToolSpec,
)
from toolgate.tools.thirdparty import parse_tool_definition, spec_from_function, spec_from_tool_definition

T = TypeVar("T")

READ_TIMEOUT_S = 10.0
"""Timeout of a read whose policy names none."""
MAX_ERROR_CHARS = 500
"""A tool's own error text is cut to this length before it becomes a failed call's message."""


@dataclass(frozen=True, kw_only=True)
class OperatorPolicy:
    """What the operator decides about one tool, which no tool source can say for itself.

    Only reads get defaults (timeout, effect, rollback, no approval); a write must state its
    approval class, effect, rollback and timeout, or it is refused at load.
    """

    risk: Risk
    """``read-only``, ``caution`` or ``danger``: always stated, never guessed from the source."""
    owner: str
    """Owning team, the one to page when the tool or its downstream breaks."""
    scopes: frozenset[str]
    """Scopes a principal needs to see and call the tool (a plain string is refused)."""
    approval: ApprovalClass | None = None
    """Who approves a write; required for writes, ``none`` for reads."""
    effect: str | None = None
    """The expected effect in plain words, shown to reviewers; required for writes."""
    rollback: Rollback | NoRollback | None = None
    """How to undo a write, or why it cannot be undone; required for writes."""
    timeout_s: float | None = None
    """Hard timeout of one call; required for writes (an overrun leaves a write's outcome unknown)."""
    max_output_bytes: int = 4096
    """Upper bound of the serialized result returned to the model."""
    version: str = "1.0.0"
    """Version of the tool contract."""
    handler_revision: str | None = None
    """Revision proposals are pinned to (default ``<name>/<version>``); bump it when configuration
    the code hash cannot see changes (a server's version, a bound argument)."""
    resource: ResourceRef | None = None
    """The main resource the call names, checked for ownership and ordered on conflict."""
    resources: tuple[ResourceRef, ...] = ()
    """Further resources the call names."""
    audit_fields: frozenset[str] = frozenset()
    """Argument fields copied into audit events as they are (all others only as digests)."""
    semantic_check: SemanticCheck | None = field(default=None, repr=False)
    """Cross-field business validation on validated arguments."""
    reconcile: Reconcile | None = field(default=None, repr=False)
    """Status check of a write whose outcome is unknown (without one it goes to the dead letters)."""
    retry_safe_when_absent: bool = True
    """After a status check finds no effect, may the write be delivered again?"""
    pollable: bool = False
    """A status read the model is told to poll (identical repeats are expected)."""
    exposed_to_roles: frozenset[str] | None = None
    """When set, only principals holding one of these roles see the tool."""
    exposed_to_tenants: frozenset[str] | None = None
    """When set, only these tenants see the tool."""
    secret_arguments: Literal["refuse", "review"] = "refuse"
    """What happens to a call whose arguments hold a secret-looking value (see `ToolSpec`)."""

    def __post_init__(self) -> None:
        if isinstance(self.scopes, str):
            raise TypeError(f"scopes must be a collection of scope names, not the string {self.scopes!r}")
        object.__setattr__(self, "scopes", frozenset(self.scopes))
        object.__setattr__(self, "audit_fields", frozenset(self.audit_fields))

    def spec_fields(self, name: str) -> dict[str, Any]:
        """The `ToolSpec` fields this policy sets for tool ``name``; refuses an incomplete write."""
        if self.risk != "read-only":
            missing = [
                (code, what)
                for code, what, absent in (
                    (
                        "write_without_approval",
                        "an approval class",
                        not self.approval or self.approval.kind == "none",
                    ),
                    ("missing_effect", "an effect", not (self.effect or "").strip()),
                    ("missing_rollback", "a rollback or no-rollback statement", self.rollback is None),
                    ("missing_timeout", "a timeout", self.timeout_s is None),
                )
                if absent
            ]
            if missing:
                raise RegistryError(
                    f"tool {name!r} refused: a write ({self.risk}) needs "
                    + ", ".join(what for _, what in missing)
                    + " in its operator policy",
                    tool=name,
                    problems=[(code, f"{what} is required for a write") for code, what in missing],
                )
        return {
            "version": self.version,
            "owner": self.owner,
            "risk": self.risk,
            "effect": self.effect or "Reads data; changes nothing.",
            "timeout_s": self.timeout_s or READ_TIMEOUT_S,
            "max_output_bytes": self.max_output_bytes,
            "approval": self.approval or ApprovalClass.none(),
            "required_scopes": self.scopes,
            "handler_revision": self.handler_revision or f"{name}/{self.version}",
            "rollback": self.rollback or NoRollback("read-only: nothing to undo"),
            "resource": self.resource,
            "audit_fields": self.audit_fields,
            "semantic_check": self.semantic_check,
            "reconcile": self.reconcile,
            "retry_safe_when_absent": self.retry_safe_when_absent,
            "pollable": self.pollable,
            "exposed_to_roles": self.exposed_to_roles,
            "exposed_to_tenants": self.exposed_to_tenants,
            "secret_arguments": self.secret_arguments,
            **({"resources": self.resources} if self.resources else {}),
        }


class TextResult(ToolResult):
    """The result of a tool that answers text (or whose source declares no result contract)."""

    result: str
    """What the tool answered."""


# ---- typed functions ---------------------------------------------------------------------


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
    unannotated parameters are refused: they would make an open schema.
    """
    tool = name or str(getattr(function, "__name__", ""))
    if not tool:
        raise RegistryError("a tool from a callable without __name__ needs name=...")
    ctx_name = _ctx_parameter(function)
    model = args_model or create_model(
        f"{_camel(tool)}Args", __base__=StrictArgs, **_signature_fields(function, tool, ctx_name)
    )
    wrap = result_model is None and not _returns_model(function)
    result = result_model or _result_model(function, tool)

    def call(ctx: HandlerContext, **values: Any) -> Any:
        output = _invoke(function, values, ctx, ctx_name)
        return {"result": output} if wrap else _result_data(output, result)

    return spec_from_function(
        mark_code(call, target=function),
        args_model=model,
        result_model=result,
        name=tool,
        description=description or inspect.getdoc(getattr(function, "func", function)) or "",
        **policy.spec_fields(tool),
    )


def _hints(function: Callable[..., Any]) -> dict[str, Any]:
    """Resolved annotations of a function, method, `functools.partial` or callable instance."""
    for candidate in (function, getattr(function, "func", None), type(function).__call__):
        try:
            return typing.get_type_hints(candidate, include_extras=True)
        except TypeError:
            continue
    return {}


def _ctx_parameter(function: Callable[..., Any]) -> str | None:
    """The parameter that receives the `HandlerContext`: named ``ctx`` or annotated with it."""
    hints = _hints(function)
    return next(
        (p for p in inspect.signature(function).parameters if p == "ctx" or hints.get(p) is HandlerContext),
        None,
    )


def _signature_fields(function: Callable[..., Any], tool: str, ctx_name: str | None) -> dict[str, Any]:
    """Argument fields from the signature: every annotated keyword parameter but the context."""
    hints = _hints(function)
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
    return _hints(function).get("return", inspect.Signature.empty)


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


# ---- LangChain tools ---------------------------------------------------------------------


def from_langchain(
    tool: BaseTool,
    policy: OperatorPolicy,
    *,
    name: str | None = None,
    description: str | None = None,
    result_model: type[BaseModel] | None = None,
    open_objects: OpenObjects = "close",
) -> ToolSpec:
    """A tool from a LangChain ``@tool`` function, `StructuredTool` or any `BaseTool`.

    Its argument schema (``args_schema``, a Pydantic model or a JSON Schema dict; injected
    arguments excluded) becomes a declared JSON Schema tool like a provider definition. Objects
    that leave ``additionalProperties`` unsaid are closed by default (``open_objects="close"``):
    schemas generated from Pydantic leave it unsaid although the tool ignores extra keys. The
    call is ``tool.invoke`` (``ainvoke`` for a coroutine-only tool) on a copy whose own error
    handling is off: a failure must not come back as a success-looking string.
    """
    target = (tool.func or tool.coroutine) if isinstance(tool, StructuredTool) else tool._run
    return _langchain_spec(
        tool,
        policy,
        name=name,
        description=description,
        result_model=result_model,
        open_objects=open_objects,
        code={"target": target},
    )


def _langchain_spec(
    tool: BaseTool,
    policy: OperatorPolicy,
    *,
    name: str | None,
    description: str | None,
    result_model: type[BaseModel] | None,
    open_objects: OpenObjects,
    code: dict[str, Any],
) -> ToolSpec:
    definition = convert_to_openai_tool(tool)["function"]
    tool_name = name or tool.name
    runnable = tool.model_copy(update={"handle_tool_error": False, "handle_validation_error": False})
    coroutine_only = isinstance(tool, StructuredTool) and tool.func is None
    result = result_model or TextResult

    def handler(args: FrozenArguments, ctx: HandlerContext) -> Any:
        return _result_data(_run_tool(runnable, args.thaw(), ctx, coroutine_only), result)

    return spec_from_tool_definition(
        {"name": tool_name, **{k: v for k, v in definition.items() if k != "name"}},
        handler=mark_code(handler, **code),
        result_model=result,
        open_objects=open_objects,
        **({"description": description} if description else {}),
        **policy.spec_fields(tool_name),
    )


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


# ---- provider JSON definitions -----------------------------------------------------------


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
    ctx_name = _ctx_parameter(function)
    result = result_model or TextResult

    def handler(args: FrozenArguments, ctx: HandlerContext) -> Any:
        return _result_data(_invoke(function, args.thaw(), ctx, ctx_name), result)

    return spec_from_tool_definition(
        definition,
        handler=mark_code(handler, target=function),
        result_model=result,
        open_objects=open_objects,
        **policy.spec_fields(name),
    )


# ---- MCP servers -------------------------------------------------------------------------


def from_mcp(
    connection: Mapping[str, Any],
    policies: Mapping[str, OperatorPolicy],
    *,
    server: str,
    result_models: Mapping[str, type[BaseModel]] | None = None,
    ignore: Collection[str] = (),
    open_objects: OpenObjects = "close",
    load_timeout_s: float = 30.0,
) -> list[ToolSpec]:
    """Every tool an MCP server offers, each behind the policy the operator gave it by name.

    ``connection`` is a ``langchain-mcp-adapters`` connection (``{"transport": "stdio",
    "command": ..., "args": [...]}``, ``streamable_http``, ...). A tool without a policy refuses
    the load, naming it, unless listed in ``ignore`` (reviewed and left out); so does a policy
    for a tool the server does not offer, and a read-only policy for a tool the server itself
    declares writing (``readOnlyHint: false`` or ``destructiveHint: true``).

    Each call opens its own session (for stdio, its own server process): no session outlives
    the worker thread and event loop of the call that made it. The code hash of an MCP tool is
    its server and tool identity (command or URL without credentials, tool name): the code
    itself runs elsewhere, so pin its version with ``handler_revision``.
    """
    try:
        from langchain_mcp_adapters.tools import load_mcp_tools
    except ImportError as exc:  # pragma: no cover - the optional extra is missing
        raise RegistryError("MCP tools need the 'mcp' extra: pip install 'langgraph-toolgate[mcp]'") from exc
    adapter_connection: Any = dict(connection)  # one of the adapters' TypedDicts, checked by them
    tools = run_awaitable(
        lambda: load_mcp_tools(
            None, connection=adapter_connection, server_name=server, handle_tool_errors=False
        ),
        datetime.now(UTC) + timedelta(seconds=load_timeout_s),
    )
    offered = {tool.name: tool for tool in tools}
    unpoliced = sorted(set(offered) - set(policies) - set(ignore))
    if unpoliced:
        raise RegistryError(
            f"MCP server {server!r} offers tools without an operator policy, refused: {', '.join(unpoliced)}",
            tool=unpoliced[0],
            problems=[("missing_policy", f"{name}: no operator policy") for name in unpoliced],
        )
    absent = sorted(set(policies) - set(offered))
    if absent:
        raise RegistryError(
            f"MCP server {server!r} does not offer tools the policy names: {', '.join(absent)}"
        )
    specs = []
    for name, policy in sorted(policies.items()):
        hints = offered[name].metadata or {}
        if policy.risk == "read-only" and (
            hints.get("readOnlyHint") is False or hints.get("destructiveHint") is True
        ):
            raise RegistryError(
                f"tool {name!r} refused: its MCP server declares it writing, its policy says read-only",
                tool=name,
            )
        identity = json.dumps(
            {"mcp": _connection_identity(connection), "server": server, "tool": name}, sort_keys=True
        )
        specs.append(
            _langchain_spec(
                offered[name],
                policy,
                name=None,
                description=None,
                result_model=(result_models or {}).get(name),
                open_objects=open_objects,
                code={"identity": identity},
            )
        )
    return specs


def _connection_identity(connection: Mapping[str, Any]) -> dict[str, Any]:
    """What names an MCP server's code: the command line or the URL, never env, headers or auth."""
    url = connection.get("url")
    if isinstance(url, str):
        parts = urlsplit(url)
        url = f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"
    return {
        "transport": connection.get("transport"),
        "command": connection.get("command"),
        "args": list(connection.get("args") or []),
        "url": url,
    }


# ---- calling and mapping -----------------------------------------------------------------


def run_awaitable(make: Callable[[], Awaitable[T]], deadline: datetime | None) -> T:
    """Run the awaitable ``make()`` to completion from synchronous code, cancelled at ``deadline``.

    The executor's worker thread has no event loop, so this is `asyncio.run` there (a fresh loop
    per call: nothing is shared with another call). Where a loop already runs in this thread,
    it runs in a helper thread instead of failing. Cancellation raises `TimeoutError`, which the
    executor treats exactly like its own timeout (a write's outcome is then unknown).
    """

    async def bounded() -> T:
        if deadline is None:
            return await make()
        async with asyncio.timeout(max((deadline - datetime.now(UTC)).total_seconds(), 0.0)):
            return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(bounded())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolgate-async") as pool:
        return pool.submit(asyncio.run, bounded()).result()


def _invoke(
    function: Callable[..., Any], values: dict[str, Any], ctx: HandlerContext, ctx_name: str | None
) -> Any:
    """``function(**values)`` (plus the context when it asks), awaited when it is asynchronous."""
    arguments = {**values, ctx_name: ctx} if ctx_name else values
    if inspect.iscoroutinefunction(function):
        return run_awaitable(lambda: function(**arguments), ctx.deadline)
    output = function(**arguments)
    return run_awaitable(lambda: output, ctx.deadline) if inspect.isawaitable(output) else output


def _result_data(output: Any, result_model: type[BaseModel]) -> Any:
    """A handler's output in the shape of ``result_model`` (rules in the module docstring)."""
    if isinstance(output, BaseModel | Mapping):
        return output
    if isinstance(output, list) and all(isinstance(b, Mapping) and "type" in b for b in output):
        if any(block["type"] != "text" for block in output):
            raise ToolExecutionError(
                "server_error", "the tool answered non-text content, which toolgate does not relay"
            )
        output = "\n".join(str(block["text"]) for block in output)
    if isinstance(output, str) and "result" not in result_model.model_fields:
        try:
            parsed = json.loads(output)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"result": output}


def _camel(name: str) -> str:
    return "".join(
        part[:1].upper() + part[1:] for part in name.replace(".", "_").replace("-", "_").split("_")
    )


__all__ = [
    "OperatorPolicy",
    "TextResult",
    "from_anthropic",
    "from_function",
    "from_langchain",
    "from_mcp",
    "from_openai",
    "run_awaitable",
]
