"""The model node: one bounded request to the pinned model with only this principal's tools.

A text answer ends the task turn here too: the node adds the final answer (`respond`) itself.
With no free model-request slot (`toolgate.policy.admission`) it raises `Overloaded` before
writing anything, so the thread's checkpoint before the request is the one a retry continues."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

import langsmith
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from toolgate import telemetry
from toolgate.clock import iso, parse_iso
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.nodes._bounds import screen_response
from toolgate.graph.nodes._common import budget_of, context_of, principal_of, thread_id
from toolgate.graph.nodes.dispatch import proposed_calls
from toolgate.graph.nodes.respond import make_respond_node
from toolgate.graph.nodes.response_audit import defer_response, pending_response, response_event, response_id
from toolgate.graph.nodes.tool_offer import offer_for
from toolgate.graph.seals.updates import apply_update
from toolgate.graph.state import GatewayState
from toolgate.models.malformed_reply import MALFORMED, MalformedReply
from toolgate.policy.admission import admitted
from toolgate.policy.refusals import refusal_in_error, refusal_in_response, refused_update
from toolgate.policy.retry import DEFAULT_RETRY_MATRIX, call_with_retry, classify_model_error
from toolgate.telemetry.tokens import record_usage, usage_of


def invoke_unobserved(runnable: Any, messages: list[Any]) -> Any:
    """Call the model so its raw response reaches no observer before it is screened.

    The raw response may carry what screening removes (secret-looking values, calls that cannot be
    judged). Callbacks would hand it to streaming clients (``messages`` and ``events`` stream
    modes) and tracers as it arrives, so the call runs in an empty context (a bound model merges
    in the node's callbacks from a context variable otherwise), with no callbacks and no tracing;
    clients and traces see the screened message the node returns, exactly what the state keeps."""

    def call() -> Any:
        with langsmith.tracing_context(enabled=False):
            return runnable.invoke(messages, config={"callbacks": [], "tags": ["nostream"]})

    return contextvars.Context().run(call)


def finished_turn_dropped(state: GatewayState) -> dict[str, Any]:
    """At new user input: the thread's records of calls already answered, and their outcomes, are
    dropped from the checkpoint (the store and the audit log keep the history). Kept, a thread's
    state and every checkpoint of it would grow with every call it ever made; the final answer
    reports the outcomes of this task turn."""
    calls = state.get("calls") or {}
    open_calls = {k: v for k, v in calls.items() if v.get("phase") not in ("done", "rejected")}
    update: dict[str, Any] = {}
    if len(open_calls) != len(calls):
        update["calls"] = Overwrite(open_calls)
    if state.get("outcomes"):
        update["outcomes"] = Overwrite({})
    return update


def reused_ids_moved_aside(state: GatewayState, base: Mapping[str, Any], ids: Iterable[str]) -> dict[str, Any]:
    """When a model turn uses a call id again that an earlier call of the task still holds, the
    earlier call's record, its outcome and its place in ``awaiting`` move to ``<id>#<n>`` (the
    first such key not taken), keeping the ``call_id`` its answer carried.

    Call ids are the provider's: some number them per response (``call_0`` in every turn), and a
    call without one is named by its place in the turn. Kept under one key, the new call's record
    replaced the earlier one, so the earlier call vanished from the final answer, and until the
    new call settled clients read the earlier call's outcome as the new call's. ``base`` is the
    update made so far (`finished_turn_dropped`'s rewrite of ``calls`` and ``outcomes``, if any)."""

    def held(key: str) -> Mapping[str, Any]:
        written = base.get(key)
        value = written.value if isinstance(written, Overwrite) else state.get(key)
        return value if isinstance(value, Mapping) else {}

    calls, outcomes = held("calls"), held("outcomes")
    new_ids = list(dict.fromkeys(ids))
    reused = [call_id for call_id in new_ids if call_id in calls or call_id in outcomes]
    if not reused:
        return {}
    taken = {*calls, *outcomes, *new_ids}
    aside: dict[str, str] = {}
    for call_id in reused:
        n = 1
        while f"{call_id}#{n}" in taken:
            n += 1
        aside[call_id] = f"{call_id}#{n}"
        taken.add(aside[call_id])
    update: dict[str, Any] = {"calls": Overwrite({aside.get(k, k): v for k, v in calls.items()})}
    if outcomes:
        update["outcomes"] = Overwrite({aside.get(k, k): v for k, v in outcomes.items()})
    awaiting = state.get("awaiting") or []
    if any(call_id in aside for call_id in awaiting):
        update["awaiting"] = [aside.get(call_id, call_id) for call_id in awaiting]
    return update


def make_model_node(gw: Gateway) -> Any:
    """Build the ``model`` node.

    What depends only on the gateway's model (its name for spans and metrics, whether it takes a
    forced tool choice) is read once here, not at every turn: the gateway is frozen, and a gateway
    with another model (`dataclasses.replace`) builds its own node."""
    model_label = telemetry.model_name(gw.model)
    can_force = gw.can_force_tools

    def model(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        history = state.get("messages", [])
        new_turn = bool(history) and isinstance(history[-1], HumanMessage)
        principal = principal_of(state, runtime, new_turn=new_turn)
        ctx = context_of(runtime)
        budget = budget_of(state, ctx)
        # an earlier turn's event still waiting (no step after it appended anything): its own append
        earlier = pending_response(gw, state, runtime, config)
        earlier.link_alone(gw.auditor)
        base: dict[str, Any] = {
            "principal": principal.to_dict(),
            "release": gw.registry.release,
            **(finished_turn_dropped(state) if new_turn else {}),
            **earlier.update(),
        }
        now = gw.store.calibrated_now()  # deadline, deprecation window: no round trip of its own
        deadline = state.get("deadline_at")
        deadline_at = parse_iso(deadline) if deadline else now + timedelta(seconds=ctx.deadline_s)
        if not deadline:
            base["deadline_at"] = iso(deadline_at)
        elif now >= deadline_at:
            return {**base, "status": "needs_review", "status_reason": "task deadline exhausted"}
        if budget["model_turns"] >= budget["max_model_turns"]:
            return {**base, "status": "needs_review", "status_reason": "model turn budget exhausted"}
        offer = offer_for(  # at most N relevant visible tools, and this step's tool choice
            gw.registry,
            principal,
            state,
            limit=ctx.max_tools_per_request,
            setting=gw.tool_choice,
            new_turn=new_turn,
            last_turn=budget["model_turns"] + 1 >= budget["max_model_turns"],
            now=now,  # the store's clock: a tool past its deprecation window is not offered
            can_force=can_force,
        )
        runnable = gw.model_for(offer.offered, offer.tool_choice)
        if telemetry.langsmith_enabled():  # LangSmith run metadata; nothing is sent otherwise
            keys = [c["operation_key"] for c in state.get("calls", {}).values() if c.get("operation_key")]
            telemetry.annotate_langsmith_run(gw.registry.release, keys)
        messages = [SystemMessage(gw.instructions), *state.get("messages", [])]
        turn = budget["model_turns"] + 1
        with telemetry.model_span(
            model=model_label,
            release=gw.registry.release,
            thread_id=thread_id(config),
            turn=turn,
            # one trace per task: continue from the previous turn's model span, else the caller's trace id
            parent=state.get("trace") or ctx.trace_id,
        ) as span:
            ref = span.trace_ref()
            trace_update = {"trace": ref} if ref else {}
            ids = {
                "user_id": principal.user_id,
                "tenant_id": principal.tenant_id,
                "thread_id": thread_id(config),
                "request_id": ctx.request_id,
                "trace_id": telemetry.audit_trace_id(ctx.trace_id),
            }

            def on_retry(attempt: int, status: int, delay: float) -> None:
                span.add_retry(attempt, status, delay)
                gw.auditor.record(
                    "model.retry",
                    "retrying",
                    code=f"http_{status}",
                    detail={"attempt": attempt, "delay_ms": round(delay * 1000)},
                    **ids,
                )

            # The task deadline is wall-clock in checkpointed state; the retry loop needs monotonic time.
            monotonic_deadline = time.monotonic() + (deadline_at - now).total_seconds()
            try:
                # a slot of this process (and tenant) for the request, or `Overloaded` raised
                # before anything is written: the checkpoint before this call stays the thread's
                with admitted(gw.auditor, "model", **ids):
                    response = call_with_retry(
                        lambda: invoke_unobserved(runnable, messages),
                        deadline=monotonic_deadline,
                        on_retry=on_retry,
                    )
            except Exception as exc:
                refusal = refusal_in_error(exc)
                if refusal is not None:  # the refusal class: explained, ends for review, never retried
                    span.set_outcome("refused", error_kind=refusal.kind)
                    return {**base, **trace_update, **refused_update(gw.auditor, refusal, **ids)}
                if isinstance(exc, MalformedReply):  # answered, but unreadable: never retried
                    code, reason, detail = MALFORMED, f"model reply could not be read ({exc.kind})", {"error": exc.kind}
                else:
                    status = classify_model_error(exc)
                    if status is None:
                        raise  # neither transport, a refusal nor the reply (a bug): never hidden
                    code, reason, detail = f"http_{status}", f"model request failed (HTTP {status})", None
                span.set_outcome("failed", error_kind=code)
                gw.auditor.record("model.failed", "failed", code=code, detail=detail, **ids)
                return {
                    **base,
                    **trace_update,
                    "status": DEFAULT_RETRY_MATRIX.decision("model_transport").fallback,
                    "status_reason": reason,
                }
            if not isinstance(response, AIMessage):
                response = AIMessage(content=str(getattr(response, "content", response)))
            usage = usage_of(response)  # read before screening: unknown (never 0) when not reported
            record_usage(span, usage, model=model_label, release=gw.registry.release)
            refusal = refusal_in_response(response)  # before screening: the provider's own blocks
            response, screened = screen_response(response, gw.registry, max_calls=ctx.max_calls_per_turn)
            proposed = len(response.tool_calls) + len(response.invalid_tool_calls)
            span.set_response_id(response_id(response))
            span.set_tool_calls(proposed)
            span.set_outcome("refused" if refusal else "completed")
            calling = bool(proposed) and refusal is None
            waiting: dict[str, Any] = {}
            event = response_event(
                gw.auditor,
                response,
                offer,
                turn=turn,
                task=sum(isinstance(m, HumanMessage) for m in history),
                usage=usage,
                ids=ids,
                # linked later, with the next audited step: the time the model answered, kept
                extra={"answered_at": iso(gw.store.calibrated_now())} if calling else None,
            )
            if calling:  # linked with what becomes of its calls (`response_audit`)
                waiting = defer_response(event, thread=thread_id(config))
            else:
                gw.store.audit.append_ahead([event])  # nothing read back: one round trip
        budget["model_turns"] += 1
        if refusal is not None:  # nothing of a refused turn is kept: no call runs, none is proposed
            return {**base, **trace_update, "budget": budget, **refused_update(gw.auditor, refusal, **ids)}
        update = {
            **base,
            **reused_ids_moved_aside(state, base, (call.call_id for call in proposed_calls(response))),
            **trace_update,
            "messages": [response],
            "screened": screened,
            "budget": budget,
            "status": "running",
        }
        if response.tool_calls or response.invalid_tool_calls:
            return {**update, **waiting}
        # A text answer ends the task turn: the final answer is made here, one step (and one
        # checkpoint) fewer than a separate respond node would take.
        final = respond(apply_update(state, update))
        return {**update, **final, "messages": [response, *final["messages"]]}

    respond = make_respond_node(gw)
    return model


__all__ = ["finished_turn_dropped", "make_model_node", "response_id", "reused_ids_moved_aside"]
