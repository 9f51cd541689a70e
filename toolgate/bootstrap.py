"""Assemble a toolgate process from settings: store, system of record, release, policy, gateway.

This is the composition used by the CLI and the server entry; `build_graph` remains the one
place where graph dependencies are wired.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.graph.state import CompiledStateGraph

from toolgate.canonical import digest
from toolgate.config import Settings
from toolgate.errors import UnknownReleaseError
from toolgate.graph.builder import build_gateway, build_graph
from toolgate.graph.deps import INSTRUCTIONS, Gateway
from toolgate.models import load_chat_model
from toolgate.policy.rules import PolicyRules
from toolgate.store.base import Store
from toolgate.store.factory import open_checkpointer, open_store
from toolgate.tools.demo import DemoServices, DemoSystem, build_demo_registry, build_wide_registry
from toolgate.tools.manifest import effective_manifest, reviewed_manifest, verify_release
from toolgate.tools.registry import REFUND_RELEASE, WIDE_RELEASE, Registry


def load_registry(release: str, store: Store, *, secret: bytes) -> Registry:
    """The registry of ``release`` on ``store`` (only reviewed, packaged releases exist).

    ``secret`` keys the signatures the release's tools issue (purchase-preview tokens); every
    process serving the release must use the same one (the configured audit key).
    """
    system = DemoSystem(store)
    if release == REFUND_RELEASE:
        return build_demo_registry(system, release)
    if release == WIDE_RELEASE:
        return build_wide_registry(system, DemoServices.on(store, secret=secret), release)
    raise UnknownReleaseError(release)


def release_manifest(registry: Registry, policy: PolicyRules, pinned_models: list[str]) -> dict[str, Any]:
    """The effective manifest of a loaded release (compared with the reviewed one at startup)."""
    return effective_manifest(
        registry.release,
        list(registry.tools.values()),
        policy_version=policy.policy_version,
        policy_sha256=policy.sha256,
        instructions=INSTRUCTIONS,
        pinned_models=pinned_models,
    )


def verified_release(registry: Registry, policy: PolicyRules, model: str) -> None:
    """Refuse to start when the bundle drifted from its reviewed manifest or the model is not pinned."""
    reviewed = reviewed_manifest(registry.release)
    verify_release(release_manifest(registry, policy, list(reviewed.get("pinned_models", []))), model)


def initialize_store(store: Store) -> None:
    """Create or upgrade the store schema and the demo systems of record (all releases)."""
    store.setup()
    DemoSystem(store).setup()
    DemoServices.on(store, secret=b"schema-setup-only").setup()


@dataclass
class App:
    """One configured toolgate: everything but the checkpointer and the compiled graph."""

    settings: Settings
    store: Store
    system: DemoSystem
    registry: Registry
    policy: PolicyRules
    model: BaseChatModel

    @cached_property
    def gateway(self) -> Gateway:
        """Node dependencies, for operator commands that act outside a graph run (one per App, so its
        executor's circuit breakers are shared by everything the process does)."""
        return build_gateway(model=self.model, registry=self.registry, policy=self.policy, store=self.store)

    @contextmanager
    def graph(self) -> Iterator[CompiledStateGraph[Any, Any, Any, Any]]:
        """The compiled graph with the configured checkpointer (closed on exit)."""
        with open_checkpointer(self.settings.database_url, self.settings.data_dir) as saver:
            yield build_graph(
                model=self.model,
                registry=self.registry,
                policy=self.policy,
                store=self.store,
                checkpointer=saver,
            )


def open_app(
    settings: Settings | None = None, *, model: BaseChatModel | None = None, read_only: bool = False
) -> App:
    """Load and verify the configured release, then open the store (running migrations).

    A bundle whose hashes differ from its reviewed manifest, or an unpinned model, refuses to start.
    ``read_only`` (verification and listing commands) writes nothing at all: no migration, no key
    file, no audit event; the store must already exist at the current schema.
    """
    settings = settings or Settings.from_env()
    key = settings.audit_key(create=not read_only)
    store = open_store(settings.database_url, settings.data_dir, key=key, read_only=read_only)
    system = DemoSystem(store)
    registry = load_registry(settings.release, store, secret=key)
    policy = PolicyRules.for_release(settings.release)
    verified_release(registry, policy, settings.model)
    if read_only:
        store.require_schema()
    else:
        initialize_store(store)
    application = App(
        settings=settings,
        store=store,
        system=system,
        registry=registry,
        policy=policy,
        model=model or load_chat_model(settings),
    )
    if not read_only:
        record_release_change(application)
    return application


def record_release_change(app: App) -> None:
    """Audit a release change: the first process to run a different bundle on this store records it."""
    reviewed = reviewed_manifest(app.registry.release)
    manifest_sha256 = digest(
        release_manifest(app.registry, app.policy, list(reviewed.get("pinned_models", [])))
    )
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


__all__ = ["App", "initialize_store", "load_registry", "open_app", "release_manifest", "verified_release"]
