"""The execute node: runs this turn's reads and delivers its approved writes, once each.

Nothing runs because checkpointed state says so. Besides the seal checked before this node, each
call is re-judged from trusted sources (`toolgate.graph.nodes.execute_refusals`) and then run on
its own (`toolgate.graph.nodes.execute_calls`). This node owns the turn: it picks up a write's
replacement proposal, batches the runnable calls under the context's concurrency and deadline,
answers a call still running when the batch deadline passes, and records what is done. While
every write of the turn still awaits a decision, the thread goes back to waiting instead of
reporting.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate import telemetry
from toolgate.canonical import canonical_json
from toolgate.clock import iso
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.messages import status_message
from toolgate.graph.nodes._common import accepted_event, context_of, principal_of, thread_id
from toolgate.graph.nodes.batch import partition, run_batch
from toolgate.graph.nodes.execute_calls import run_read, run_write
from toolgate.graph.nodes.execute_refusals import STATE_MISMATCH, read_refusal, refuse_call, write_refusal
from toolgate.graph.review.edits import current_proposal
from toolgate.graph.state import CallRecord, GatewayState, Outcome


def make_execute_node(gw: Gateway) -> Any:
    """Build the ``execute`` node."""

    def execute(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        principal = principal_of(state, runtime)
        ctx = context_of(runtime)
        calls = state.get("calls", {})
        records: dict[str, CallRecord] = {}
        for call_id in state.get("turn_calls", []):
            record = calls[call_id]
            latest = (
                current_proposal(gw, record["proposal_id"]) if record.get("phase") == "proposed" else None
            )
            if latest is not None and latest.proposal_id != record["proposal_id"]:
                records[call_id] = CallRecord(
                    **{**record, "operation_key": latest.operation_key, "proposal_id": latest.proposal_id}
                )
        turn = [records.get(c, calls[c]) for c in state.get("turn_calls", [])]
        writes = [c for c in turn if c.get("phase") == "proposed"]
        if writes:
            statuses = []
            for record in writes:
                op = gw.store.operations.get(record["operation_key"])
                statuses.append(gw.executor.expire_if_due(op).status if op else "missing")
            if all(s == "pending_approval" for s in statuses):
                return {
                    "calls": records,
                    "awaiting": [c["call_id"] for c in writes],
                    "status": "awaiting_approval",
                }
        messages: list[ToolMessage] = []
        outcomes: dict[str, Outcome] = {}
        common = {
            "thread_id": thread_id(config),
            "request_id": ctx.request_id,
            "trace_id": ctx.trace_id,
            "tenant_id": principal.tenant_id,
        }
        runnable = [r for r in turn if r.get("phase") in ("read", "proposed")]
        release = state.get("release") or gw.registry.release
        model_span_ref = state.get("trace") or []
        if telemetry.langsmith_enabled():  # LangSmith run metadata; nothing is sent otherwise
            telemetry.annotate_langsmith_run(
                release, [r["operation_key"] for r in turn if r.get("operation_key")]
            )

        def run(record: CallRecord) -> tuple[ToolMessage, Outcome, bool]:
            traced = {**common, "trace_id": telemetry.audit_trace_id(ctx.trace_id)}
            spec = gw.registry.get_for(
                record.get("tool", ""), principal.tenant_id
            )  # the tenant's own, if any
            read = record.get("phase") == "read"
            refusal = (
                read_refusal(gw, spec, record, principal)
                if read
                else write_refusal(gw, spec, record, principal, thread_id(config))
            )
            if refusal is not None or spec is None:
                accepted = (
                    accepted_event(gw.auditor, principal, record, spec, traced)
                    if read and spec is not None and not spec.is_write
                    else None
                )
                return refuse_call(gw, record, principal, refusal or STATE_MISMATCH, common, accepted)
            # run_batch may use worker threads, which do not inherit the OpenTelemetry context:
            # link to this turn's model span (another node invocation) inside the worker itself.
            with (
                telemetry.link_parent(*model_span_ref),
                telemetry.tool_span(
                    tool=spec.name,
                    call_id=record["call_id"],
                    release=release,
                    operation_key=record.get("operation_key"),
                    kind="read" if read else "write",
                    who=telemetry.ToolCaller(
                        spec.version,
                        gw.auditor.actor(principal.user_id),  # the audit log's hash, never the raw id
                        principal.tenant_id,
                        len(canonical_json(record.get("arguments", {})).encode()),
                    ),
                ) as span,
            ):
                if read:
                    result = run_read(gw, spec, record, principal, ctx, traced)
                else:
                    result = run_write(gw, spec, record, ctx, span)
                span.set_result_bytes(len(str(result[0].content).encode()))
                outcome = result[1]
                if span.outcome is None:
                    span.set_outcome(outcome["status"], error_kind=outcome.get("detail") or None)
                return result

        lanes = partition(gw.registry, runnable)
        results = run_batch(
            lanes, run, max_concurrency=ctx.max_parallel_calls, deadline_s=ctx.batch_deadline_s
        )
        finished = len(results)
        for record in runnable:
            call_id = record["call_id"]
            if call_id not in results:
                message = status_message(
                    call_id,
                    record["tool"],
                    "in_progress",
                    "Still running when the batch deadline passed; its outcome will be recorded once. Do not retry.",
                    retryable=False,
                    error_kind="batch_deadline",
                    extra={"batch": {"size": len(runnable), "completed": finished, "partial": True}},
                )
                messages.append(message)
                outcomes[call_id] = Outcome(
                    call_id=call_id,
                    tool=record["tool"],
                    status="in_progress",
                    operation_key=record.get("operation_key", ""),
                    proposal_id=record.get("proposal_id", ""),
                )
                continue
            message, outcome, done = results[call_id]
            messages.append(message)
            outcomes[call_id] = outcome
            if done:
                records[call_id] = CallRecord(**{**record, "phase": "done"})
        update: dict[str, Any] = {
            "messages": messages,
            "calls": records,
            "outcomes": outcomes,
            "awaiting": [],
            "status": "running",
        }
        if writes:
            # a human decision restarts the task's autonomous running time
            update["deadline_at"] = iso(gw.store.now() + timedelta(seconds=ctx.deadline_s))
        return update

    return execute


__all__ = ["make_execute_node"]
