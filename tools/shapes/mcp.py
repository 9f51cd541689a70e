"""Tools of an MCP server (through ``langchain-mcp-adapters``), each behind its own operator policy.

Separate from the LangChain shape it builds on because a server is loaded whole: the operator's
policies are checked against what the server offers (a tool without a policy, or a policy for a
tool that is not there, refuses the load), the server's own hints are checked against the policy's
risk, and the code hash names the server instead of Python code that runs elsewhere. The
adapters are an optional extra, imported only when a server is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel

from toolgate.errors import RegistryError
from toolgate.tools.declared.checks import OpenObjects
from toolgate.tools.shapes.calls import run_awaitable
from toolgate.tools.shapes.langchain import langchain_spec
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.spec import ToolSpec


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
            langchain_spec(
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


__all__ = ["from_mcp"]
