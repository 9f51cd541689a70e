"""The dispatch node: the hostile-input boundary.

Every call the model proposed, parsed or not, is judged: the task's budget and deadline here,
then the release's checks in their fixed order (the authority's first checkpoint,
`toolgate.policy.authority.Authority.at_dispatch`). The first failure is a stable code, one audit
event and a bounded `ToolMessage` with the same call id. Nothing here has an effect on the world.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate import telemetry
from toolgate.clock import parse_iso
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.messages import rejection_message
from toolgate.graph.nodes._bounds import SCREEN_REJECTIONS, too_many_calls
from toolgate.graph.nodes._common import (
    audit_call_id,
    budget_of,
    context_of,
    principal_of,
    thread_id,
)
from toolgate.graph.nodes.response_audit import PendingResponse, pending_response
from toolgate.graph.state import CallRecord, GatewayState
from toolgate.policy.authority import ProposedCall, Verdict
from toolgate.policy.decisions import Rejection
from toolgate.policy.output import redact_text
from toolgate.policy.principal import Principal
from toolgate.store.audit_records import AuditEventIn
from toolgate.tools.spec import ToolSpec

VALIDATION_CODES = frozenset(
    {
        "malformed_arguments",
        "identity_in_arguments",
        "caller_mismatch",
        "schema_invalid",
        "undeclared_argument",
        "semantic_invalid",
        # arguments screening refused (`toolgate.graph.nodes._bounds`): invalid arguments too
        "non_finite_number",
        "number_out_of_range",
        "nul_character",
        "secret_in_arguments",
    }
)
"""Refusals of a call's arguments: each counts against the tool's validation retries."""
ENDS_TASK = frozenset({"budget_exhausted", "loop_detected"})


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


def make_dispatch_node(gw: Gateway) -> Any:
    """Build the ``dispatch`` node."""

    def dispatch(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        principal = principal_of(state, runtime)
        ctx = context_of(runtime)
        budget = budget_of(state, ctx)
        now = gw.store.calibrated_now()  # deadline, deprecation, time-of-day rules: no round trip
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
                "tenant_id": principal.tenant_id,
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
            elif budget["tool_calls"] >= budget["max_tool_calls"] or (
                deadline and now >= parse_iso(deadline)
            ):
                what = "tool call budget" if budget["tool_calls"] >= budget["max_tool_calls"] else "deadline"
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
                verdict = gw.authority.at_dispatch(
                    principal, call, counts=counts, max_identical_calls=budget["max_identical_calls"], now=now
                )
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
                if failures[tool] > budget["max_validation_retries"]:
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
        waiting = pending_response(gw, state, runtime, config)  # the turn's model.response
        turn.flush(waiting)
        return {
            **waiting.update(),
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
        self.events: list[AuditEventIn] = []
        """The turn's refusals, appended together when dispatch ends (`flush`)."""

    def flush(self, waiting: PendingResponse) -> None:
        """Append the turn's audit events: one transaction for the whole turn, the model turn's
        ``model.response`` (``waiting``) first. With none (every call accepted), the event waits
        for the read's or the proposal's append."""
        if self.events:
            waiting.record_all(self.gw.auditor, self.events)
            self.events = []

    def accept(self, call: ProposedCall, spec: ToolSpec, arguments: dict[str, Any]) -> None:
        """Record an accepted call: reads go on to execute, writes to a proposal. Its
        ``call.accepted`` event is appended with what becomes of it (`accepted_event`)."""
        self.records[call.call_id] = CallRecord(
            call_id=call.call_id,
            tool=spec.name,
            turn=self.turn,
            phase="write" if spec.is_write else "read",
            arguments=arguments,
        )

    def reject(self, call: ProposedCall, spec: ToolSpec | None, rejection: Rejection) -> None:
        """Refuse one call: one audit event, one `ToolMessage` with its call id."""
        self.events.append(
            self.gw.auditor.event(
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
        )
        self._answer(call.call_id, spec.name if spec else "unknown", rejection)

    def reject_batch(self, calls: list[ProposedCall], rejection: Rejection) -> None:
        """Refuse many calls with one audit event (a runaway turn costs one event, not thousands)."""
        self.events.append(
            self.gw.auditor.event(
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
                self.events.append(
                    self.gw.auditor.event(
                        "call.rejected",
                        "rejected",
                        user_id=self.principal.user_id,
                        code=stopped.code,
                        call_id=audit_call_id(call_id),
                        tool=record["tool"],
                        **self.common,
                    )
                )
                self._answer(call_id, record["tool"], stopped)

    def _answer(self, call_id: str, tool: str, rejection: Rejection) -> None:
        telemetry.record_rejection(tool, rejection.code, release=self.gw.registry.release)
        self.messages.append(rejection_message(call_id, tool, rejection))
        self.records[call_id] = CallRecord(
            call_id=call_id, tool=tool, turn=self.turn, phase="rejected", code=rejection.code
        )


__all__ = ["Turn", "make_dispatch_node", "proposed_calls"]
