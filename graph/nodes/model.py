"""The model node: one bounded request to the pinned model with only this principal's tools."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate.graph.context import Context
from toolgate.graph.deps import Gateway
from toolgate.graph.nodes._bounds import bound_response
from toolgate.graph.nodes._common import budget_of, context_of, principal_of, thread_id
from toolgate.graph.state import GatewayState
from toolgate.store._sql import iso, parse_iso


def response_id(message: AIMessage) -> str | None:
    """Provider response id, for audit correlation without storing the prompt."""
    meta = message.response_metadata or {}
    return str(meta.get("id") or message.id or "") or None


def make_model_node(gw: Gateway) -> Any:
    """Build the ``model`` node."""

    def model(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        principal = principal_of(state, runtime)
        ctx = context_of(runtime)
        budget = budget_of(state)
        base: dict[str, Any] = {"principal": principal.to_dict(), "release": gw.registry.release}
        now = gw.clock()
        deadline = state.get("deadline_at")
        if not deadline:
            base["deadline_at"] = iso(now + timedelta(seconds=ctx.deadline_s))
        elif now >= parse_iso(deadline):
            return {**base, "status": "needs_review", "status_reason": "task deadline exhausted"}
        if budget["model_turns"] >= ctx.max_model_turns:
            return {**base, "status": "needs_review", "status_reason": "model turn budget exhausted"}
        specs = gw.registry.for_principal(principal)
        runnable: Any = gw.model
        if specs:
            kwargs: dict[str, Any] = {"tool_choice": "auto", "strict": True}
            if gw.registry.has_stateful_writes():
                kwargs["parallel_tool_calls"] = False
            runnable = gw.model.bind_tools(gw.registry.openai_tools(specs), **kwargs)
        response = runnable.invoke([SystemMessage(gw.instructions), *state.get("messages", [])])
        if not isinstance(response, AIMessage):
            response = AIMessage(content=str(getattr(response, "content", response)))
        response = bound_response(response)
        gw.auditor.record(
            "model.response",
            "received",
            user_id=principal.user_id,
            response_id=response_id(response),
            thread_id=thread_id(config),
            request_id=ctx.request_id,
            trace_id=ctx.trace_id,
            detail={
                "tools_exposed": len(specs),
                "tool_calls": len(response.tool_calls) + len(response.invalid_tool_calls),
                "turn": budget["model_turns"] + 1,
            },
        )
        budget["model_turns"] += 1
        return {**base, "messages": [response], "budget": budget, "status": "running"}

    return model


__all__ = ["make_model_node", "response_id"]
