"""The dispatch node: the hostile-input boundary. Every call the model proposed, valid or not,
is judged here, in order: budget, registry lookup, arguments, scopes, resource ownership under
the authenticated tenant, then business policy. A refusal is a stable code, one audit event and
a `ToolMessage` with the same call id; nothing here has a side effect on the world.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from pydantic import ValidationError

from toolgate.canonical import digest
from toolgate.graph.context import Context
from toolgate.graph.deps import Gateway
from toolgate.graph.messages import rejection_message
from toolgate.graph.nodes._common import audit_projection, budget_of, context_of, principal_of, thread_id
from toolgate.graph.state import CallRecord, GatewayState
from toolgate.policy.authorization import check_resource, check_scopes
from toolgate.policy.decisions import Rejection
from toolgate.policy.output import redact_text
from toolgate.policy.principal import Principal
from toolgate.tools.spec import ToolSpec

MAX_ERRORS_SHOWN = 5


@dataclass(frozen=True)
class ProposedCall:
    """One call as the model emitted it, before any judgement."""

    call_id: str
    name: str
    args: Any
    parse_error: str | None


def proposed_calls(message: AIMessage) -> list[ProposedCall]:
    """Every call in the response: parsed ``tool_calls`` and unparseable ``invalid_tool_calls``."""
    calls = [
        ProposedCall(
            str(tc.get("id") or f"call_missing_{i}"), str(tc.get("name") or ""), tc.get("args"), None
        )
        for i, tc in enumerate(message.tool_calls)
    ]
    offset = len(calls)
    for i, itc in enumerate(message.invalid_tool_calls):
        calls.append(
            ProposedCall(
                str(itc.get("id") or f"call_missing_{offset + i}"),
                str(itc.get("name") or ""),
                itc.get("args"),
                str(itc.get("error") or "arguments are not valid JSON"),
            )
        )
    return calls


def describe_validation_error(exc: ValidationError) -> str:
    """Field path and constraint for each problem, never the input values or a stack trace."""
    problems = [
        f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}"
        for err in exc.errors(include_url=False, include_input=False)
    ]
    more = f" (+{len(problems) - MAX_ERRORS_SHOWN} more)" if len(problems) > MAX_ERRORS_SHOWN else ""
    return "Invalid arguments: " + "; ".join(problems[:MAX_ERRORS_SHOWN]) + more


def judge(
    gw: Gateway, principal: Principal, call: ProposedCall
) -> tuple[ToolSpec | None, dict[str, Any], Rejection | None]:
    """Judge one call; returns its spec, validated canonical arguments, or the first rejection."""
    spec = gw.registry.get(call.name)
    if spec is None:
        suggestion = gw.registry.suggest(call.name, principal)
        return (
            None,
            {},
            Rejection(
                code="unknown_tool",
                message="No tool with that name is available.",
                retryable=True,
                suggestion=f"did you mean {suggestion!r}?" if suggestion else None,
            ),
        )
    refused = check_scopes(spec, principal)
    if refused:
        return spec, {}, refused
    if call.parse_error is not None or not isinstance(call.args, dict):
        return (
            spec,
            {},
            Rejection(
                code="malformed_arguments",
                message="Arguments must be one JSON object matching the tool schema.",
                retryable=True,
            ),
        )
    try:
        validated = spec.args_model.model_validate(call.args)
    except ValidationError as exc:
        return (
            spec,
            {},
            Rejection(code="schema_invalid", message=describe_validation_error(exc), retryable=True),
        )
    arguments = validated.model_dump(mode="json")
    refused = check_resource(spec, principal, arguments, gw.registry.resolver)
    if refused:
        return spec, arguments, refused
    decision = gw.policy.evaluate(spec.name, spec.is_write, principal, arguments)
    if decision.kind == "deny":
        assert decision.rejection is not None
        return spec, arguments, decision.rejection
    return spec, arguments, None


def make_dispatch_node(gw: Gateway) -> Any:
    """Build the ``dispatch`` node."""

    def dispatch(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        principal = principal_of(state, runtime)
        ctx = context_of(runtime)
        budget = budget_of(state)
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        messages: list[ToolMessage] = []
        records: dict[str, CallRecord] = {}
        status: dict[str, Any] = {}
        common = {"thread_id": thread_id(config), "request_id": ctx.request_id, "trace_id": ctx.trace_id}
        for call in proposed_calls(last):
            if budget["tool_calls"] >= ctx.max_tool_calls:
                spec = gw.registry.get(call.name)
                arguments: dict[str, Any] = {}
                rejection: Rejection | None = Rejection(
                    code="budget_exhausted",
                    retryable=False,
                    message="The tool call budget of this task is exhausted; a person will review the task.",
                )
                status = {"status": "needs_review", "status_reason": "tool call budget exhausted"}
            else:
                budget["tool_calls"] += 1
                spec, arguments, rejection = judge(gw, principal, call)
            tool = spec.name if spec else "unknown"
            if rejection is not None:
                gw.auditor.record(
                    "call.rejected",
                    "rejected",
                    user_id=principal.user_id,
                    code=rejection.code,
                    call_id=call.call_id,
                    tool=spec.name if spec else None,
                    handler_revision=spec.handler_revision if spec else None,
                    detail={
                        "message": redact_text(rejection.message)[:300],
                        "rule_id": rejection.rule_id,
                        "requested_name": redact_text(call.name)[:64] if spec is None else None,
                    },
                    **common,
                )
                messages.append(rejection_message(call.call_id, tool, rejection))
                records[call.call_id] = CallRecord(
                    call_id=call.call_id,
                    tool=tool,
                    turn=budget["model_turns"],
                    phase="rejected",
                    code=rejection.code,
                )
                continue
            assert spec is not None
            gw.auditor.record(
                "call.accepted",
                "proposal_required" if spec.is_write else "allowed",
                user_id=principal.user_id,
                call_id=call.call_id,
                tool=spec.name,
                handler_revision=spec.handler_revision,
                detail={
                    "arguments": audit_projection(arguments, spec.audit_fields),
                    "arguments_sha256": digest(arguments),
                },
                **common,
            )
            records[call.call_id] = CallRecord(
                call_id=call.call_id,
                tool=spec.name,
                turn=budget["model_turns"],
                phase="write" if spec.is_write else "read",
                arguments=arguments,
            )
        return {
            "messages": messages,
            "calls": records,
            "turn_calls": list(records),
            "budget": budget,
            **status,
        }

    return dispatch


__all__ = ["ProposedCall", "describe_validation_error", "judge", "make_dispatch_node", "proposed_calls"]
