"""The proposal node: each authorized write becomes an immutable proposal in the store.

The operation key is made here, once, from tenant, thread, tool and canonical arguments, and
kept in checkpointed state. Re-running this node (after a crash) finds the same rows: the
proposal id is derived from the key and the insert is idempotent.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate.canonical import digest, operation_key, sha256_hex
from toolgate.graph.context import Context
from toolgate.graph.deps import Gateway
from toolgate.graph.nodes._common import audit_projection, context_of, principal_of, thread_id
from toolgate.graph.state import CallRecord, GatewayState
from toolgate.store._sql import iso, utcnow
from toolgate.store.records import ProposalRecord


def make_proposal_node(gw: Gateway) -> Any:
    """Build the ``proposal`` node."""

    def proposal(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        principal = principal_of(state, runtime)
        ctx = context_of(runtime)
        task = thread_id(config)
        calls = state.get("calls", {})
        records: dict[str, CallRecord] = {}
        awaiting: list[str] = []
        for call_id in state.get("turn_calls", []):
            record = calls[call_id]
            if record.get("phase") != "write":
                continue
            spec = gw.registry.get(record["tool"])
            assert spec is not None
            arguments = record["arguments"]
            key = operation_key(
                tenant_id=principal.tenant_id, task_id=task, tool=spec.name, arguments=arguments
            )
            now = utcnow()
            draft = ProposalRecord(
                proposal_id="prop_" + sha256_hex(key)[:24],
                operation_key=key,
                thread_id=task,
                call_id=call_id,
                tool=spec.name,
                tool_version=spec.version,
                handler_revision=spec.handler_revision,
                release=gw.registry.release,
                tenant_id=principal.tenant_id,
                requester_id=principal.user_id,
                arguments=arguments,
                arguments_sha256=digest(arguments),
                digest="",
                risk=spec.risk,
                effect=spec.effect,
                rollback=spec.rollback_text(),
                approval_class=spec.approval.describe(),
                created_at=iso(now),
                expires_at=iso(now + timedelta(minutes=gw.policy.approval_minutes)),
            )
            draft = dataclasses.replace(draft, digest=digest(draft.content()))
            stored, operation, created = gw.store.create_proposal(draft)
            gw.auditor.record(
                "proposal.created" if created else "proposal.reused",
                "pending_approval" if created else operation.status,
                user_id=principal.user_id,
                call_id=call_id,
                proposal_id=stored.proposal_id,
                operation_key=key,
                tool=spec.name,
                handler_revision=spec.handler_revision,
                thread_id=task,
                request_id=ctx.request_id,
                trace_id=ctx.trace_id,
                detail={
                    "digest": stored.digest,
                    "arguments_sha256": stored.arguments_sha256,
                    "risk": spec.risk,
                    "arguments": audit_projection(arguments, spec.audit_fields),
                    "expires_at": stored.expires_at,
                },
            )
            records[call_id] = CallRecord(
                **{**record, "phase": "proposed", "operation_key": key, "proposal_id": stored.proposal_id}
            )
            if operation.status == "pending_approval":
                awaiting.append(call_id)
        return {
            "calls": records,
            "awaiting": awaiting,
            "status": "awaiting_approval" if awaiting else "running",
        }

    return proposal


__all__ = ["make_proposal_node"]
