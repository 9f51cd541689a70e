"""A thread keeps the release it started with until it ends, or an operator migrates it.

The router (`toolgate.graph.rollout.router.ReleaseRouter`) first computes where the rollout records
send a node run (the active release, a canary arm, a halted candidate); `ThreadPinning.apply`
then holds the thread to its own pin (`toolgate.store.thread_releases`):

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
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate.errors import ToolgateError
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.nodes._common import context_of, thread_id
from toolgate.graph.rollout.stop import stop_task_node
from toolgate.graph.server.context import server_context
from toolgate.policy.principal import Principal
from toolgate.store.rollout_records import ReleaseState, Rollout, ThreadRelease
from toolgate.store.thread_releases import ThreadReleases

if TYPE_CHECKING:
    from toolgate.graph.rollout.router import ReleaseRouter, Route

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

    def serving(self, release: str) -> Gateway | None:
        """The full gateway of ``release`` when this process can serve it, else None."""
        try:
            return self.router.gateways(release, False)
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
        from toolgate.graph.rollout.router import Route

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
        return self.serving(release_id)


def run_principal(primary: Gateway, runtime: Runtime[Context]) -> Principal | None:
    """The authenticated principal of this run, as the guard would establish it (``primary``:
    the configured release's gateway, whose directory authenticates server users)."""
    ctx = context_of(runtime)
    if primary.server_mode:
        user = runtime.server_info.user if runtime.server_info is not None else None
        try:
            ctx = server_context(ctx, user, primary.directory)
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


__all__ = ["HALTED_NODES", "ThreadPinning", "run_principal", "stop_node"]
