"""The execute node: runs this turn's reads and delivers its approved writes, once each.

Nothing runs because checkpointed state says so. Besides the seal checked before this node, each
call is re-judged from trusted sources: a read runs only for a tool that is a read in the loaded
release and that this principal may use on this resource now; a write runs only through an
operation whose proposal in the store belongs to this thread, tenant, requester, tool and call.
Writes go through `Executor.deliver`, which re-verifies the approval records, claims the
operation atomically and returns the stored result to any duplicate delivery. Every call of the
turn gets its own `ToolMessage`, whatever happened to the others. While every write of the turn
still awaits a decision, the thread goes back to waiting instead of reporting.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate import telemetry
from toolgate.clock import iso
from toolgate.errors import ToolExecutionError
from toolgate.graph.batch import partition, run_batch
from toolgate.graph.context import Context
from toolgate.graph.edits import current_proposal
from toolgate.graph.execution import Delivery
from toolgate.graph.gateway import Gateway
from toolgate.graph.messages import rejection_message, result_message, status_message
from toolgate.graph.nodes._common import accepted_event, audit_call_id, context_of, principal_of, thread_id
from toolgate.graph.recovery import reconcile
from toolgate.graph.state import CallRecord, GatewayState, Outcome
from toolgate.policy.authorization import check_resource, check_scopes
from toolgate.policy.decisions import Rejection
from toolgate.policy.principal import Principal
from toolgate.store.records import AuditEventIn
from toolgate.tools.spec import ToolSpec

AUTHORITATIVE = {"succeeded": "completed"}
STATE_MISMATCH = Rejection(
    code="state_mismatch",
    message="Not run: this call does not match the gateway's own records for this task.",
    retryable=False,
)


def delivery_message(call_id: str, spec: ToolSpec, delivery: Delivery) -> ToolMessage:
    """The model-facing result of one write delivery, stated from the store's record."""
    facts = {
        "operation_key": delivery.operation_key,
        "authoritative_status": AUTHORITATIVE.get(delivery.status, delivery.status),
    }
    if delivery.duplicate:
        facts["duplicate_delivery"] = "stored_result_returned"
    status = delivery.status
    if status == "succeeded" and delivery.result is not None:
        return result_message(
            call_id, spec.name, spec.version, delivery.result, max_bytes=spec.max_output_bytes, extra=facts
        )
    error = delivery.error or {}
    texts = {
        "pending_approval": (
            "Not executed: waiting for approval. Tell the user it is pending, not done.",
            None,
        ),
        "rejected": (
            f"Rejected by the reviewer: {delivery.reason or 'no reason given'}. Do not retry.",
            "approval_rejected",
        ),
        "expired": (
            "Not executed: the proposal expired before approval. Do not retry automatically.",
            "approval_expired",
        ),
        "failed": (
            f"The tool failed: {error.get('message', 'unknown error')}",
            error.get("kind", "server_error"),
        ),
        "unknown": ("Outcome unknown; it will be reconciled by the operation key. Do not retry.", "timeout"),
        "dead_lettered": ("Outcome unresolved; a person will confirm it. Do not retry.", "unresolved"),
        "executing": ("Still executing in another worker; the result will be recorded once.", None),
        "approved": (
            f"Not executed: {delivery.reason or 'approval could not be verified'}.",
            error.get("kind", "approval_invalid"),
        ),
    }
    message, kind = texts.get(status, (f"Not executed (status {status}).", "server_error"))
    return status_message(
        call_id,
        spec.name,
        "in_progress" if status == "executing" else status,
        message,
        retryable=False,
        error_kind=kind,
        extra=facts,
    )


def settle_unknown(gw: Gateway, delivery: Delivery, ctx: Context, call_id: str) -> Delivery:
    """Reconcile an unknown outcome right away; deliver once more only if the effect is proven absent."""
    settled = reconcile(gw.executor, delivery.operation_key, delays=ctx.reconcile_delays)
    if settled.status == "approved":
        return gw.executor.deliver(
            delivery.operation_key,
            worker_id=ctx.worker_id,
            lease_s=ctx.claim_lease_s,
            wait_s=ctx.duplicate_wait_s,
            call_id=call_id,
        )
    op = gw.store.get_operation(delivery.operation_key)
    assert op is not None
    return Delivery(
        operation_key=op.operation_key,
        status=op.status,
        claim=delivery.claim,
        duplicate=False,
        result=op.result,
        error=op.error,
        reason=delivery.reason,
    )


def refuse_call(
    gw: Gateway,
    record: CallRecord,
    principal: Principal,
    rejection: Rejection,
    common: dict[str, Any],
    accepted: AuditEventIn | None = None,
) -> tuple[ToolMessage, Outcome, bool]:
    """Answer a call that execute will not run (audited like a dispatch refusal, in one append
    with the read's ``accepted`` event)."""
    call_id, tool = record["call_id"], record.get("tool", "unknown")
    refused = gw.auditor.event(
        "call.rejected",
        "rejected",
        user_id=principal.user_id,
        code=rejection.code,
        call_id=audit_call_id(call_id),
        tool=tool,
        detail={"message": rejection.message[:300], "stage": "execute"},
        **common,
    )
    gw.auditor.record_all([*([accepted] if accepted else []), refused])
    outcome = Outcome(call_id=call_id, tool=tool, status="rejected", detail=rejection.code)
    return rejection_message(call_id, tool, rejection), outcome, True


def read_refusal(
    gw: Gateway, spec: ToolSpec | None, record: CallRecord, principal: Principal
) -> Rejection | None:
    """Why a read recorded in state may not run for ``principal`` now (None: it may)."""
    if spec is None or spec.is_write:
        return STATE_MISMATCH
    return check_scopes(spec, principal) or check_resource(
        spec, principal, record.get("arguments", {}), gw.registry.resolver
    )


def write_refusal(
    gw: Gateway, spec: ToolSpec | None, record: CallRecord, principal: Principal, task: str
) -> Rejection | None:
    """Why a write recorded in state may not be delivered from this thread (None: it may).

    The operation and its proposal are read from the store: they must be this call's, proposed in
    this thread, for this tenant and requester."""
    proposal = gw.executor.proposal(record.get("proposal_id", ""))
    if (
        spec is None
        or not spec.is_write
        or proposal is None
        or proposal.operation_key != record.get("operation_key")
        or proposal.thread_id != task
        or proposal.tenant_id != principal.tenant_id
        or proposal.requester_id != principal.user_id
        or proposal.tool != spec.name
        or proposal.call_id != record.get("call_id")
    ):
        return STATE_MISMATCH
    return None


def run_read(
    gw: Gateway,
    spec: ToolSpec,
    record: CallRecord,
    principal: Principal,
    ctx: Context,
    common: dict[str, Any],
) -> tuple[ToolMessage, Outcome, bool]:
    """Run one authorized read under its limits; answer it, and audit its acceptance and outcome
    in one append."""
    call_id = record["call_id"]
    accepted = accepted_event(gw.auditor, principal, record, spec, common)
    try:
        data = gw.executor.run_read(spec, record["arguments"], principal, ctx.credentials)
    except ToolExecutionError as exc:
        failed = gw.auditor.event(
            "call.failed",
            "failed",
            user_id=principal.user_id,
            code=exc.kind,
            call_id=call_id,
            tool=spec.name,
            handler_revision=spec.handler_revision,
            **common,
        )
        gw.auditor.record_all([accepted, failed])
        message = status_message(
            call_id,
            spec.name,
            "failed",
            exc.message,
            retryable=exc.kind == "caller_error",
            error_kind=exc.kind,
        )
        return message, Outcome(call_id=call_id, tool=spec.name, status="failed", detail=exc.kind), True
    completed = gw.auditor.event(
        "call.completed",
        "completed",
        user_id=principal.user_id,
        call_id=call_id,
        tool=spec.name,
        handler_revision=spec.handler_revision,
        **common,
    )
    gw.auditor.record_all([accepted, completed])
    message = result_message(call_id, spec.name, spec.version, data, max_bytes=spec.max_output_bytes)
    return message, Outcome(call_id=call_id, tool=spec.name, status="completed"), True


def run_write(
    gw: Gateway, spec: ToolSpec, record: CallRecord, ctx: Context, span: telemetry.ToolSpan | None = None
) -> tuple[ToolMessage, Outcome, bool]:
    """Deliver one proposed write: execute it once if approved, else report its state."""
    call_id = record["call_id"]
    delivery = gw.executor.deliver(
        record["operation_key"],
        worker_id=ctx.worker_id,
        lease_s=ctx.claim_lease_s,
        wait_s=ctx.duplicate_wait_s,
        call_id=call_id,
    )
    if delivery.status == "unknown":
        if span is not None:
            span.set_retry_count(1)  # reconciled; delivered once more only if proven absent
        delivery = settle_unknown(gw, delivery, ctx, call_id)
    if span is not None:
        span.set_duplicate_delivery(delivery.duplicate)
        if delivery.status == "failed":
            span.set_outcome("failed", error_kind=(delivery.error or {}).get("kind", "server_error"))
    if delivery.status == "rejected" and not delivery.reason:
        decisions = gw.store.decisions_for(record["proposal_id"])
        reasons = [d.reason for d in decisions if d.decision == "reject"]
        delivery = Delivery(**{**delivery.__dict__, "reason": reasons[0] if reasons else ""})
    outcome = Outcome(
        call_id=call_id,
        tool=spec.name,
        status=AUTHORITATIVE.get(delivery.status, delivery.status),
        operation_key=record["operation_key"],
        proposal_id=record["proposal_id"],
    )
    return delivery_message(call_id, spec, delivery), outcome, delivery.status != "pending_approval"


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
                op = gw.store.get_operation(record["operation_key"])
                statuses.append(gw.executor.expire_if_due(op).status if op else "missing")
            if all(s == "pending_approval" for s in statuses):
                return {
                    "calls": records,
                    "awaiting": [c["call_id"] for c in writes],
                    "status": "awaiting_approval",
                }
        messages: list[ToolMessage] = []
        outcomes: dict[str, Outcome] = {}
        common = {"thread_id": thread_id(config), "request_id": ctx.request_id, "trace_id": ctx.trace_id}
        runnable = [r for r in turn if r.get("phase") in ("read", "proposed")]
        release = state.get("release") or gw.registry.release
        model_span_ref = state.get("trace") or []
        if telemetry.langsmith_enabled():  # LangSmith run metadata; nothing is sent otherwise
            telemetry.annotate_langsmith_run(
                release, [r["operation_key"] for r in turn if r.get("operation_key")]
            )

        def run(record: CallRecord) -> tuple[ToolMessage, Outcome, bool]:
            traced = {**common, "trace_id": telemetry.audit_trace_id(ctx.trace_id)}
            spec = gw.registry.get(record.get("tool", ""))
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
                ) as span,
            ):
                if read:
                    result = run_read(gw, spec, record, principal, ctx, traced)
                else:
                    result = run_write(gw, spec, record, ctx, span)
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


__all__ = ["delivery_message", "make_execute_node"]
