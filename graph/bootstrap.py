"""The composition root of toolgate: every running gateway is built here, by `open_app`.

The CLI, the worker commands, the LangGraph server entry (`toolgate.graph.server.process`), the
evaluation runner, the benchmarks and the tests (through `toolgate.testing`) all call `open_app`.
Production passes settings only and gets the defaults: the store and checkpointer the settings
name, the release loaded by name (`toolgate.releases.loader`) and verified against its reviewed
manifest, the configured chat model, the system clock and release control. Tests, evals and
bench inject the parts they own by keyword (a store, a release object or an instrumented
registry, a scripted model, a clock, a checkpointer) and get the same `App`, built by the same
code. `build_gateway` and `build_graph` (`toolgate.graph.builder`) are this root's internal
parts: nothing else calls them to build a running gateway.

Every release the root serves goes through `load_served_release`, the one place a release is
loaded and verified (manifest drift, pinned model). Release control (`toolgate.releases.control`)
may have moved the configured release on: the store's pointer names the release to serve (after
a promotion or a rollback), and a rollout in progress serves a candidate too. `Gateways` builds
each such release once per process, and the `ReleaseRouter` picks one per thread from the
store's records. The primary release's change is recorded once per store (``release.loaded``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from toolgate.canonical import digest
from toolgate.clock import Clock
from toolgate.config import Settings
from toolgate.errors import StoreError
from toolgate.graph.builder import build_gateway, build_graph
from toolgate.graph.gateway import Gateway
from toolgate.graph.rollout.loaded import record_release_loaded
from toolgate.graph.rollout.manifest import DEFAULT_PINNED, release_manifest, verified_release
from toolgate.graph.rollout.router import ReleaseRouter
from toolgate.models.selection import load_chat_model
from toolgate.policy.breaker import BreakerRegistry
from toolgate.policy.retry import ReadRetry
from toolgate.policy.rules import PolicyRules
from toolgate.releases.bundle import Release, ReleaseEnv
from toolgate.releases.loader import load_release
from toolgate.releases.rules import canary_specs
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.factory import open_checkpointer, open_store
from toolgate.store.rollout import RolloutStore
from toolgate.tools.credentials import AsymmetricCredentialProvider, CredentialProvider, signing_key_file
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


@dataclass(frozen=True)
class ServedRelease:
    """One release as this process serves it: the bundle and its registry, built on this store."""

    release: Release
    """The bundle (tools, policy, instructions, reviewed manifest)."""
    registry: Registry
    """Its tools as built for this process (`Release.registry`), verified unless the caller
    opted out."""
    verified_sha256: str = ""
    """The digest of the effective manifest that was verified, taken before the registry was
    narrowed or instrumented ("" when not verified): what a rollout's records are compared with."""

    def manifest_sha256(self) -> str:
        """The digest of the effective manifest (what release evidence is recorded against)."""
        return digest(release_manifest(self.release, self.registry))


def load_served_release(
    reference: str | Release,
    *,
    store: Store,
    model: str,
    verify: bool = True,
    canary: bool = False,
    registry: Registry | None = None,
    instrument: Callable[[Registry], Registry] | None = None,
) -> ServedRelease:
    """Load ``reference`` (an id or a reference `load_release` accepts, or a release object),
    build its registry on ``store`` with the store's secret and, with ``verify``, refuse it
    (`RegistryError`) when the bundle drifted from its reviewed manifest or ``model`` is not pinned.

    The one place a release becomes servable: the root calls it for the configured release, for
    the release the store's pointer names and for every release release control routes to.
    ``canary`` narrows the verified registry to the tools a canary may hold. A ``registry`` the
    caller built (instrumented handlers: tests, evals) is served as given, never verified;
    ``instrument`` wraps the registry after it was verified (a test's counting handlers)."""
    release = load_release(reference) if isinstance(reference, str) else reference
    if registry is not None:
        return ServedRelease(release, registry)
    registry = release.registry(ReleaseEnv(store=store, secret=store.keys.secret))
    verified = ""
    if verify:
        verified_release(release, registry, model)
        verified = ServedRelease(release, registry).manifest_sha256()
    if canary:
        registry = registry.narrowed(canary_specs(registry.tools.values()))
    return ServedRelease(release, instrument(registry) if instrument is not None else registry, verified)


@dataclass(frozen=True, kw_only=True)
class GatewayParts:
    """What every gateway of one process shares, whatever its release and model."""

    store: Store
    server_mode: bool = False
    clock: Clock | None = None
    breakers: BreakerRegistry | None = None
    """The circuit breakers every gateway of the process shares (`None`: `build_gateway` makes a
    set kept in the store)."""
    credential_provider: CredentialProvider | None = None
    """Signs the service credentials of every gateway of the process (`None`: the built-in HS256
    tokens; ``TOOLGATE_SERVICE_SIGNING_KEY_FILE``: an `AsymmetricCredentialProvider`)."""
    read_retry: ReadRetry | None = None
    """How reads are retried after a timeout or a 5xx-class failure (`None`: the default; a test
    gives one with a fake sleep)."""

    def gateway(self, served: ServedRelease, model: BaseChatModel) -> Gateway:
        """``served``'s gateway around ``model`` (the one call of `build_gateway` in the root)."""
        gateway = build_gateway(
            model=model,
            registry=served.registry,
            policy=served.release.policy,
            store=self.store,
            instructions=served.release.instructions,
            breakers=self.breakers,
            server_mode=self.server_mode,
            clock=self.clock,
            tool_choice=served.release.tool_choice,
            credential_provider=self.credential_provider,
            read_retry=self.read_retry,
        )
        return dataclasses.replace(gateway, bundle_sha256=served.verified_sha256)


class Gateways:
    """Every release this process may serve, each loaded and verified (`load_served_release`)
    and built into a `Gateway` once (the router asks per node run; thread-safe)."""

    def __init__(
        self,
        parts: GatewayParts,
        model_name: str,
        model: BaseChatModel,
        primary: Gateway,
        *,
        primary_ref: str | None = None,
        verify: bool = True,
        instrument: Callable[[Registry], Registry] | None = None,
        models: Mapping[str, BaseChatModel] | None = None,
    ) -> None:
        self.parts, self.model_name, self.model, self.primary = parts, model_name, model, primary
        self._verify, self._instrument, self._models = verify, instrument, dict(models or {})
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
                served = self._load(release, canary=canary)
                found = self.parts.gateway(served, self._models.get(served.release.id, self.model))
                self._built[(release, canary)] = found
            return found

    def verify(self, release_id: str) -> str:
        """Load ``release_id`` afresh, verify it against its reviewed manifest and the configured
        model (`RegistryError` otherwise) and return the digest of its effective manifest."""
        return load_served_release(
            release_id, store=self.parts.store, model=self.model_name
        ).manifest_sha256()

    def _load(self, release: str, *, canary: bool) -> ServedRelease:
        return load_served_release(
            release,
            store=self.parts.store,
            model=self.model_name,
            verify=self._verify,
            canary=canary,
            instrument=self._instrument,
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
    checkpointer: BaseCheckpointSaver[Any] | None = field(default=None, repr=False)
    """The checkpointer the caller injected (tests, evals, bench); `None`: `graph` opens the
    settings' checkpointer, and `compiled` compiles without one (the LangGraph server's own)."""
    owns_store: bool = True
    """The root opened the store, so `close` closes it; an injected store is its owner's."""

    @property
    def policy(self) -> PolicyRules:
        """The release's rules."""
        return self.release.policy

    @contextmanager
    def graph(self, gateway: Gateway | None = None) -> Iterator[CompiledStateGraph[Any, Any, Any, Any]]:
        """The compiled graph with the configured checkpointer (closed on exit; an injected one is
        used as given), around this process's gateways and router (or only ``gateway``, e.g. one
        with a scripted model in a test)."""
        if self.checkpointer is not None:
            yield self.compiled(gateway)
            return
        with open_checkpointer(self.settings.database_url, self.settings.data_dir) as saver:
            yield self.compiled(gateway, checkpointer=saver)

    def compiled(
        self, gateway: Gateway | None = None, *, checkpointer: BaseCheckpointSaver[Any] | None = None
    ) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The compiled graph around this process's gateways and router (or only ``gateway``), with
        ``checkpointer``, else the injected one, else none (the LangGraph server brings its own)."""
        router = self.router if gateway is None else None
        return build_graph(
            gateway=gateway or self.gateway, checkpointer=checkpointer or self.checkpointer, router=router
        )

    def gateway_with(self, model: BaseChatModel) -> Gateway:
        """This process's release around another chat model, built as a second process would
        build it (its own circuit-breaker owner): a second worker in a test or an evaluation case."""
        parts = GatewayParts(
            store=self.store,
            server_mode=self.gateway.server_mode,
            clock=self.gateway.clock,
            credential_provider=self.gateway.executor.credential_provider,
        )
        return parts.gateway(ServedRelease(self.release, self.registry), model)

    def close(self) -> None:
        """Give back what the app holds open (the store's connections, when it opened the store);
        an operator command's app is closed when the command ends, so a process running many
        commands holds none. Unspent rate-limit shares go back to the store first."""
        with contextlib.suppress(StoreError):  # else they lapse with their window
            self.gateway.rate_limiter.give_back()
        if self.owns_store:
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
    breakers: BreakerRegistry | None = None,
    read_retry: ReadRetry | None = None,
    store: Store | None = None,
    release: str | Release | None = None,
    registry: Registry | None = None,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    instrument: Callable[[Registry], Registry] | None = None,
    models: Mapping[str, BaseChatModel] | None = None,
    verify: bool = True,
    start: bool = True,
    release_control: bool = True,
) -> App:
    """Build the running gateway: open the store, load and verify the release, build the gateway.

    A bundle whose hashes differ from its reviewed manifest, or an unpinned model, refuses to
    start. ``read_only`` (verification and listing commands) writes nothing at all: no migration,
    no key file, no audit event; the store must already exist at the current schema.
    ``server_mode`` (the LangGraph server) connects nothing now: the store initializes itself,
    and records the release, on first use.

    Every other keyword injects a part in place of its production default (tests, evals, bench;
    `toolgate.testing` is the kit that fills them in):

    - ``store``: an open store (the caller keeps owning it) instead of the settings' one;
    - ``release``: the release to serve, a reference or a `Release`, instead of
      ``settings.release``; ``registry``: its registry as the caller built it (instrumented
      handlers), instead of `Release.registry` on the store;
    - ``model``, ``clock``, ``breakers``, ``checkpointer``: the chat model, the process clock,
      the circuit breakers (default: shared through the store) and the checkpointer `App.graph`
      and `App.compiled` use;
    - ``read_retry``: how reads are retried after a timeout or a 5xx-class failure (a test's
      fake sleep), instead of `DEFAULT_READ_RETRY`;
    - ``instrument``: wraps every registry the root serves, after its verification (a test's
      counting handlers; the manifest is checked against the shipped handlers);
    - ``models``: the chat model of a release by id where it differs from ``model`` (a test
      scripting each rollout arm apart);
    - ``verify=False``: serve the release without the manifest check (a test's own tools, an
      instrumented registry: neither can match a reviewed manifest);
    - ``start=False``: the store is already initialized for the release (an evaluation case's
      copy of a template), so nothing is written at all;
    - ``release_control=False``: serve only this release, ignoring the store's pointer and
      rollouts (no router).
    """
    settings = settings or Settings.from_env()
    # the data directory as it is now: loaded code may change the process's directory (``os.chdir``
    # in a handler or a status check) before a checkpointer or a store connection is opened in it
    settings = replace(settings, data_dir=settings.data_dir.absolute())
    signing = settings.service_signing_key_file  # read before anything opens: a bad key starts nothing
    signing_key = signing_key_file(signing) if signing is not None else None
    owns_store = store is None
    if store is None:
        key = settings.audit_key(create=not read_only)
        store = open_store(settings.database_url, settings.data_dir, key=key, read_only=read_only)
    provider = (  # credentials issued and expiring by the store's clock, never a worker's own
        AsymmetricCredentialProvider(signing_key, clock=store.calibrated_now) if signing_key is not None else None
    )
    configured = release if release is not None else settings.release
    configured_id = configured if isinstance(configured, str) else configured.id
    # the configured bundle is verified before the store is touched
    served = load_served_release(
        configured, store=store, model=settings.model, verify=verify, registry=registry, instrument=instrument
    )
    reference = configured_id
    if registry is None and release_control and not server_mode:
        pointer = served_release(store, configured_id, audit=not read_only)
        if pointer != configured_id:  # release control moved on (a promotion): serve that bundle
            served = load_served_release(
                pointer, store=store, model=settings.model, verify=verify, instrument=instrument
            )
            reference = pointer
    app_model = (models or {}).get(served.release.id) or model or load_chat_model(settings)
    primary = GatewayParts(
        store=store,
        server_mode=server_mode,
        clock=clock,
        breakers=breakers,
        credential_provider=provider,
        read_retry=read_retry,
    )
    gateway = primary.gateway(served, app_model)
    gateways = router = None
    if release_control:
        shared = GatewayParts(
            store=store,
            server_mode=server_mode,
            clock=clock,
            breakers=gateway.executor.breakers,
            credential_provider=provider,
            read_retry=read_retry,
        )
        gateways = Gateways(
            shared,
            settings.model,
            model or app_model,
            gateway,
            primary_ref=reference,
            verify=verify,
            instrument=instrument,
            models=models,
        )
        router = ReleaseRouter(store=store, configured=configured_id, gateways=gateways)
    application = App(
        settings=settings,
        store=store,
        release=served.release,
        registry=served.registry,
        model=app_model,
        gateway=gateway,
        gateways=gateways,
        router=router,
        checkpointer=checkpointer,
        owns_store=owns_store,
    )
    if read_only:
        store.require_schema()
    elif start and server_mode:
        store.set_initializer(lambda _: start_store(application))
    elif start:
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
        "manifest_sha256": ServedRelease(app.release, app.registry).manifest_sha256(),
        "policy_version": app.policy.policy_version,
        "policy_sha256": app.policy.sha256,
        "model": app.settings.model,
    }
    record_release_loaded(app.store, app.gateway.auditor, detail)


__all__ = [
    "DEFAULT_PINNED",
    "App",
    "GatewayParts",
    "Gateways",
    "ServedRelease",
    "initialize_store",
    "load_served_release",
    "open_app",
    "record_release_change",
    "release_manifest",
    "served_release",
    "start_store",
    "verified_release",
]
