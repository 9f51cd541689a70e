"""Tools of an MCP server (through ``langchain-mcp-adapters``), each behind its own operator policy.

Separate from the LangChain shape it builds on because a server is loaded whole: the operator's
policies are checked against what the server offers (a tool without a policy, or a policy for a
tool that is not there, refuses the load), the server's own hints are checked against the policy's
risk, and the code hash names the server and each tool's pin instead of Python code that runs
elsewhere (`toolgate.tools.shapes.mcp_pinned` checks that pin before every call). The adapters are
an optional extra, imported only when a server is loaded.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel

from toolgate.errors import RegistryError
from toolgate.tools.declared.checks import OpenObjects
from toolgate.tools.shapes.calls import run_awaitable
from toolgate.tools.shapes.langchain import langchain_spec
from toolgate.tools.shapes.mcp_pinned import PinnedTool, listed_tools, tool_pin
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.spec import ToolSpec


def from_mcp(
    connection: Mapping[str, Any],
    policies: Mapping[str, OperatorPolicy],
    *,
    server: str,
    result_models: Mapping[str, type[BaseModel]] | None = None,
    ignore: Collection[str] = (),
    open_objects: OpenObjects | None = None,
    load_timeout_s: float = 30.0,
) -> list[ToolSpec]:
    """Every tool an MCP server offers, each behind the policy the operator gave it by name.

    ``connection`` is a ``langchain-mcp-adapters`` connection (``{"transport": "stdio",
    "command": ..., "args": [...]}``, ``streamable_http``, ...). A tool without a policy refuses
    the load, naming it, unless listed in ``ignore`` (reviewed and left out); so does a policy
    for a tool the server does not offer, and a read-only policy for a tool the server itself
    declares writing (``readOnlyHint: false`` or ``destructiveHint: true``).

    Each tool is pinned at load (`toolgate.tools.shapes.mcp_pinned.tool_pin`: its name,
    description, schemas and annotations as the server lists them). Each call opens its own
    session (for stdio, its own server process): no session outlives the worker thread and event
    loop of the call that made it. In it the server's tools are listed again first, and a tool
    that no longer matches its pin is refused ``tool_drifted`` without being called, until an
    operator reloads the server's tools and reviews the release again.

    Tools load as published (`from_langchain`): closed at call time at every depth, open at the
    paths of each tool's policy (``OperatorPolicy.open_paths``);
    ``open_objects`` is the deprecated switch for every tool at once (``close`` was the default).

    The code hash of an MCP tool is its server and tool identity (command or URL without
    credentials, tool name) and its pin: the code itself runs elsewhere, so pin its version with
    ``handler_revision``; a tool that changed drifts the release from its reviewed manifest.
    The pin is also part of the handler revision proposals are pinned to (`pinned_revision`).
    """
    try:
        from langchain_mcp_adapters.sessions import create_session
        from langchain_mcp_adapters.tools import convert_mcp_tool_to_langchain_tool
    except ImportError as exc:  # pragma: no cover - the optional extra is missing
        raise RegistryError("MCP tools need the 'mcp' extra: pip install 'langgraph-toolgate[mcp]'") from exc
    adapter_connection: Any = dict(connection)  # one of the adapters' TypedDicts, checked by them

    async def listed() -> list[Any]:
        async with create_session(adapter_connection) as session:
            await session.initialize()
            return await listed_tools(session)

    try:
        definitions = run_awaitable(listed, datetime.now(UTC) + timedelta(seconds=load_timeout_s))
    except RuntimeError as exc:  # a listing without end, or another failure to list
        raise RegistryError(f"MCP server {server!r}: {exc}") from exc
    twice = sorted(name for name, count in Counter(d.name for d in definitions).items() if count > 1)
    if twice:  # which of them would a pin stand for?
        raise RegistryError(
            f"MCP server {server!r} lists tools more than once, refused: {', '.join(twice)}", tool=twice[0]
        )
    tools = [
        convert_mcp_tool_to_langchain_tool(
            None, definition, connection=adapter_connection, server_name=server, handle_tool_errors=False
        )
        for definition in definitions
    ]
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
    listed_as = {definition.name: definition for definition in definitions}
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
        try:
            pin = tool_pin(listed_as[name])
        except ValueError as exc:
            raise RegistryError(f"MCP server {server!r}: {exc}", tool=name) from exc
        identity = json.dumps(
            {"mcp": _connection_identity(connection), "server": server, "tool": name, "pin": pin},
            sort_keys=True,
        )
        pinned = PinnedTool(connection=dict(connection), name=name, pin=pin)
        specs.append(
            langchain_spec(
                offered[name],
                pinned_revision(policy, name, pin),
                name=None,
                description=None,
                result_model=(result_models or {}).get(name),
                open_objects=open_objects,
                code={"identity": identity, "pin": pin},
                call=pinned.run,
            )
        )
    return specs


def pinned_revision(policy: OperatorPolicy, name: str, pin: str) -> OperatorPolicy:
    """``policy`` with the tool's pin in its handler revision (``<revision>+pin.<pin>``).

    Why: a proposal is approved for the handler revision it names, and re-checked against the
    serving tool's at execute. A server may change a tool between two loads (a gateway restarted
    re-pins it: `toolgate mcp serve --upstream` without reviewed pins), and the arguments a
    reviewer approved can mean another effect under the changed tool (a new field whose default
    widens it). With the pin in the revision, a write approved under one definition is refused
    ``approval_invalid`` under any other, never run."""
    revision = policy.handler_revision or f"{name}/{policy.version}"
    return replace(policy, handler_revision=f"{revision}+pin.{pin}")


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


__all__ = ["from_mcp", "pinned_revision"]
