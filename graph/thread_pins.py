"""A thread keeps the release it started with until it ends, or an operator migrates it.

The router (`toolgate.graph.rollout.ReleaseRouter`) first computes where the rollout records
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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate.errors import ToolgateError
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.guard import unanswered_calls
from toolgate.graph.messages import rejection_message
from toolgate.graph.nodes._common import budget_of, context_of, thread_id
from toolgate.graph.server_context import server_context
from toolgate.graph.state import CallRecord, GatewayState
from toolgate.policy.decisions import Rejection
from toolgate.policy.principal import Principal
from toolgate.store.rollout_records import ReleaseState, Rollout, ThreadRelease
from toolgate.store.thread_releases import ThreadReleases

if TYPE_CHECKING:
    from toolgate.graph.rollout import ReleaseRouter, Route

HALTED_NODES = frozenset({"model", "dispatch", "proposal"})
"""Nodes a thread does not run once its release stopped serving it."""
ENDED_PHASES = frozenset({"stopped", "rolled_back"})


class ThreadPinning:
    """The per-thread pin step of one router."""

    def __init__(self, router: ReleaseRouter) -> None:
        self.router = router
        self.pins = ThreadReleases(router.store)

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
        from toolgate.graph.rollout import Route

        task = thread_id(config)
        pin = self.pins.get(task)
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
    for review (audited ``release.thread_stopped``)."""
    code, why, pinned = stop
    rejection = Rejection(code="task_stopped", retryable=False, message=f"Not run: {why}. Start a new task.")

    def stopped(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        turn = budget_of(state, context_of(runtime))["model_turns"]
        messages, records = [], {}
        for call_id, tool in unanswered_calls(state):
            messages.append(rejection_message(call_id, tool, rejection))
            records[call_id] = CallRecord(
                call_id=call_id, tool=tool, turn=turn, phase="rejected", code=rejection.code
            )
        principal = context_of(runtime).principal
        gw.auditor.record(
            "release.thread_stopped",
            "refused",
            user_id=principal.user_id if principal else None,
            code=code,
            thread_id=thread_id(config),
            detail={"pinned": pinned, "served": gw.registry.release, "calls": len(messages)},
        )
        return {
            "messages": messages,
            "calls": records,
            "awaiting": [],
            "status": "needs_review",
            "status_reason": f"{code}: {why}",
        }

    return stopped


__all__ = ["HALTED_NODES", "ThreadPinning", "run_principal", "stop_node"]
