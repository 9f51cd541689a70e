"""The execute node: runs this turn's reads and delivers its approved writes, once each.

Nothing runs because checkpointed state says so. Besides the seal checked before this node, each
call is judged again from trusted sources (the authority's second checkpoint,
`toolgate.policy.authority.Authority.at_execute`; a refusal is answered and audited here, like
one of dispatch; a read's ownership is looked up in front of its handler, in the handler's hop to
loaded code) and then run on its own (`toolgate.graph.nodes.execute_calls`). This node owns
the turn: it picks up a write's replacement proposal, batches the runnable calls under the
context's concurrency and deadline, answers a call still running when the batch deadline passes,
and records what is done. While every write of the turn still awaits a decision, the thread goes
back to waiting instead of reporting.
"""

from __future__ import annotations

from datetime import datetime, timedelta
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
from toolgate.graph.nodes._common import (
    accepted_event,
    context_of,
    principal_of,
    thread_id,
)
from toolgate.graph.nodes.batch import partition, run_batch
from toolgate.graph.nodes.execute_calls import refused_call, run_read, run_write
from toolgate.graph.nodes.response_audit import pending_response
from toolgate.graph.review.edits import current_write
from toolgate.graph.state import CallRecord, GatewayState, Outcome
from toolgate.policy.authority import RecordedCall
from toolgate.store.records import OperationRecord


def make_execute_node(gw: Gateway) -> Any:
    """Build the ``execute`` node."""

    def execute(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        principal = principal_of(state, runtime)
        ctx = context_of(runtime)
        calls = state.get("calls", {})
        records: dict[str, CallRecord] = {}
        read: dict[str, OperationRecord] = {}  # operations this step already read, by key
        store_time: datetime | None = None  # the store's time, read with this step's first operation

        def operation(key: str) -> OperationRecord | None:
            nonlocal store_time
            if store_time is not None:
                return gw.store.operations.get(key)
            found, store_time = gw.store.operations.get_at(key)
            return found

        def store_now() -> datetime:
            """This step's one reading of the store's clock: the one its first operation read
            brought, else read now."""
            nonlocal store_time
            if store_time is None:
                store_time = gw.store.now()
            return store_time

        for call_id in state.get("turn_calls", []):
            record = calls[call_id]
            proposed = record.get("phase") == "proposed"
            found = current_write(gw, record["proposal_id"], operation) if proposed else None
            latest = found[0] if found is not None else None
            if found is not None and found[1] is not None:
                read[found[1].operation_key] = found[1]
            if latest is not None and latest.proposal_id != record["proposal_id"]:
                records[call_id] = CallRecord(
                    **{**record, "operation_key": latest.operation_key, "proposal_id": latest.proposal_id}
                )
        turn = [records.get(c, calls[c]) for c in state.get("turn_calls", [])]
        writes = [c for c in turn if c.get("phase") == "proposed"]
        now: datetime | None = None  # this step's one reading of the store's clock (with its first operation)
        judged: dict[str, OperationRecord] = {}  # each write's operation with its expiry judged at `now`
        if writes:
            statuses = []
            for record in writes:
                op = read.get(record["operation_key"]) or operation(record["operation_key"])
                now = store_now()
                if op is not None:
                    op = judged[op.operation_key] = gw.executor.expire_if_due(op, now=now)
                statuses.append(op.status if op else "missing")
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
        waiting = pending_response(gw, state, runtime, config)  # linked with the first read's events
        release = state.get("release") or gw.registry.release
        model_span_ref = state.get("trace") or []
        if telemetry.langsmith_enabled():  # LangSmith run metadata; nothing is sent otherwise
            telemetry.annotate_langsmith_run(
                release, [r["operation_key"] for r in turn if r.get("operation_key")]
            )

        def run(record: CallRecord) -> tuple[ToolMessage, Outcome, bool]:
            traced = {**common, "trace_id": telemetry.audit_trace_id(ctx.trace_id)}
            read = record.get("phase") == "read"
            verdict = gw.authority.at_execute(
                principal,
                RecordedCall(
                    call_id=record["call_id"],
                    tool=record.get("tool", ""),
                    read=read,
                    arguments=record.get("arguments", {}),
                    operation_key=record.get("operation_key"),
                    proposal_id=record.get("proposal_id"),
                ),
                thread_id=thread_id(config),
                proposal=None if read else gw.executor.proposal(record.get("proposal_id", "")),
                defer_ownership=read,  # looked up in front of the handler, in its hop (`run_read`)
            )
            spec = verdict.spec
            if verdict.rejection is not None or spec is None:
                assert verdict.rejection is not None  # a call of no tool is always refused
                accepted = (
                    accepted_event(gw.auditor, principal, record, spec, traced)
                    if read and spec is not None and not spec.is_write
                    else None
                )
                return refused_call(gw, record, principal, verdict.rejection, common, accepted, waiting)
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
                    result = run_read(
                        gw,
                        spec,
                        record,
                        principal,
                        ctx,
                        traced,
                        runtime.stream_writer,
                        waiting=waiting,
                        ownership=verdict.ownership,
                        refusal_fields=common,
                    )
                else:
                    key = record.get("operation_key") or ""
                    result = run_write(gw, spec, record, ctx, span, operation=judged.get(key), now=now)
                span.set_result_bytes(len(str(result[0].content).encode()))
                outcome = result[1]
                if span.outcome is None:
                    span.set_outcome(outcome["status"], error_kind=outcome.get("detail") or None)
                return result

        lanes = partition(gw.registry, runnable)
        results = run_batch(
            lanes, run, max_concurrency=ctx.max_parallel_calls, deadline_s=ctx.batch_deadline_s
        )
        waiting.link_alone(gw.auditor)  # no read's append took it (none finished in time)
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
            **waiting.update(),
            "messages": messages,
            "calls": records,
            "outcomes": outcomes,
            "awaiting": [],
            "status": "running",
        }
        if now is not None:
            # a human decision restarts the task's autonomous running time (from this step's start)
            update["deadline_at"] = iso(now + timedelta(seconds=ctx.deadline_s))
        return update

    return execute


__all__ = ["make_execute_node"]
