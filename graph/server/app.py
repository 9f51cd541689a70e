"""Entry for the LangGraph server (``langgraph.json`` -> ``toolgate.graph.server.app:graph``).

Compiled without a checkpointer: ``langgraph dev`` and LangGraph Platform bring their own. The
graph trusts no client for who is acting: the principal comes from the server's auth handler
(``toolgate.graph.server.auth``), never from ``context`` (the gateway is built in ``server_mode``).
Nothing connects at import (only the store secret is read, created once in the data directory):
the store opens, runs its migrations and records the release on first use. Configuration comes
from the same ``TOOLGATE_*`` environment variables as the CLI. Release control routes each
thread to its release from the store's records (`toolgate.graph.rollout.router`), as in the CLI.
"""

from __future__ import annotations

from toolgate.graph.server.process import server_parts

graph = server_parts().compiled()  # no checkpointer injected: the server brings its own
"""The gateway graph as served by the LangGraph server."""

__all__ = ["graph"]
