"""The one bootstrap of a toolgate process: settings in, a verified release and its gateway out.

The CLI, the worker commands and the LangGraph server entry (`toolgate.graph.server`) all call
`open_app`: one store, one release loaded by name (`toolgate.tools.release_loader`), verified
against its reviewed manifest, and one `Gateway` built from them, once per process. `build_graph`
then compiles the graph around that gateway; nothing else wires dependencies.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.graph.state import CompiledStateGraph

from toolgate.canonical import digest
from toolgate.clock import Clock
from toolgate.config import Settings
from toolgate.graph.builder import build_gateway, build_graph
from toolgate.graph.deps import Gateway
from toolgate.models import load_chat_model
from toolgate.policy.rules import PolicyRules
from toolgate.store._sql import SqlStore
from toolgate.store.base import Store
from toolgate.store.factory import open_checkpointer, open_store
from toolgate.tools.manifest import effective_manifest, verify_release
from toolgate.tools.registry import Registry
from toolgate.tools.release import Release, ReleaseEnv
from toolgate.tools.release_loader import load_release

DEFAULT_PINNED = ("offline",)
"""Models a release pins before its manifest is first written (the deterministic demo model)."""


def release_manifest(release: Release, registry: Registry) -> dict[str, Any]:
    """The effective manifest of ``release`` as loaded in this process (``registry``)."""
    reviewed: Mapping[str, Any] = release.manifest or {}
    return effective_manifest(
        release.id,
        list(registry.tools.values()),
        policy_version=release.policy.policy_version,
        policy_sha256=release.policy.sha256,
        instructions=release.instructions,
        pinned_models=list(reviewed.get("pinned_models", DEFAULT_PINNED)),
    )


def verified_release(release: Release, registry: Registry, model: str) -> None:
    """Refuse to start when the bundle drifted from its reviewed manifest or the model is not pinned."""
    verify_release(release.reviewed_manifest(), release_manifest(release, registry), model)


def initialize_store(store: Store, release: Release | None = None) -> None:
    """Create or upgrade the store schema, then the release's own tables (its ``setup``)."""
    store.setup()
    if release is not None and release.setup is not None:
        release.setup(store)


@dataclass
class App:
    """One configured toolgate process: settings, store, release and the gateway built once."""

    settings: Settings
    store: Store
    release: Release
    registry: Registry
    model: BaseChatModel
    gateway: Gateway
    """The node dependencies, shared by every graph and operator command of this process (so its
    executor's circuit breakers are one set)."""

    @property
    def policy(self) -> PolicyRules:
        """The release's rules."""
        return self.release.policy

    @contextmanager
    def graph(self, gateway: Gateway | None = None) -> Iterator[CompiledStateGraph[Any, Any, Any, Any]]:
        """The compiled graph with the configured checkpointer (closed on exit), around this
        process's gateway (or ``gateway``, e.g. one with a scripted model in a test)."""
        with open_checkpointer(self.settings.database_url, self.settings.data_dir) as saver:
            yield build_graph(gateway=gateway or self.gateway, checkpointer=saver)


def open_app(
    settings: Settings | None = None,
    *,
    model: BaseChatModel | None = None,
    read_only: bool = False,
    server_mode: bool = False,
    clock: Clock | None = None,
) -> App:
    """Load and verify the configured release, open the store and build the gateway.

    A bundle whose hashes differ from its reviewed manifest, or an unpinned model, refuses to
    start. ``read_only`` (verification and listing commands) writes nothing at all: no migration,
    no key file, no audit event; the store must already exist at the current schema.
    ``server_mode`` (the LangGraph server) connects nothing now: the store initializes itself,
    and records the release, on first use.
    """
    settings = settings or Settings.from_env()
    key = settings.audit_key(create=not read_only)
    store = open_store(settings.database_url, settings.data_dir, key=key, read_only=read_only)
    release = load_release(settings.release)
    registry = release.registry(ReleaseEnv(store=store, secret=key))
    verified_release(release, registry, settings.model)
    app_model = model or load_chat_model(settings)
    gateway = build_gateway(
        model=app_model,
        registry=registry,
        policy=release.policy,
        store=store,
        instructions=release.instructions,
        server_mode=server_mode,
        clock=clock,
    )
    application = App(
        settings=settings, store=store, release=release, registry=registry, model=app_model, gateway=gateway
    )
    if read_only:
        store.require_schema()
    elif server_mode and isinstance(store, SqlStore):
        store.set_initializer(lambda _: start_store(application))
    else:
        start_store(application)
    return application


def start_store(app: App) -> None:
    """Initialize the store for the release and record the release when it changed."""
    initialize_store(app.store, app.release)
    record_release_change(app)


def record_release_change(app: App) -> None:
    """Audit a release change: the first process to run a different bundle on this store records it."""
    manifest_sha256 = digest(release_manifest(app.release, app.registry))
    last = app.store.latest_audit_event("release.loaded")
    if last is not None and last.detail.get("manifest_sha256") == manifest_sha256:
        return
    app.gateway.auditor.record(
        "release.loaded",
        "loaded",
        detail={
            "manifest_sha256": manifest_sha256,
            "policy_version": app.policy.policy_version,
            "policy_sha256": app.policy.sha256,
            "model": app.settings.model,
            "previous_release": last.tool_release if last else None,
        },
    )


__all__ = [
    "App",
    "initialize_store",
    "open_app",
    "record_release_change",
    "release_manifest",
    "start_store",
    "verified_release",
]
