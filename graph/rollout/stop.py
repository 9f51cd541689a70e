"""Ending a candidate's exposure: the automatic (or manual) stop, and what its threads do after.

`stop_rollout` moves a live rollout to ``stopped`` in one conditional change of the MAC-bound
rows and audits ``release.stopped`` with the reason; from then on the router sends everyone to
the control. A thread pinned to the stopped candidate does not carry on with another release's
judgement: its model, dispatch and proposal nodes become `halt_node`, which answers every call
still waiting as not run and stops the task for review. Its approval, execute and respond nodes
run on the control, whose executor refuses the candidate's pinned proposals.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate.errors import ReleaseControlError
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.messages import rejection_message
from toolgate.graph.nodes._common import budget_of, context_of, thread_id
from toolgate.graph.seals.guard import unanswered_calls
from toolgate.graph.state import CallRecord, GatewayState
from toolgate.policy.decisions import Rejection
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.rollout import RolloutStore
from toolgate.store.rollout_records import ReleasePointer, Rollout


def stop_rollout(store: Store, configured: str, rollout: Rollout, reason: str, *, by: str) -> Rollout | None:
    """Stop ``rollout`` (phase shadow or canary) and audit ``release.stopped``; None when someone
    else changed it first (it is then stopped, promoted or rolled back already)."""
    rollouts = RolloutStore(store)

    def change(pointer: ReleasePointer | None, current: Rollout | None) -> tuple[Any, Any]:
        if (
            current is None
            or current.rollout_id != rollout.rollout_id
            or current.phase not in ("shadow", "canary")
        ):
            raise ReleaseControlError("phase_changed", "the rollout is no longer live")
        return pointer, dataclasses.replace(current, phase="stopped", stop_reason=reason, changed_by=by)

    for _ in range(3):  # another change may land between reading and changing: read again
        state = rollouts.state(configured)
        try:
            done = rollouts.change(configured, state.pointer.version if state.pointer else 0, change)
            break
        except ReleaseControlError as exc:
            if exc.code != "state_changed":
                return None  # no longer live, or records that do not verify (routing ignores them)
    else:
        return None
    Auditor(store, rollout.candidate).record(
        "release.stopped",
        "stopped",
        code=reason.split(":", 1)[0],
        detail={"rollout_id": rollout.rollout_id, "control": rollout.control, "reason": reason, "by": by},
    )
    return done.rollout


def stop_task_node(
    gw: Gateway, code: str, why: str, *, reason: str, detail: dict[str, Any]
) -> Callable[..., dict[str, Any]]:
    """A node that stops the task for review because its release no longer serves it: every call
    of the turn still waiting is answered as not run (``task_stopped``, "Not run: <why>. Start a
    new task."), ``release.thread_stopped`` is audited with ``code`` and ``detail`` plus the
    number of calls answered, and the state's ``status_reason`` is ``reason``."""
    rejection = Rejection(code="task_stopped", retryable=False, message=f"Not run: {why}. Start a new task.")

    def halt(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
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
            detail={**detail, "calls": len(messages)},
        )
        return {
            "messages": messages,
            "calls": records,
            "awaiting": [],
            "status": "needs_review",
            "status_reason": reason,
        }

    return halt


def halt_node(gw: Gateway, rollout: Rollout) -> Callable[..., dict[str, Any]]:
    """A candidate thread's node once its release no longer serves: every call of the turn still
    waiting is answered as not run, and the task stops for review."""
    return stop_task_node(
        gw,
        "release_stopped",
        f"release {rollout.candidate}, which served this task, was stopped ({rollout.phase})",
        reason=f"release {rollout.candidate} serving this task was stopped",
        detail={"rollout_id": rollout.rollout_id, "candidate": rollout.candidate},
    )


__all__ = ["halt_node", "stop_rollout", "stop_task_node"]
