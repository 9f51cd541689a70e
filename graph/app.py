"""Entry for the LangGraph server (``langgraph.json`` -> ``toolgate.graph.app:graph``).

Compiled without a checkpointer: ``langgraph dev`` and LangGraph Platform bring their own.
Nothing connects at import (only the audit key is read, created once in the data directory):
the store opens its connection, and runs its migrations, on first
use. Configuration comes from the same ``TOOLGATE_*`` environment variables as the CLI.
"""

from __future__ import annotations

from toolgate.bootstrap import initialize_store, load_registry, verified_release
from toolgate.config import Settings
from toolgate.graph.builder import build_graph
from toolgate.models import load_chat_model
from toolgate.policy.rules import PolicyRules
from toolgate.store._sql import SqlStore
from toolgate.store.factory import open_store

_settings = Settings.from_env()
_store = open_store(_settings.database_url, _settings.data_dir, key=_settings.audit_key())
if isinstance(_store, SqlStore):
    _store.set_initializer(initialize_store)

_registry = load_registry(_settings.release, _store, secret=_settings.audit_key())
_policy = PolicyRules.for_release(_settings.release)
verified_release(_registry, _policy, _settings.model)

graph = build_graph(
    model=load_chat_model(_settings),
    registry=_registry,
    policy=_policy,
    store=_store,
    checkpointer=None,
)
"""The gateway graph as served by the LangGraph server."""

__all__ = ["graph"]
