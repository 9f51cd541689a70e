"""Routing threads between a control and a candidate release, one graph for both.

With a rollout under way a process serves two bundles. `build_graph` then makes each node a
dispatcher (`ReleaseRouter.node`): it reads the rollout from the store, looks up the thread's arm
there (pinning it on the thread's first model turn, from the authenticated principal's cohort)
and calls that arm's own node, built by the same node factory around that release's `Gateway`
and behind the same guard. Conditional edges read state only and stay as they are. Which arm a
thread is in never comes from checkpointed state: only from MAC-bound store records.

By phase: no rollout, ``stopped``, ``rolled_back``: the active release serves everyone; a
thread pinned to the candidate finishes its in-flight turn on the control's approval, execute
and respond nodes (its proposals stay pinned to the candidate, so execute refuses them) and its
model, dispatch and proposal nodes stop the task for review. ``shadow``: the control serves
everyone, each control model turn shadowed (`toolgate.graph.rollout.shadow`). ``canary``: a new thread
goes to the candidate (without high-risk tools) when its user's cohort bucket is inside the
canary, older threads to the control; the automatic-stop monitor runs after every candidate
node. ``promoted``: new threads go to the candidate, older ones keep their release.

Then every route is held to the thread's own release pin (`toolgate.graph.rollout.pins`): a
thread keeps the release it started with across later rollouts and pointer moves.

A record whose MAC does not verify is never acted on: routing falls back to the configured
release (the operator's own setting) and the refusal is audited.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.nodes._common import thread_id
from toolgate.graph.rollout.pins import HALTED_NODES, ThreadPinning, run_principal
from toolgate.graph.rollout.routed_node import RoutedNode
from toolgate.graph.rollout.stop import stop_rollout
from toolgate.graph.seals.guard import guarded
from toolgate.graph.seals.seal import tampered_keys
from toolgate.graph.state import GatewayState
from toolgate.policy.rollout import DEFAULT_THRESHOLDS, Signals, StopThresholds, arm_for, stop_reason
from toolgate.policy.rollout_signals import ChainCursor, candidate_signals
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.rollout import RolloutStore
from toolgate.store.rollout_records import ReleaseState, Rollout

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
    shadow: Gateway | None = None
    """The candidate to shadow this (control model) turn with."""
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
        the thread's own pin (`toolgate.graph.rollout.pins`)."""
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
            shadow = self.gateways(rollout.candidate, False) if name == "model" else None
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
            return Route(self.gateways(rollout.candidate, canary), "candidate", rollout, monitored=canary)
        return Route(self.gateways(rollout.control, False), "control", rollout)

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
            candidate = self.gateways(rollout.candidate, rollout.phase == "canary")
            if release_id == candidate.registry.release:
                return candidate
            control = self.gateways(rollout.control, False)
            if release_id == control.registry.release:
                return control
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
            gateway = self.gateways(reference, False)
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


__all__ = ["HALTED_NODES", "GatewayFactory", "ReleaseRouter", "Route"]
