"""Running one call of the turn: a read under its limits, a write delivered once, each answered.

A read runs through `Executor.run_read`; a write goes through `Executor.deliver`, which
re-verifies the approval records, claims the operation atomically and returns the stored result
to any duplicate delivery. An unknown outcome is reconciled at once and delivered again only when
the effect is proven absent. Every call gets its own `ToolMessage` and `Outcome`, a write's stated
from the store's record (``AUTHORITATIVE`` also words the final answer), whatever happened to the
other calls of the batch. Kept apart from the node, which decides which calls of the turn run and
how they are batched.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from langchain_core.messages import ToolMessage

from toolgate import telemetry
from toolgate.errors import ToolExecutionError
from toolgate.graph.context import Context
from toolgate.graph.delivery.recovery import reconciled_or_error
from toolgate.graph.delivery.result import Delivery
from toolgate.graph.delivery.streamed_output import OutputStream
from toolgate.graph.gateway import Gateway
from toolgate.graph.messages import provenance, rejection_message, result_message, status_message
from toolgate.graph.nodes._common import accepted_event
from toolgate.graph.nodes.response_audit import PendingResponse
from toolgate.graph.state import CallRecord, Outcome
from toolgate.policy.admission import Overloaded, admitted
from toolgate.policy.authorization import OwnershipLookups, OwnershipRefused
from toolgate.policy.decisions import Rejection
from toolgate.policy.principal import Principal
from toolgate.store.audit import audit_call_id
from toolgate.store.audit_records import AuditEventIn
from toolgate.store.records import OperationRecord
from toolgate.tools.spec import ToolSpec

AUTHORITATIVE = {"succeeded": "completed"}


def delivery_message(call_id: str, spec: ToolSpec, delivery: Delivery) -> ToolMessage:
    """The model-facing result of one write delivery, stated from the store's record."""
    facts: dict[str, Any] = {
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
    if status == "failed":  # the message may be the tool's own
        facts = {**facts, "provenance": provenance(spec.name, spec.version)}
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
    settled = reconciled_or_error(gw.executor, delivery.operation_key, delays=ctx.reconcile_delays)
    if settled.status == "approved":
        return gw.executor.deliver(
            delivery.operation_key,
            worker_id=ctx.worker_id,
            lease_s=ctx.claim_lease_s,
            wait_s=ctx.duplicate_wait_s,
            call_id=call_id,
        )
    op = gw.store.operations.get(delivery.operation_key)
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


def own_credentials(
    gw: Gateway, spec: ToolSpec, principal: Principal, ctx: Context, common: dict[str, Any]
) -> dict[str, str]:
    """The request's forwarded credentials when its authenticated principal is the thread's own
    (as for a wait's checks). A reviewer resuming the thread (a read of the turn runs after the
    write's approval) never lends theirs: withheld, audited ``delegation.refused`` with code
    ``not_requester``; the read runs with none."""
    acting = ctx.principal
    if acting is not None and (acting.user_id, acting.tenant_id) == (principal.user_id, principal.tenant_id):
        return ctx.credentials
    if spec.forwarded_credentials and ctx.credentials:
        gw.auditor.record(
            "delegation.refused",
            "refused",
            user_id=acting.user_id if acting else None,
            code="not_requester",
            tool=spec.name,
            detail={"reason": "forwarded credentials of someone other than the requester are not used"},
            **common,
        )
    return {}


def run_read(
    gw: Gateway,
    spec: ToolSpec,
    record: CallRecord,
    principal: Principal,
    ctx: Context,
    common: dict[str, Any],
    writer: Callable[[Any], None] | None = None,
    *,
    waiting: PendingResponse | None = None,
    ownership: OwnershipLookups | None = None,
    refusal_fields: dict[str, Any] | None = None,
) -> tuple[ToolMessage, Outcome, bool]:
    """Run one authorized read under its limits; answer it, and audit its acceptance and outcome
    in one append (after the model turn's event ``waiting``, if no other append took it).
    ``writer`` (the node's custom stream) receives the chunks a streaming handler
    yields, bounded and redacted; the `ToolMessage` is the bounded result either way.
    ``ownership``: the lookups `toolgate.policy.authority.Authority.at_execute` left to run in
    front of the handler; their refusal is answered as that judgement's would be
    (`refused_call`, with ``refusal_fields``: the step's audit fields outside the tool span)."""
    call_id = record["call_id"]
    appends = waiting or PendingResponse(None)
    accepted = accepted_event(gw.auditor, principal, record, spec, common)
    stream = (
        OutputStream(writer, call_id=call_id, tool=spec.name, max_bytes=spec.max_output_bytes)
        if writer is not None
        else None
    )
    try:
        with admitted(gw.auditor, "tool", call_id=call_id, tool=spec.name, **common):
            data = gw.executor.run_read(
                spec,
                record["arguments"],
                principal,
                own_credentials(gw, spec, principal, ctx, common),
                stream=stream,
                audit_fields={"call_id": audit_call_id(call_id), **common},
                ownership=ownership,
            )
    except OwnershipRefused as exc:  # its lookups in front of the handler refused it: it never ran
        return refused_call(gw, record, principal, exc.rejection, refusal_fields or common, accepted, appends)
    except Overloaded as exc:  # no slot: the handler never ran (audited as admission.overloaded)
        appends.record_all(gw.auditor, [accepted])
        message = status_message(
            call_id, spec.name, "overloaded", str(exc), retryable=True, error_kind=exc.code
        )
        return message, Outcome(call_id=call_id, tool=spec.name, status="failed", detail=exc.code), True
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
        appends.record_all(gw.auditor, [accepted, failed])
        message = status_message(
            call_id,
            spec.name,
            "failed",
            exc.message,
            retryable=exc.kind in ("caller_error", "handler_busy"),  # busy: nothing ran, try later
            error_kind=exc.kind,
            extra={"provenance": provenance(spec.name, spec.version)},  # the message may be the tool's
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
    appends.record_all(gw.auditor, [accepted, completed])
    message = result_message(call_id, spec.name, spec.version, data, max_bytes=spec.max_output_bytes)
    return message, Outcome(call_id=call_id, tool=spec.name, status="completed"), True


def refused_call(
    gw: Gateway,
    record: CallRecord,
    principal: Principal,
    rejection: Rejection,
    common: dict[str, Any],
    accepted: AuditEventIn | None = None,
    waiting: PendingResponse | None = None,
) -> tuple[ToolMessage, Outcome, bool]:
    """Answer a call the authority refused at execute (audited like a dispatch refusal, in one
    append with the read's ``accepted`` event, after the model turn's event ``waiting``)."""
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
    (waiting or PendingResponse(None)).record_all(gw.auditor, [*([accepted] if accepted else []), refused])
    outcome = Outcome(call_id=call_id, tool=tool, status="rejected", detail=rejection.code)
    return rejection_message(call_id, tool, rejection), outcome, True


def write_tenant(gw: Gateway, record: CallRecord) -> str:
    """The tenant a write's slot counts against: its stored proposal's (never the checkpoint's)."""
    proposal = gw.executor.proposal(record.get("proposal_id"))
    return proposal.tenant_id if proposal is not None else ""


def overloaded_delivery(gw: Gateway, operation_key: str, exc: Overloaded) -> Delivery:
    """The answer to a write refused a slot: nothing claimed, the operation as stored (approved)."""
    op = gw.store.operations.get(operation_key)
    return Delivery(
        operation_key=operation_key,
        status=op.status if op is not None else "missing",
        claim="NOT_ATTEMPTED",
        duplicate=False,
        error={"kind": exc.code, "message": str(exc), "retryable": True},
        reason=f"{exc}; still approved",
    )


def run_write(
    gw: Gateway,
    spec: ToolSpec,
    record: CallRecord,
    ctx: Context,
    span: telemetry.ToolSpan | None = None,
    *,
    operation: OperationRecord | None = None,
    now: datetime | None = None,
) -> tuple[ToolMessage, Outcome, bool]:
    """Deliver one proposed write: execute it once if approved, else report its state.
    ``operation`` and ``now``: the operation and the store's time the calling step already read
    (`Executor.deliver` reads neither again)."""
    call_id = record["call_id"]
    try:
        with admitted(gw.auditor, "tool", write_tenant(gw, record), call_id=call_id, tool=spec.name):
            delivery = gw.executor.deliver(
                record["operation_key"],
                worker_id=ctx.worker_id,
                lease_s=ctx.claim_lease_s,
                wait_s=ctx.duplicate_wait_s,
                call_id=call_id,
                operation=operation,
                now=now,
            )
    except Overloaded as exc:  # not claimed: the operation stays approved for a later delivery
        delivery = overloaded_delivery(gw, record["operation_key"], exc)
    if delivery.status == "unknown":
        if span is not None:
            span.set_retry_count(1)  # reconciled; delivered once more only if proven absent
        delivery = settle_unknown(gw, delivery, ctx, call_id)
    if span is not None:
        span.set_duplicate_delivery(delivery.duplicate)
        if delivery.status == "failed":
            span.set_outcome("failed", error_kind=(delivery.error or {}).get("kind", "server_error"))
    if delivery.status == "rejected" and not delivery.reason:
        decisions = gw.store.approvals.for_proposal(record["proposal_id"])
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


__all__ = ["AUTHORITATIVE", "delivery_message", "refused_call", "run_read", "run_write", "settle_unknown"]
