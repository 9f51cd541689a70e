"""The one bootstrap of a toolgate process: settings in, a verified release and its gateway out.

The CLI, the worker commands and the LangGraph server entry (`toolgate.graph.server.process`) all call
`open_app`: one store, one release loaded by name (`toolgate.releases.loader`), verified
against its reviewed manifest, and one `Gateway` built from them, once per process. `build_graph`
then compiles the graph around that gateway; nothing else wires dependencies.

Release control (`toolgate.releases.control`) may have moved the configured release on: the
store's pointer names the release to serve (after a promotion or a rollback), and a rollout in
progress serves a candidate too. `Gateways` builds and verifies every such release once per
process, and the `ReleaseRouter` picks one per thread from the store's records.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.graph.state import CompiledStateGraph

from toolgate.canonical import digest
from toolgate.clock import Clock
from toolgate.config import Settings
from toolgate.graph.builder import build_gateway, build_graph
from toolgate.graph.gateway import Gateway
from toolgate.graph.rollout.loaded import record_release_loaded
from toolgate.graph.rollout.manifest import DEFAULT_PINNED, release_manifest, verified_release
from toolgate.graph.rollout.router import ReleaseRouter
from toolgate.models.selection import load_chat_model
from toolgate.policy.rules import PolicyRules
from toolgate.releases.bundle import Release, ReleaseEnv
from toolgate.releases.loader import load_release
from toolgate.releases.rules import canary_specs
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.factory import open_checkpointer, open_store
from toolgate.store.rollout import RolloutStore
from toolgate.tools.registry import Registry


def initialize_store(store: Store, release: Release | None = None) -> None:
    """Create or upgrade the store schema, then the release's own tables (its ``setup``)."""
    store.setup()
    RolloutStore(store).setup()
    if release is not None and release.setup is not None:
        release.setup(store)


def served_release(store: Store, configured: str, *, audit: bool) -> str:
    """The release to serve for ``configured``: the store's pointer once release control moved it
    (a promotion or a rollback), else ``configured``. A pointer that does not verify is never
    followed (``audit``: the refusal is recorded)."""
    rollouts = RolloutStore(store)
    if not rollouts.installed():
        return configured
    state = rollouts.state(configured)
    if state.tampered:
        if audit:
            Auditor(store, configured).record(
                "release.refused",
                "refused",
                code="release_state_tampered",
                detail={"records": state.tampered},
            )
        return configured
    return state.pointer.active if state.pointer else configured


class Gateways:
    """Every release this process may serve, each loaded, verified against its reviewed manifest
    and built into a `Gateway` once (the router asks per node run; thread-safe)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        key: bytes,
        model: BaseChatModel,
        primary: Gateway,
        *,
        primary_ref: str | None = None,
        server_mode: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.settings, self.store, self.key, self.model = settings, store, key, model
        self.server_mode, self.clock, self.primary = server_mode, clock, primary
        self._built: dict[tuple[str, bool], Gateway] = {(primary.registry.release, False): primary}
        if primary_ref:  # the reference it was loaded by (an id, or a module or file path)
            self._built[(primary_ref, False)] = primary
        self._lock = threading.Lock()

    def __call__(self, release: str, canary: bool = False) -> Gateway:
        """The gateway of ``release`` (an id or a reference `load_release` accepts; ``canary``:
        without the tools a canary may not hold)."""
        with self._lock:
            found = self._built.get((release, canary))
            if found is None:
                found = self._build(release, canary)
                self._built[(release, canary)] = found
            return found

    def verify(self, release_id: str) -> str:
        """Load ``release_id`` afresh, verify it against its reviewed manifest and the configured
        model (`RegistryError` otherwise) and return the digest of its effective manifest."""
        release = load_release(release_id)
        registry = release.registry(ReleaseEnv(store=self.store, secret=self.key))
        verified_release(release, registry, self.settings.model)
        return digest(release_manifest(release, registry))

    def _build(self, release_id: str, canary: bool) -> Gateway:
        release = load_release(release_id)
        registry = release.registry(ReleaseEnv(store=self.store, secret=self.key))
        verified_release(release, registry, self.settings.model)
        if canary:
            registry = registry.narrowed(canary_specs(registry.tools.values()))
        return build_gateway(
            model=self.model,
            registry=registry,
            policy=release.policy,
            store=self.store,
            instructions=release.instructions,
            breakers=self.primary.executor.breakers,
            server_mode=self.server_mode,
            clock=self.clock,
            tool_choice=release.tool_choice,
        )


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
    gateways: Gateways | None = field(default=None, repr=False)
    """Every release this process may serve (release control), built on first use."""
    router: ReleaseRouter | None = field(default=None, repr=False)
    """Picks the release of each thread from the store's release-control records."""

    @property
    def policy(self) -> PolicyRules:
        """The release's rules."""
        return self.release.policy

    @contextmanager
    def graph(self, gateway: Gateway | None = None) -> Iterator[CompiledStateGraph[Any, Any, Any, Any]]:
        """The compiled graph with the configured checkpointer (closed on exit), around this
        process's gateways and router (or only ``gateway``, e.g. one with a scripted model in a test)."""
        router = self.router if gateway is None else None
        with open_checkpointer(self.settings.database_url, self.settings.data_dir) as saver:
            yield build_graph(gateway=gateway or self.gateway, checkpointer=saver, router=router)

    def close(self) -> None:
        """Give back what the app holds open (the store's connections); an operator command's
        app is closed when the command ends, so a process running many commands holds none."""
        self.store.close()

    def gateway_for_proposal(self, proposal_id: str) -> Gateway:
        """The gateway of the release a proposal was made under, when release control knows that
        release (a candidate's proposal is reviewed under the candidate's rules); else this
        process's gateway, which refuses another release's proposal (``wrong_release``) as before."""
        proposal = self.store.proposals.get(proposal_id)
        if proposal is None or self.router is None or proposal.release == self.gateway.registry.release:
            return self.gateway
        return self.router.reviewing_gateway(proposal.release, proposal.thread_id) or self.gateway

    def executor_gateway(self, operation_key: str) -> Gateway:
        """The gateway whose executor delivers ``operation_key`` now: its proposal's release while
        release control serves that release, else the active one (which refuses a proposal pinned
        to another release)."""
        op = self.store.operations.get(operation_key)
        proposal = self.store.proposals.get(op.proposal_id) if op and op.proposal_id else None
        if proposal is None or self.router is None:
            return self.gateway
        return self.router.executing_gateway(proposal.release, proposal.thread_id)


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
    verified_release(release, registry, settings.model)  # before the store is touched
    served = settings.release if server_mode else served_release(store, settings.release, audit=not read_only)
    if served != settings.release:  # release control moved on (a promotion): serve that bundle
        release = load_release(served)
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
        tool_choice=release.tool_choice,
    )
    gateways = Gateways(
        settings, store, key, app_model, gateway, primary_ref=served, server_mode=server_mode, clock=clock
    )
    router = ReleaseRouter(store=store, configured=settings.release, gateways=gateways)
    application = App(
        settings=settings,
        store=store,
        release=release,
        registry=registry,
        model=app_model,
        gateway=gateway,
        gateways=gateways,
        router=router,
    )
    if read_only:
        store.require_schema()
    elif server_mode:
        store.set_initializer(lambda _: start_store(application))
    else:
        start_store(application)
    return application


def start_store(app: App) -> None:
    """Initialize the store for the release and record the release when it changed."""
    initialize_store(app.store, app.release)
    record_release_change(app)


def record_release_change(app: App) -> None:
    """Audit a release change: the first process to run a different bundle on this store records it
    (once, however many start together: `toolgate.graph.rollout.loaded`)."""
    detail = {
        "manifest_sha256": digest(release_manifest(app.release, app.registry)),
        "policy_version": app.policy.policy_version,
        "policy_sha256": app.policy.sha256,
        "model": app.settings.model,
    }
    record_release_loaded(app.store, app.gateway.auditor, detail)


__all__ = [
    "DEFAULT_PINNED",
    "App",
    "Gateways",
    "initialize_store",
    "open_app",
    "record_release_change",
    "release_manifest",
    "served_release",
    "start_store",
    "verified_release",
]
