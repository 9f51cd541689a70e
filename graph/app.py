"""Entry for the LangGraph server (``langgraph.json`` -> ``toolgate.graph.app:graph``).

Compiled without a checkpointer: ``langgraph dev`` and LangGraph Platform bring their own. The
graph trusts no client for who is acting: the principal comes from the server's auth handler
(``toolgate.graph.auth``), never from ``context`` (``server_mode``). Nothing connects at import
(only the store secret is read, created once in the data directory): the store opens, and runs
its migrations, on first use. Configuration comes from the same ``TOOLGATE_*`` environment
variables as the CLI.
"""

from __future__ import annotations

from toolgate.graph.builder import build_graph
from toolgate.graph.server import server_parts

_parts = server_parts()

graph = build_graph(
    model=_parts.model,
    registry=_parts.registry,
    policy=_parts.policy,
    store=_parts.store,
    checkpointer=None,
    server_mode=True,
)
"""The gateway graph as served by the LangGraph server."""

__all__ = ["graph"]
