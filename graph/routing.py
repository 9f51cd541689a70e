"""Where the graph goes after each node; pure functions of the checkpointed state.

They also run on state a client rewrote (``update_state`` routes from the named node), so they
never fail on it: a wrong route only leads to a node that checks the seal first.

No ``from __future__ import annotations`` here (see `toolgate.graph.state`): LangGraph reads these
functions' annotations for each conditional edge every time the graph is compiled."""

from typing import Literal

from langchain_core.messages import AIMessage

from toolgate.graph.state import GatewayState


def after_model(state: GatewayState) -> Literal["dispatch", "respond", "__end__"]:
    """Tool calls go to dispatch; a text answer (answered by the model node itself) ends the
    task turn; an exhausted budget or a refusal ends the task through respond."""
    if state.get("status") in ("needs_review", "refused"):
        return "respond"
    last = state["messages"][-1] if state.get("messages") else None
    if isinstance(last, AIMessage) and (last.tool_calls or last.invalid_tool_calls):
        return "dispatch"
    if state.get("status") in ("done", "awaiting_approval"):
        return "__end__"  # END
    return "respond"


def after_dispatch(state: GatewayState) -> Literal["proposal", "execute", "model", "respond"]:
    """Writes become proposals, reads execute, all-refused turns go back to the model."""
    if state.get("status") in ("needs_review", "refused"):
        return "respond"
    calls = state.get("calls", {})
    phases = {(calls.get(c) or {}).get("phase") for c in state.get("turn_calls", [])}
    if "write" in phases:
        return "proposal"
    if "read" in phases:
        return "execute"
    return "model"


def after_proposal(state: GatewayState) -> Literal["approval", "execute", "respond"]:
    """Wait for review when any write of the turn awaits approval."""
    if state.get("status") == "refused":
        return "respond"
    return "approval" if state.get("awaiting") else "execute"


def after_execute(state: GatewayState) -> Literal["approval", "model", "respond"]:
    """Back to waiting while every write is undecided; otherwise the model sees the results."""
    if state.get("status") == "awaiting_approval" and state.get("awaiting"):
        return "approval"
    if state.get("status") in ("needs_review", "refused"):
        return "respond"
    return "model"


__all__ = ["after_dispatch", "after_execute", "after_model", "after_proposal"]
