"""Routing threads between a control and a candidate release, one graph for both: the router,
each thread's own release pin, and the routed nodes that carry each run to its arm.

With a rollout under way a process serves two bundles. `build_graph` then makes each node a
dispatcher (`ReleaseRouter.node`, a `RoutedNode`): it reads the rollout from the store, looks up
the thread's arm there (pinning it on the thread's first model turn, from the authenticated
principal's cohort) and calls that arm's own node, built by the same node factory around that
release's `Gateway` and behind the same guard. Conditional edges read state only and stay as they
are. Which arm a thread is in never comes from checkpointed state: only from MAC-bound store records.

By phase: no rollout, ``stopped``, ``rolled_back``: the active release serves everyone; a
thread pinned to the candidate finishes its in-flight turn on the control's approval, execute
and respond nodes (its proposals stay pinned to the candidate, so execute refuses them) and its
model, dispatch and proposal nodes stop the task for review. ``shadow``: the control serves
everyone, each control model turn shadowed (`toolgate.graph.rollout.shadow`). ``canary``: a new
thread goes to the candidate (without high-risk tools) when its user's cohort bucket is inside
the canary, older threads to the control; the automatic-stop monitor runs after every candidate
node. ``promoted``: new threads go to the candidate, older ones keep their release.

A record whose MAC does not verify is never acted on: routing falls back to the configured
release (the operator's own setting) and the refusal is audited.

Pins. Every route is then held to the thread's own release pin (`ThreadPinning.apply`,
`toolgate.store.thread_releases`): a thread keeps the release it started with until it ends, or an
operator migrates it, across later rollouts and pointer moves.

- The first model turn of a thread records the release that serves it (with a rollout running,
  that is the rollout pin's release, so the two pins agree for threads started under the
  rollout; a candidate thread's pin also names that rollout). Later nodes go to the pinned
  release for as long as this process can serve it, whatever the pointer or a later rollout
  says: where the rollout's route already serves that release (its arm, canary gateway and
  automatic stop included) it is kept, else the pinned release's full gateway serves.
- A candidate stopped or rolled back by the rollout a thread was pinned under no longer serves
  that thread, even after later rollouts: the rollout's halt decides, as before.
- A pinned release that cannot be served (not installed, refused by its reviewed manifest)
  never silently becomes another: the thread's model, dispatch and proposal nodes stop the task
  for review (``release_unavailable``, audited ``release.thread_stopped``); a pin whose MAC does
  not verify is refused (audited ``release.refused``, ``thread_pin_tampered``), never acted on,
  and stops the task the same way. Its approval, execute and respond nodes run on the release
  the records give, whose executor refuses another release's proposals.

Checkpointed ``state["release"]`` is only a label: nothing here reads it.

The pin is read from the store once per graph run (`ThreadPinning.pin_of_run`, keyed by the
run's LangGraph ``RunControl``, which LangGraph makes fresh for each invocation), not once per
node: a run's nodes all follow the pin as the run found it (or as its first model turn recorded
it), and a migration, or a row edited meanwhile, is read by the thread's next run. The rollout
records (a candidate's stop) are still read for every node.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate.errors import RegistryError, ReleaseControlError, ToolgateError
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.nodes._common import context_of, thread_id
from toolgate.graph.rollout.shadow import shadow_turn
from toolgate.graph.rollout.stop import halt_node, stop_rollout, stop_task_node
from toolgate.graph.seals.guard import guarded
from toolgate.graph.seals.seal import tampered_keys
from toolgate.graph.server.context import server_context
from toolgate.graph.state import GatewayState
from toolgate.policy.principal import Principal
from toolgate.releases.rules import (
    DEFAULT_THRESHOLDS,
    LIVE_PHASES,
    Signals,
    StopThresholds,
    arm_for,
    stop_reason,
)
from toolgate.releases.signals import ChainCursor, candidate_signals
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.rollout import RolloutStore
from toolgate.store.rollout_records import ReleaseState, Rollout, ThreadRelease
from toolgate.store.thread_releases import ThreadReleases

HALTED_NODES = frozenset({"model", "dispatch", "proposal"})
"""Nodes a thread does not run once its release stopped serving it."""
ENDED_PHASES = frozenset({"stopped", "rolled_back"})
RUN_PINS_KEPT = 1024
"""Pins of recent runs kept in memory (the oldest run's is forgotten first)."""


class ThreadPinning:
    """The per-thread pin step of one router."""

    def __init__(self, router: ReleaseRouter) -> None:
        self.router = router
        self.pins = ThreadReleases(router.store)
        self._run_pins: OrderedDict[tuple[int, str], tuple[object, ThreadRelease]] = OrderedDict()
        self._run_lock = threading.Lock()

    def pin_of_run(self, task: str, runtime: Runtime[Context]) -> ThreadRelease | None:
        """Thread ``task``'s pin as this graph run read it from the store (read on the run's first
        routed node; every node of a run with no ``RunControl`` reads it). A thread with no pin
        yet is read again by each node until one is recorded; never from checkpointed state."""
        control = getattr(runtime, "control", None)
        if control is None:
            return self.pins.get(task)
        key = (id(control), task)
        with self._run_lock:
            found = self._run_pins.get(key)
            if found is not None and found[0] is control:  # the same run (ids are not reused while kept)
                return found[1]
        pin = self.pins.get(task)
        if pin is not None:
            self._remember(runtime, task, pin)
        return pin

    def _remember(self, runtime: Runtime[Context], task: str, pin: ThreadRelease) -> None:
        control = getattr(runtime, "control", None)
        if control is None:
            return
        with self._run_lock:
            self._run_pins[(id(control), task)] = (control, pin)
            self._run_pins.move_to_end((id(control), task))
            while len(self._run_pins) > RUN_PINS_KEPT:
                self._run_pins.popitem(last=False)

    def stopped_by(self, pin: ThreadRelease, current: ReleaseState) -> Rollout | None:
        """The rollout the thread was pinned under, when it stopped (or rolled back) the pinned
        release as its candidate; None otherwise (a thread pinned before a rollout whose
        candidate happens to be its release is not that rollout's exposure)."""
        if not pin.rollout_id:
            return None
        rollout = current.rollout
        if rollout is None or rollout.rollout_id != pin.rollout_id:
            rollout = self.router.rollouts.get_rollout(pin.rollout_id)
        if rollout is None or not rollout.authentic or rollout.phase not in ENDED_PHASES:
            return None
        return rollout if rollout.candidate == pin.release else None

    def serving(self, release: str, canary: bool = False) -> Gateway | None:
        """The full gateway of ``release`` (``canary``: its canary arm's) when this process can
        serve it, else None."""
        try:
            return self.router.gateways(release, canary)
        except (ToolgateError, ImportError):
            return None

    def apply(
        self,
        name: str,
        route: Route,
        current: ReleaseState,
        runtime: Runtime[Context],
        config: RunnableConfig,
    ) -> Route:
        """``route`` held to the thread's pin (recording the pin on its first model turn)."""

        task = thread_id(config)
        pin = self.pin_of_run(task, runtime)
        if pin is None:
            if name != "model" or route.halted or current.tampered or self.router.store.read_only:
                return route
            principal = run_principal(self.router.gateways(self.router.configured, False), runtime)
            rollout_id = route.rollout.rollout_id if route.rollout and route.arm == "candidate" else ""
            pin = self.pins.pin(
                task,
                route.gateway.registry.release,
                tenant_id=principal.tenant_id if principal else "",
                rollout_id=rollout_id,
            )
            self._remember(runtime, task, pin)
        if not pin.authentic:
            self.router._refuse_tampered("thread_pin_tampered", {"thread_id": task})
            return self._halted(name, route, ("thread_pin_tampered", "its release pin does not verify", ""))
        stopped = self.stopped_by(pin, current)
        if stopped is not None:
            return dataclasses.replace(
                route, rollout=stopped, halted=name in HALTED_NODES, shadow=None, monitored=False
            )
        if pin.release == route.gateway.registry.release and not route.halted:
            return route
        if route.halted and route.stop is not None:  # the rollout refused its arm's release here
            return route
        gateway = self.serving(pin.release)
        if gateway is None:
            why = f"release {pin.release}, which this task is pinned to, cannot be served here"
            return self._halted(name, route, ("release_unavailable", why, pin.release))
        return Route(gateway, "pinned", current.rollout)

    @staticmethod
    def _halted(name: str, route: Route, stop: tuple[str, str, str]) -> Route:
        """``route`` without extras; its model, dispatch and proposal nodes stop the task (``stop``:
        code, why, the pinned release)."""
        if name not in HALTED_NODES:
            return dataclasses.replace(route, shadow=None, monitored=False, halted=False)
        return dataclasses.replace(route, shadow=None, monitored=False, halted=True, stop=stop)

    def gateway_for(self, thread: str | None, release_id: str, current: ReleaseState) -> Gateway | None:
        """The gateway of ``release_id`` when ``thread`` is pinned to it by an authentic pin and
        that release still serves it (a proposal of the thread is reviewed and delivered under
        it); None otherwise."""
        if not thread:
            return None
        pin = self.pins.get(thread)
        if pin is None or not pin.authentic or pin.release != release_id:
            return None
        if self.stopped_by(pin, current) is not None:
            return None
        rollout = current.rollout
        if rollout is not None and rollout.phase in LIVE_PHASES and rollout.candidate == release_id:
            return self.router.servable_candidate(rollout, False)  # only the bundle it gated
        return self.serving(release_id)


def run_principal(primary: Gateway, runtime: Runtime[Context]) -> Principal | None:
    """The authenticated principal of this run, as the guard would establish it (``primary``:
    the configured release's gateway, whose directory authenticates server users)."""
    ctx = context_of(runtime)
    if primary.server_mode:
        user = runtime.server_info.user if runtime.server_info is not None else None
        try:
            ctx = server_context(ctx, user, primary.directory, primary.store.keys)
        except ToolgateError:
            return None
    return ctx.principal


def stop_node(gw: Gateway, stop: tuple[str, str, str]) -> Callable[..., dict[str, Any]]:
    """A pinned thread's node when its release cannot serve it (``stop``: code, why, the pinned
    release): every call of the turn still waiting is answered as not run, and the task stops
    for review (audited ``release.thread_stopped``; `toolgate.graph.rollout.stop.stop_task_node`)."""
    code, why, pinned = stop
    return stop_task_node(
        gw, code, why, reason=f"{code}: {why}", detail={"pinned": pinned, "served": gw.registry.release}
    )


class RoutedNode:
    """Node ``name`` of a graph under release control: each run goes to its arm's node.

    A callable object rather than a closure, like `toolgate.graph.seals.guard.GuardedNode`: LangGraph
    does not disassemble it for subgraphs each time the graph compiles."""

    def __init__(self, router: ReleaseRouter, name: str, make: NodeFactory) -> None:
        self.router = router
        """Decides each run's arm from the store's records."""
        self.name = name
        """The node's name in the graph."""
        self.make = make
        """Builds the node around one arm's gateway (once per gateway, `ReleaseRouter._arm_node`)."""
        self.__name__ = name

    def __repr__(self) -> str:
        return f"RoutedNode({self.name!r})"

    def __call__(
        self, state: GatewayState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        router, name = self.router, self.name
        route = router.route(name, state, runtime, config)
        if route.halted:
            if route.stop is not None:
                return guarded(route.gateway, name, stop_node(route.gateway, route.stop))(
                    state, runtime, config
                )
            assert route.rollout is not None
            return guarded(route.gateway, name, halt_node(route.gateway, route.rollout))(
                state, runtime, config
            )
        update = router._arm_node(route.gateway, name, self.make)(state, runtime, config)
        if route.shadow is not None and route.rollout is not None:
            shadow_turn(
                control=route.gateway,
                candidate=route.shadow,
                rollout=route.rollout,
                thread_id=thread_id(config),
                state=state,
                update=update,
                ctx=context_of(runtime),
            )
        if route.monitored and route.rollout is not None:
            router.check(route.rollout, route.gateway)
        return update


GatewayFactory = Callable[[str, bool], Gateway]
"""``(release id, canary)`` -> that release's gateway, verified against its reviewed manifest;
``canary=True`` is the candidate arm's gateway without high-risk tools. Cached by the caller."""
NodeFactory = Callable[[Gateway], Callable[..., dict[str, Any]]]


@dataclass(frozen=True)
class Route:
    """Where one node run of one thread goes."""

    gateway: Gateway
    arm: str
    rollout: Rollout | None = None
    shadow: Callable[[], Gateway] | None = None
    """Loads the candidate to shadow this (control model) turn with (inside the shadow, so a
    candidate this process cannot load fails only its shadow record)."""
    monitored: bool = False
    """Evaluate the automatic stop after the node (a canary's candidate arm)."""
    halted: bool = False
    """The thread's release stopped serving: answer its calls and stop the task instead."""
    stop: tuple[str, str, str] | None = None
    """Why a halted thread stops when no rollout stopped it (code, why, pinned release)."""


class ReleaseRouter:
    """Per node run: which release serves this thread, from the store's records."""

    def __init__(
        self,
        *,
        store: Store,
        configured: str,
        gateways: GatewayFactory,
        thresholds: StopThresholds = DEFAULT_THRESHOLDS,
    ) -> None:
        self.store = store
        self.configured = configured
        self.gateways = gateways
        self.thresholds = thresholds
        self.rollouts = RolloutStore(store)
        self._installed = False
        self._nodes: dict[tuple[int, str], tuple[Gateway, Callable[..., dict[str, Any]]]] = {}
        self._cursors: dict[str, ChainCursor] = {}
        self._reported: set[str] = set()
        self._lock = threading.Lock()
        self._monitor_lock = threading.Lock()
        self.pins = ThreadPinning(self)

    # ---- state -------------------------------------------------------------------------

    def state(self) -> ReleaseState:
        """The configured release's pointer and rollout (empty before the tables exist)."""
        if not self._installed:
            if not self.rollouts.installed():
                return ReleaseState(None, None)
            self._installed = True
        return self.rollouts.state(self.configured)

    def _refuse_tampered(self, what: str, detail: dict[str, Any]) -> None:
        key = f"{what}:{sorted(detail.items())}"
        if key in self._reported or self.store.read_only:
            return
        self._reported.add(key)
        Auditor(self.store, self.configured).record(
            "release.refused", "refused", code=what, detail={**detail, "served": self.configured}
        )

    # ---- routing -----------------------------------------------------------------------

    def route(
        self, name: str, state: GatewayState, runtime: Runtime[Context], config: RunnableConfig
    ) -> Route:
        """The arm and gateway for node ``name`` of this thread now: the rollout's, then held to
        the thread's own pin (`toolgate.graph.rollout.router`)."""
        current = self.state()
        route = self._rollout_route(name, state, runtime, config, current)
        return self.pins.apply(name, route, current, runtime, config) if self._installed else route

    def _rollout_route(
        self,
        name: str,
        state: GatewayState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        current: ReleaseState,
    ) -> Route:
        if current.tampered:
            self._refuse_tampered("release_state_tampered", {"records": current.tampered})
            return Route(self.gateways(self.configured, False), "control")
        active = current.pointer.active if current.pointer else self.configured
        rollout = current.rollout
        if rollout is None:
            return Route(self.gateways(active, False), "control")
        if rollout.phase == "shadow":
            control = self.gateways(rollout.control, False)
            shadow = partial(self.gated_candidate, rollout, False) if name == "model" else None
            return Route(control, "control", rollout, shadow=shadow)
        task = thread_id(config)
        pin = self.rollouts.get_pin(rollout.rollout_id, task)
        if rollout.phase in ("stopped", "rolled_back"):
            halted = pin is not None and pin.authentic and pin.arm == "candidate" and name in HALTED_NODES
            return Route(self.gateways(active, False), "control", rollout, halted=halted)
        if pin is None:
            arm = self._first_arm(name, state, runtime, config, rollout)
            release = rollout.candidate if arm == "candidate" else rollout.control
            pin = self.rollouts.pin(rollout.rollout_id, task, release, arm)
        if not pin.authentic:
            self._refuse_tampered("pin_tampered", {"rollout_id": rollout.rollout_id, "thread_id": task})
            return Route(self.gateways(active, False), "control", rollout)
        if pin.arm == "candidate":
            canary = rollout.phase == "canary"
            try:
                candidate = self.gated_candidate(rollout, canary)
            except (ToolgateError, ImportError) as exc:  # the thread stops, not the run
                served = Route(self.gateways(active, False), "control", rollout)
                if isinstance(exc, ReleaseControlError):
                    stop = (exc.code, str(exc), rollout.candidate)
                else:  # its package raises or drifted here
                    why = f"release {rollout.candidate}, which this task is pinned to, cannot be served here"
                    stop = ("release_unavailable", why, rollout.candidate)
                return ThreadPinning._halted(name, served, stop)
            return Route(candidate, "candidate", rollout, monitored=canary)
        return Route(self.gateways(rollout.control, False), "control", rollout)

    def gated_candidate(self, rollout: Rollout, canary: bool) -> Gateway:
        """The gateway of ``rollout``'s candidate, refused (`ReleaseControlError`
        ``hashes_changed``) when the bundle this process loads under its id is not the one release
        control gated (the digest recorded when its shadow began): evidence binds bundles, so a
        package replaced under the same id serves no one before it is gated itself."""
        gateway = self.gateways(rollout.candidate, canary)
        if gateway.bundle_sha256 and gateway.bundle_sha256 != rollout.candidate_sha256:
            raise ReleaseControlError(
                "hashes_changed",
                f"release {rollout.candidate} as installed here is not the bundle its rollout gated",
            )
        return gateway

    def servable_candidate(self, rollout: Rollout, canary: bool) -> Gateway | None:
        """`gated_candidate`, or None where this process cannot serve it."""
        try:
            return self.gated_candidate(rollout, canary)
        except (ToolgateError, ImportError):
            return None

    def executing_gateway(self, release_id: str, thread: str | None = None) -> Gateway:
        """The gateway that may deliver a proposal of release ``release_id`` (its id, as proposals
        record it) outside a graph run (the worker): that release's while release control serves
        it or ``thread`` is pinned to it, else the active release's, whose executor refuses a
        proposal pinned to another release."""
        current = self.state()
        found = self._executing(release_id, current)
        if found.registry.release != release_id and self._installed:
            found = self.pins.gateway_for(thread, release_id, current) or found
        return found

    def _executing(self, release_id: str, current: ReleaseState) -> Gateway:
        if current.tampered:
            return self.gateways(self.configured, False)
        active = current.pointer.active if current.pointer else self.configured
        rollout = current.rollout
        if rollout is not None and rollout.phase in ("canary", "promoted"):
            # an arm this process cannot load delivers nothing of its own (the active release's
            # executor refuses its proposals) and never stops the other arm's deliveries
            for gateway in (
                self.servable_candidate(rollout, rollout.phase == "canary"),
                self.pins.serving(rollout.control),
            ):
                if gateway is not None and release_id == gateway.registry.release:
                    return gateway
        return self.gateways(active, False)

    def reviewing_gateway(self, release_id: str, thread: str | None = None) -> Gateway | None:
        """The full gateway of release ``release_id`` (a proposal's) when release control knows it
        (the current rollout's control or candidate, the pointer's active or previous release, the
        release ``thread`` is pinned to), so a reviewer decides under the rules that made the
        proposal; None otherwise."""
        current = self.state()
        known = [current.pointer.active, current.pointer.previous] if current.pointer else []
        if current.rollout is not None:
            known += [current.rollout.control, current.rollout.candidate]
        for reference in dict.fromkeys(r for r in known if r and not current.tampered):
            if reference != release_id:
                continue  # another release is never loaded for it: one this process cannot load
                # (a drifted bundle on this host) refused every decision on a candidate's proposal
            try:
                gateway = self.gateways(reference, False)
            except RegistryError:  # not loadable here: this process's gateway refuses the decision
                return None
            if gateway.registry.release == release_id:
                return gateway
        return self.pins.gateway_for(thread, release_id, current) if self._installed else None

    def _first_arm(
        self,
        name: str,
        state: GatewayState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        rollout: Rollout,
    ) -> str:
        """A new thread's arm; a thread that existed before the rollout stays on the control.

        "New" is read from sealed state only (no principal recorded yet): state changed outside
        the gateway gets the control here, and the guard then refuses it."""
        if name != "model" or state.get("principal"):
            return "control"
        if tampered_keys(self.store.keys, thread_id(config), state):
            return "control"
        if rollout.phase == "promoted":
            return "candidate"
        principal = run_principal(self.gateways(self.configured, False), runtime)
        if principal is None:
            return "control"
        return arm_for(rollout.salt, rollout.canary_bp, principal.tenant_id, principal.user_id)

    # ---- nodes -------------------------------------------------------------------------

    def _arm_node(self, gw: Gateway, name: str, make: NodeFactory) -> Callable[..., dict[str, Any]]:
        with self._lock:
            found = self._nodes.get((id(gw), name))
            if found is None or found[0] is not gw:
                found = (gw, guarded(gw, name, make(gw)))
                self._nodes[(id(gw), name)] = found
            return found[1]

    def node(self, name: str, make: NodeFactory) -> Callable[..., dict[str, Any]]:
        """The dispatching node ``name``: routes each run to its arm's node (built by ``make``)."""
        return RoutedNode(self, name, make)

    # ---- automatic stop ----------------------------------------------------------------

    def signals(self, rollout: Rollout, candidate: Gateway) -> Signals:
        """The candidate's signals since the rollout began (its registry gives approval classes)."""

        def approval_of(tool: str) -> Any:
            spec = candidate.registry.get(tool)
            return spec.approval if spec else None

        with self._monitor_lock:  # one evaluation at a time moves this process's chain cursor
            cursor = self._cursors.setdefault(rollout.rollout_id, ChainCursor())
            return candidate_signals(self.store, rollout.candidate, rollout.started_seq, approval_of, cursor)

    def check(self, rollout: Rollout, candidate: Gateway) -> str:
        """Evaluate the candidate's signals; stop the rollout when a threshold trips (the reason)."""
        reason = stop_reason(self.signals(rollout, candidate), self.thresholds)
        if reason:
            stop_rollout(self.store, self.configured, rollout, reason, by="automatic")
        return reason


__all__ = [
    "HALTED_NODES",
    "GatewayFactory",
    "ReleaseRouter",
    "Route",
    "RoutedNode",
    "ThreadPinning",
    "run_principal",
    "stop_node",
]
