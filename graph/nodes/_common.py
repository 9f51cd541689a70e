"""Helpers the nodes share: the thread's principal, its id, and the current budget."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate.canonical import digest
from toolgate.errors import ConfigurationError
from toolgate.graph.context import Context
from toolgate.graph.state import Budget, CallRecord, GatewayState
from toolgate.policy.authority import acting_principal
from toolgate.policy.principal import Principal
from toolgate.store.audit import Auditor, audit_call_id
from toolgate.store.audit_records import AuditEventIn
from toolgate.tools.spec import ToolSpec, deprecated_detail


def thread_id(config: RunnableConfig) -> str:
    """The LangGraph thread id (the task id of operation keys)."""
    value = (config.get("configurable") or {}).get("thread_id")
    if not value:
        raise ConfigurationError("the toolgate graph needs a thread_id in config['configurable']")
    return str(value)


def context_of(runtime: Runtime[Context]) -> Context:
    """The run's context, or defaults when the caller gave none."""
    return runtime.context if isinstance(runtime.context, Context) else Context()


def principal_of(state: GatewayState, runtime: Runtime[Context], *, new_turn: bool = False) -> Principal:
    """The thread's principal: the first one recorded in state, which later runs cannot replace
    (the authority's rule, `toolgate.policy.authority.acting_principal`, asked with the run's
    authenticated principal)."""
    return acting_principal(state.get("principal"), context_of(runtime).principal, new_turn=new_turn)


def budget_of(state: GatewayState, ctx: Context) -> Budget:
    """The thread's counters and limits: zero counters and the run context's limits for a new
    thread (or one started before threads kept their limits); the thread's own limits after."""
    budget: Mapping[str, Any] = state.get("budget") or {}
    limits = {
        "max_model_turns": ctx.max_model_turns,
        "max_tool_calls": ctx.max_tool_calls,
        "max_identical_calls": ctx.max_identical_calls,
        "max_validation_retries": ctx.max_validation_retries,
    }
    return Budget(
        model_turns=budget.get("model_turns", 0),
        tool_calls=budget.get("tool_calls", 0),
        max_model_turns=budget.get("max_model_turns", limits["max_model_turns"]),
        max_tool_calls=budget.get("max_tool_calls", limits["max_tool_calls"]),
        max_identical_calls=budget.get("max_identical_calls", limits["max_identical_calls"]),
        max_validation_retries=budget.get("max_validation_retries", limits["max_validation_retries"]),
    )


def audit_projection(arguments: dict[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    """The arguments an audit event may hold verbatim (the tool's allowlist)."""
    return {k: arguments[k] for k in sorted(fields) if k in arguments}


def accepted_event(
    auditor: Auditor, principal: Principal, record: CallRecord, spec: ToolSpec, common: dict[str, Any]
) -> AuditEventIn:
    """``call.accepted`` for a call dispatch let through. It is appended with what became of the
    call, in one transaction: a write's with its proposal, a read's with its result or refusal."""
    arguments = record.get("arguments", {})
    return auditor.event(
        "call.accepted",
        "proposal_required" if spec.is_write else "allowed",
        user_id=principal.user_id,
        call_id=audit_call_id(record["call_id"]),
        tool=spec.name,
        handler_revision=spec.handler_revision,
        detail={
            "arguments": audit_projection(arguments, spec.audit_fields),
            "arguments_sha256": digest(arguments),
            **deprecated_detail(spec, auditor.store.now),  # a deprecated tool's call, audited as such
        },
        **({"tenant_id": principal.tenant_id} | common),
    )


__all__ = [
    "accepted_event",
    "audit_call_id",
    "audit_projection",
    "budget_of",
    "context_of",
    "principal_of",
    "thread_id",
]
