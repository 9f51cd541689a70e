"""The dispatch node: the hostile-input boundary (seed 000 steps 1-5, chapter §4 and §7).

Every call the model proposed, parsed or not, is judged in a fixed order: task budget and
deadline, registry lookup, exposure to this principal, JSON shape, identity fields, schema,
repetition, resource ownership under the authenticated tenant, inbound rate limit, cross-field
business validation, then policy. The first failure is a stable code, one audit event and a
bounded `ToolMessage` with the same call id. Nothing here has an effect on the world.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from pydantic import ValidationError

from toolgate import telemetry
from toolgate.canonical import canonical_json, digest, sha256_hex
from toolgate.errors import ToolExecutionError
from toolgate.graph.context import Context
from toolgate.graph.deps import Gateway
from toolgate.graph.messages import rejection_message
from toolgate.graph.nodes._bounds import SCREEN_REJECTIONS, too_many_calls
from toolgate.graph.nodes._common import (
    audit_call_id,
    audit_projection,
    budget_of,
    context_of,
    principal_of,
    thread_id,
)
from toolgate.graph.state import CallRecord, GatewayState
from toolgate.policy.authorization import check_resource, check_scopes
from toolgate.policy.decisions import Rejection
from toolgate.policy.identity import identity_keys
from toolgate.policy.output import redact_text
from toolgate.policy.principal import Principal
from toolgate.store._sql import parse_iso
from toolgate.tools.spec import HandlerContext, ToolSpec

MAX_ERRORS_SHOWN = 5
VALIDATION_CODES = frozenset(
    {"malformed_arguments", "identity_in_arguments", "schema_invalid", "semantic_invalid"}
)
ENDS_TASK = frozenset({"budget_exhausted", "loop_detected"})


@dataclass(frozen=True)
class ProposedCall:
    """One call as the model emitted it, before any judgement."""

    call_id: str
    name: str
    args: Any
    parse_error: str | None


@dataclass(frozen=True)
class Verdict:
    """What dispatch decided about one call."""

    spec: ToolSpec | None
    arguments: dict[str, Any]
    rejection: Rejection | None
    fingerprint: str = ""


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
        for err in exc.errors(include_url=False, include_input=False, include_context=False)
    ]
    more = f" (+{len(problems) - MAX_ERRORS_SHOWN} more)" if len(problems) > MAX_ERRORS_SHOWN else ""
    return redact_text("Invalid arguments: " + "; ".join(problems[:MAX_ERRORS_SHOWN]) + more)[:600]


def call_fingerprint(tool: str, arguments: dict[str, Any]) -> str:
    """Identity of a call for loop detection: tool name and canonical arguments."""
    return sha256_hex(canonical_json({"tool": tool, "args": arguments}))[:24]


def judge(
    gw: Gateway,
    principal: Principal,
    call: ProposedCall,
    *,
    ctx: Context,
    counts: dict[str, int],
    now: datetime,
) -> Verdict:
    """Judge one call; the first failing check decides."""
    spec = gw.registry.get(call.name)
    if spec is None:
        suggestion = gw.registry.suggest(call.name, principal)
        return Verdict(
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
        return Verdict(spec, {}, refused)
    if call.parse_error is not None or not isinstance(call.args, dict):
        return Verdict(
            spec,
            {},
            Rejection(
                code="malformed_arguments",
                message="Arguments must be one JSON object matching the tool schema.",
                retryable=True,
            ),
        )
    smuggled = sorted(set(identity_keys(call.args)))
    if smuggled:
        return Verdict(
            spec,
            {},
            Rejection(
                code="identity_in_arguments",
                retryable=False,
                message="Identity and authority come from the signed-in session, never from arguments. "
                f"Remove: {', '.join(redact_text(k)[:40] for k in smuggled[:5])}.",
            ),
        )
    try:
        validated = spec.args_model.model_validate(call.args)
    except ValidationError as exc:
        return Verdict(
            spec, {}, Rejection(code="schema_invalid", message=describe_validation_error(exc), retryable=True)
        )
    arguments = validated.model_dump(mode="json")
    fingerprint = call_fingerprint(spec.name, arguments)
    if not spec.pollable and counts.get(fingerprint, 0) >= ctx.max_identical_calls:
        return Verdict(
            spec,
            arguments,
            Rejection(
                code="loop_detected",
                retryable=False,
                message="This exact call was already made in this task; a person will review the task.",
            ),
            fingerprint,
        )
    refused = check_resource(spec, principal, arguments, gw.registry.resolver)
    if refused:
        return Verdict(spec, arguments, refused, fingerprint)
    refused = gw.rate_limiter.check(principal, spec.name)
    if refused:
        return Verdict(spec, arguments, refused, fingerprint)
    if spec.semantic_check is not None:
        try:
            problem = spec.semantic_check(
                validated, HandlerContext(tenant_id=principal.tenant_id, user_id=principal.user_id)
            )
        except ToolExecutionError as exc:
            problem = exc.message
        if problem:
            rejection = Rejection(code="semantic_invalid", message=redact_text(problem)[:300], retryable=True)
            return Verdict(spec, arguments, rejection, fingerprint)
    decision = gw.policy.evaluate(spec.name, spec.is_write, principal, arguments, now)
    if decision.kind == "deny":
        assert decision.rejection is not None
        return Verdict(spec, arguments, decision.rejection, fingerprint)
    return Verdict(spec, arguments, None, fingerprint)


def make_dispatch_node(gw: Gateway) -> Any:
    """Build the ``dispatch`` node."""

    def dispatch(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        principal = principal_of(state, runtime)
        ctx = context_of(runtime)
        budget = budget_of(state)
        now = gw.store.now()
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        counts = dict(state.get("call_counts", {}))
        failures = dict(state.get("validation_failures", {}))
        deadline = state.get("deadline_at")
        screened = state.get("screened", {})
        turn = Turn(
            gw,
            principal,
            budget["model_turns"],
            {
                "thread_id": thread_id(config),
                "request_id": ctx.request_id,
                "trace_id": telemetry.audit_trace_id(ctx.trace_id, state.get("trace")),
            },
        )
        status: dict[str, Any] = {}
        overflow: list[ProposedCall] = []
        for call in proposed_calls(last):
            code = screened.get(call.call_id)
            if code == "too_many_calls":
                overflow.append(call)
                continue
            if code is not None:
                budget["tool_calls"] += 1
                verdict = Verdict(gw.registry.get(call.name), {}, SCREEN_REJECTIONS[code])
            elif budget["tool_calls"] >= ctx.max_tool_calls or (deadline and now >= parse_iso(deadline)):
                what = "tool call budget" if budget["tool_calls"] >= ctx.max_tool_calls else "deadline"
                verdict = Verdict(
                    gw.registry.get(call.name),
                    {},
                    Rejection(
                        code="budget_exhausted",
                        retryable=False,
                        message=f"The {what} of this task is exhausted; a person will review the task.",
                    ),
                )
                status = {"status": "needs_review", "status_reason": f"task {what} exhausted"}
            else:
                budget["tool_calls"] += 1
                verdict = judge(gw, principal, call, ctx=ctx, counts=counts, now=now)
            spec, rejection = verdict.spec, verdict.rejection
            if verdict.fingerprint and (rejection is None or rejection.code != "loop_detected"):
                counts[verdict.fingerprint] = counts.get(verdict.fingerprint, 0) + 1
            tool = spec.name if spec else "unknown"
            if rejection is None:
                assert spec is not None
                turn.accept(call, spec, verdict.arguments)
                continue
            if rejection.code in VALIDATION_CODES:
                failures[tool] = failures.get(tool, 0) + 1
                if failures[tool] > ctx.max_validation_retries:
                    status = {
                        "status": "needs_review",
                        "status_reason": f"arguments for {tool} stayed invalid after retries",
                    }
            if rejection.code in ENDS_TASK and not status:
                status = {"status": "needs_review", "status_reason": rejection.code.replace("_", " ")}
            turn.reject(call, spec, rejection)
        if overflow:
            turn.reject_batch(overflow, too_many_calls(ctx.max_calls_per_turn))
        if status:
            turn.stop(status["status_reason"])  # every accepted call of the turn is answered, not run
        return {
            "messages": turn.messages,
            "calls": turn.records,
            "turn_calls": list(turn.records),
            "budget": budget,
            "call_counts": counts,
            "validation_failures": failures,
            **status,
        }

    return dispatch


class Turn:
    """What dispatch decided about one model turn: records, answers and audit events."""

    def __init__(self, gw: Gateway, principal: Principal, turn: int, common: dict[str, Any]) -> None:
        self.gw, self.principal, self.turn, self.common = gw, principal, turn, common
        self.messages: list[ToolMessage] = []
        self.records: dict[str, CallRecord] = {}

    def accept(self, call: ProposedCall, spec: ToolSpec, arguments: dict[str, Any]) -> None:
        """Record an accepted call: reads go on to execute, writes to a proposal."""
        self.gw.auditor.record(
            "call.accepted",
            "proposal_required" if spec.is_write else "allowed",
            user_id=self.principal.user_id,
            call_id=audit_call_id(call.call_id),
            tool=spec.name,
            handler_revision=spec.handler_revision,
            detail={
                "arguments": audit_projection(arguments, spec.audit_fields),
                "arguments_sha256": digest(arguments),
            },
            **self.common,
        )
        self.records[call.call_id] = CallRecord(
            call_id=call.call_id,
            tool=spec.name,
            turn=self.turn,
            phase="write" if spec.is_write else "read",
            arguments=arguments,
        )

    def reject(self, call: ProposedCall, spec: ToolSpec | None, rejection: Rejection) -> None:
        """Refuse one call: one audit event, one `ToolMessage` with its call id."""
        self.gw.auditor.record(
            "call.rejected",
            "rejected",
            user_id=self.principal.user_id,
            code=rejection.code,
            call_id=audit_call_id(call.call_id),
            tool=spec.name if spec else None,
            handler_revision=spec.handler_revision if spec else None,
            detail={
                "message": redact_text(rejection.message)[:300],
                "rule_id": rejection.rule_id,
                "requested_name": redact_text(call.name)[:64] if spec is None else None,
            },
            **self.common,
        )
        self._answer(call.call_id, spec.name if spec else "unknown", rejection)

    def reject_batch(self, calls: list[ProposedCall], rejection: Rejection) -> None:
        """Refuse many calls with one audit event (a runaway turn costs one event, not thousands)."""
        self.gw.auditor.record(
            "call.rejected",
            "rejected",
            user_id=self.principal.user_id,
            code=rejection.code,
            detail={
                "calls": len(calls),
                "first_call_id": audit_call_id(calls[0].call_id),
                "message": rejection.message[:300],
            },
            **self.common,
        )
        answer = rejection_message("", "unknown", rejection)  # one answer, copied per call id
        for call in calls:
            self.messages.append(answer.model_copy(update={"tool_call_id": call.call_id}))
            self.records[call.call_id] = CallRecord(
                call_id=call.call_id, tool="unknown", turn=self.turn, phase="rejected", code=rejection.code
            )
        telemetry.record_rejection("unknown", rejection.code, release=self.gw.registry.release)

    def stop(self, reason: str) -> None:
        """The task stops for review: answer every accepted call of the turn instead of running it."""
        stopped = Rejection(
            code="task_stopped",
            message=f"Not run: the task stopped for human review ({reason}).",
            retryable=False,
        )
        for call_id, record in list(self.records.items()):
            if record["phase"] in ("read", "write"):
                self.gw.auditor.record(
                    "call.rejected",
                    "rejected",
                    user_id=self.principal.user_id,
                    code=stopped.code,
                    call_id=audit_call_id(call_id),
                    tool=record["tool"],
                    **self.common,
                )
                self._answer(call_id, record["tool"], stopped)

    def _answer(self, call_id: str, tool: str, rejection: Rejection) -> None:
        telemetry.record_rejection(tool, rejection.code, release=self.gw.registry.release)
        self.messages.append(rejection_message(call_id, tool, rejection))
        self.records[call_id] = CallRecord(
            call_id=call_id, tool=tool, turn=self.turn, phase="rejected", code=rejection.code
        )


__all__ = [
    "ProposedCall",
    "Turn",
    "Verdict",
    "call_fingerprint",
    "describe_validation_error",
    "judge",
    "make_dispatch_node",
    "proposed_calls",
]
