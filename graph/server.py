"""The toolgate of one LangGraph server process, built once and shared by its three entry points.

``langgraph.json`` names three objects the server imports separately: the graph
(`toolgate.graph.app:graph`), the auth handler (`toolgate.graph.auth:auth`) and the HTTP routes
of the approval API and reviewer console (`toolgate.graph.http:app`). All three use the parts
built here, from the same ``TOOLGATE_*`` environment as the CLI: one store (and its secret), one
verified release, one gateway. Nothing connects at import: the store opens and migrates on first
use.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from langchain_core.language_models import BaseChatModel

from toolgate.bootstrap import initialize_store, load_registry, verified_release
from toolgate.config import Settings
from toolgate.graph.builder import build_gateway
from toolgate.graph.deps import Gateway
from toolgate.models import load_chat_model
from toolgate.policy.rules import PolicyRules
from toolgate.store._sql import SqlStore
from toolgate.store.base import Store
from toolgate.store.factory import open_store
from toolgate.tools.registry import Registry


@dataclass(frozen=True)
class ServerParts:
    """What the server's graph, auth handler and routes share."""

    settings: Settings
    store: Store
    registry: Registry
    policy: PolicyRules
    model: BaseChatModel
    gateway: Gateway
    """For the auth handler and the routes (the graph builds its own over the same store)."""


SERVER_DATA_DIR = Path(".toolgate") / "server"
"""Where the server keeps its embedded data unless ``TOOLGATE_DATA_DIR`` says otherwise: apart from
the CLI's ``.toolgate`` so demo runs of one never change the other. Point both at one directory
(or one PostgreSQL database) to let the CLI review the server's proposals."""


@cache
def server_parts() -> ServerParts:
    """The parts of this server process (built on first use, then shared)."""
    settings = Settings.from_env()
    if not os.environ.get("TOOLGATE_DATA_DIR"):
        settings = dataclasses.replace(settings, data_dir=SERVER_DATA_DIR)
    key = settings.audit_key()
    store = open_store(settings.database_url, settings.data_dir, key=key)
    if isinstance(store, SqlStore):
        store.set_initializer(initialize_store)
    registry = load_registry(settings.release, store, secret=key)
    policy = PolicyRules.for_release(settings.release)
    verified_release(registry, policy, settings.model)
    model = load_chat_model(settings)
    gateway = build_gateway(model=model, registry=registry, policy=policy, store=store)
    return ServerParts(
        settings=settings, store=store, registry=registry, policy=policy, model=model, gateway=gateway
    )


__all__ = ["SERVER_DATA_DIR", "ServerParts", "server_parts"]
