"""The wait node: the thread sleeps, durably, while the job a completed write started runs.

A write whose tool declares a `toolgate.tools.waits.Wait` and whose operation succeeded in the
store opens a wait (`Store.waits.open`: thread, operation key, job, next check, expiry) and the
thread suspends with `interrupt()`: no model turn runs while the job does. The worker checks the
job (`toolgate.graph.waits.progress`) and marks the wait ready; any wake then resumes the thread, and
this node gives the model one bounded summary as the result of the ORIGINAL call id (the write's
`ToolMessage` is replaced by id, so every tool call keeps exactly one answer for either provider).

Authority is the store's wait row, never the checkpoint: the row must verify under the store's
``wait`` MAC and belong to this thread; a tampered row is refused (``wait.refused``,
``wait_record_invalid``, audited) and the thread keeps waiting. LangGraph re-runs this node from
its start on resume, so everything before `interrupt()` is idempotent (opening a wait returns the
existing one). Progress goes to the client through LangGraph's stream writer (``custom`` mode).

A status tool that declares forwarded credentials is checked as the requesting user: while the
wait is ``waiting`` this node seals that user's declared credentials for it
(`toolgate.graph.waits.delegation`), from this request when its authenticated principal is the
requester, else from those the requester's proposal request sealed; never a reviewer's. They
are deleted when the wait ends.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from toolgate.clock import iso
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.messages import result_message
from toolgate.graph.nodes._common import context_of, principal_of, thread_id
from toolgate.graph.routing import after_execute
from toolgate.graph.state import GatewayState
from toolgate.graph.waits.delegation import forget, seal_for_wait, status_spec
from toolgate.store.waits import WaitIn, WaitRecord
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ToolSpec

INVALID = "wait_record_invalid"
"""The refusal code of a wait row that does not verify or belongs to another thread."""


def waited_calls(registry: Registry, state: GatewayState) -> list[tuple[str, ToolSpec]]:
    """This turn's completed writes whose tool declares a wait (from state: only a routing hint)."""
    calls, outcomes = state.get("calls", {}), state.get("outcomes", {})
    found = []
    for call_id in state.get("turn_calls", []):
        record = calls.get(call_id) or {}
        spec = registry.get(record.get("tool", ""))
        completed = (outcomes.get(call_id) or {}).get("status") == "completed"
        if spec is not None and spec.is_write and spec.wait is not None and completed:
            found.append((call_id, spec))
    return found


def make_after_execute(registry: Registry) -> Callable[[GatewayState], str]:
    """`after_execute`, except that a turn with a completed write that declares a wait goes to ``wait``."""

    def route(state: GatewayState) -> Literal["approval", "model", "respond", "wait"]:
        target = after_execute(state)
        return "wait" if target == "model" and waited_calls(registry, state) else target

    return route


def after_wait(state: GatewayState) -> Literal["wait", "model", "respond"]:
    """Back to sleep while waiting; the model once every wait of the turn is over."""
    if state.get("status") in ("needs_review", "refused"):
        return "respond"
    return "wait" if state.get("status") == "waiting" else "model"


NOTES = {
    "done": "The job finished while toolgate waited for it; this is its final status.",
    "expired": "The wait expired before the job finished; this is its latest status. Do not resubmit.",
    "refused": (
        "toolgate could not check the job as the requesting user (their credentials for the status check "
        "were unavailable or refused), so it stopped waiting; the job may still be running. Do not resubmit."
    ),
}
"""What the model is told about the wait, by its outcome."""


def _summary(gw: Gateway, call_id: str, spec: ToolSpec, row: WaitRecord, original: str | None) -> ToolMessage:
    status_spec = gw.registry.get(row.status_tool)
    bound = max(spec.max_output_bytes, status_spec.max_output_bytes if status_spec else 0)
    data = {"job_id": row.job_ref, "job_status": row.last_status, "final": row.result}
    note = NOTES.get(row.outcome, NOTES["expired"])
    extra = {
        "operation_key": row.operation_key,
        "authoritative_status": "completed",
        "wait": {"outcome": row.outcome, "checks": row.checks, "note": note},
    }
    message = result_message(call_id, spec.name, spec.version, data, max_bytes=bound, extra=extra)
    message.id = original
    return message


def make_wait_node(gw: Gateway) -> Any:
    """Build the ``wait`` node."""

    def rows(
        state: GatewayState, thread: str, ctx: Context
    ) -> tuple[list[tuple[str, ToolSpec, WaitRecord]], bool]:
        """Each waited call with its stored wait (opened here when missing); True if any is refused."""
        found: list[tuple[str, ToolSpec, WaitRecord]] = []
        refused = False
        for call_id, spec in waited_calls(gw.registry, state):
            assert spec.wait is not None
            key = (state.get("calls", {}).get(call_id) or {}).get("operation_key", "")
            op = gw.store.operations.get(key)
            proposal = gw.executor.proposal(op.proposal_id) if op is not None else None
            if op is None or op.status != "succeeded" or proposal is None or proposal.thread_id != thread:
                continue  # nothing in the store says this thread's write started a job
            row = gw.store.waits.get(key)
            if row is None:
                job = spec.wait.job_ref(op.result)
                if job is None:
                    continue  # no job id in the stored result: the write's own result stands
                row = gw.store.waits.open(
                    WaitIn(
                        operation_key=key,
                        thread_id=thread,
                        tenant_id=proposal.tenant_id,
                        user_id=proposal.requester_id,
                        call_id=call_id,
                        tool=spec.name,
                        status_tool=spec.wait.status_tool,
                        job_ref=job,
                        every_s=spec.wait.every_s,
                        max_wait_s=spec.wait.max_wait_s,
                    )
                )
                gw.auditor.record(
                    "wait.opened", "waiting", user_id=proposal.requester_id, operation_key=key,
                    call_id=call_id, thread_id=thread, tool=spec.name, tenant_id=proposal.tenant_id,
                    detail={"expires_at": row.expires_at},
                )  # fmt: skip
            if not row.verified or row.thread_id != thread or row.call_id != call_id:
                refused = True
                gw.auditor.record(
                    "wait.refused", "refused", code=INVALID, operation_key=key, call_id=call_id,
                    thread_id=thread, tool=spec.name, tenant_id=proposal.tenant_id,
                )  # fmt: skip
                continue
            status = status_spec(gw.registry, spec, proposal.tenant_id)
            if status is not None and row.state == "waiting":  # its checks run as the requester
                seal_for_wait(gw.store, gw.auditor, status, row, proposal, ctx.principal, ctx.credentials)
            found.append((call_id, spec, row))
        return found, refused

    def wait(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        principal_of(state, runtime)  # someone of another tenant is refused before anything is read
        thread = thread_id(config)
        writer = get_stream_writer()
        ctx = context_of(runtime)  # the request's own principal and credentials, never the checkpoint's
        found, refused = rows(state, thread, ctx)
        if refused or any(not row.final for _, _, row in found):
            if state.get("status") != "waiting":
                for _, _, row in found:
                    writer({"toolgate_wait": row.facts()})
                return {"status": "waiting"}  # checkpointed first; the next pass sleeps
            interrupt({"toolgate": {"waits": [row.facts() for _, _, row in found]}})
            found, refused = rows(state, thread, ctx)  # a wake carries nothing: read the store again
            if refused or any(not row.final for _, _, row in found):
                for _, _, row in found:  # once per wake: the progress the worker recorded
                    writer({"toolgate_wait": row.facts()})
                return {}
        originals = {m.tool_call_id: m.id for m in state.get("messages", []) if isinstance(m, ToolMessage)}
        messages = []
        for call_id, spec, row in found:
            if call_id in originals:
                messages.append(_summary(gw, call_id, spec, row, originals[call_id]))
            forget(gw.store, gw.registry, row)  # the wait is over: no sealed credentials outlive it
            if gw.store.waits.resume(row.operation_key):
                gw.auditor.record(
                    "wait.resumed", "completed", code=row.outcome, operation_key=row.operation_key,
                    call_id=call_id, thread_id=thread, tool=spec.name, tenant_id=row.tenant_id,
                    detail={"checks": row.checks, "job_status": row.last_status},
                )  # fmt: skip
            writer({"toolgate_wait": {**row.facts(), "state": "resumed"}})
        # the job's time was the job's: the task's autonomous running time starts again, as after a decision
        deadline = iso(gw.store.now() + timedelta(seconds=context_of(runtime).deadline_s))
        return {"messages": messages, "status": "running", "deadline_at": deadline}

    return wait


__all__ = ["INVALID", "after_wait", "make_after_execute", "make_wait_node", "waited_calls"]
