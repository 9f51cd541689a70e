"""The proposal node: each authorized write becomes an immutable proposal in the store.

The operation key is made here, once, from tenant, thread, tool and canonical arguments, and
kept in checkpointed state. The requesting user's forwarded credentials that the tool declares
are sealed for the write's execution here too (`toolgate.graph.delivery.delegation`). Re-running this
node (after a crash) finds the same rows: the proposal id is derived from the key and the insert
is idempotent.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate import telemetry
from toolgate.graph.context import Context
from toolgate.graph.delivery.handler_scope import keep_for_write
from toolgate.graph.gateway import Gateway
from toolgate.graph.nodes._common import accepted_event, context_of, principal_of, thread_id
from toolgate.graph.nodes.response_audit import pending_response
from toolgate.graph.review.proposals import draft_proposal, requester_words, store_proposal
from toolgate.graph.state import CallRecord, GatewayState
from toolgate.graph.waits.delegation import keep_for_wait


def make_proposal_node(gw: Gateway) -> Any:
    """Build the ``proposal`` node."""

    def proposal(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        principal = principal_of(state, runtime)
        ctx = context_of(runtime)
        task = thread_id(config)
        calls = state.get("calls", {})
        records: dict[str, CallRecord] = {}
        awaiting: list[str] = []
        trace_id = telemetry.audit_trace_id(ctx.trace_id, state.get("trace"))
        words = requester_words(state.get("messages", []))
        waiting = pending_response(gw, state, runtime, config)  # linked with the first proposal
        for call_id in state.get("turn_calls", []):
            record = calls[call_id]
            if record.get("phase") != "write":
                continue
            spec = gw.registry.get_for(record["tool"], principal.tenant_id)  # the tenant's own, if any
            assert spec is not None
            draft = draft_proposal(
                gw,
                spec,
                tenant_id=principal.tenant_id,
                requester_id=principal.user_id,
                thread_id=task,
                call_id=call_id,
                arguments=record["arguments"],
                trace_id=trace_id,
                requester_text=words,
            )
            stored, operation, _ = store_proposal(
                gw,
                spec,
                draft,
                actor=principal.user_id,
                audit={"request_id": ctx.request_id, "trace_id": trace_id},
                before=waiting.take(),
                accepted=accepted_event(
                    gw.auditor,
                    principal,
                    record,
                    spec,
                    {"thread_id": task, "request_id": ctx.request_id, "trace_id": trace_id},
                ),
            )
            if operation.status == "pending_approval" and stored.requester_id == principal.user_id:
                keep_for_write(gw.store, spec, stored, ctx.credentials)  # the requester's own, sealed
                keep_for_wait(gw.store, gw.registry, spec, stored, ctx.credentials)  # for its job's wait
            key = stored.operation_key
            records[call_id] = CallRecord(
                **{**record, "phase": "proposed", "operation_key": key, "proposal_id": stored.proposal_id}
            )
            if operation.status == "pending_approval":
                awaiting.append(call_id)
        waiting.link_alone(gw.auditor)  # no write of the turn left (never so after dispatch)
        return {
            **waiting.update(),
            "calls": records,
            "awaiting": awaiting,
            "status": "awaiting_approval" if awaiting else "running",
        }

    return proposal


__all__ = ["make_proposal_node"]
