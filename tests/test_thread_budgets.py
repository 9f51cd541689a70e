"""Budgets belong to the thread: fixed from the trusted run context when it starts, kept under the
state seal, and counted against by every later turn and resume, whatever that process's defaults."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from support import Harness, principal, tool_messages

from toolgate.graph import Context
from toolgate.graph.state import gateway_state
from toolgate.testing import ScriptedChatModel, ai, tool_call


def lookups(n: int, first: int) -> Any:
    return ai("", *(tool_call("lookup_order", {"order_id": "O-5512"}, f"c{first + i}") for i in range(n)))


def ask(graph: Any, thread: str, context: Context) -> dict[str, Any]:
    result: dict[str, Any] = graph.invoke(
        {"messages": [HumanMessage("again")]}, {"configurable": {"thread_id": thread}}, context=context
    )
    return result


def test_a_later_turn_counts_against_the_limits_the_thread_started_with(harness: Harness) -> None:
    saver = InMemorySaver()
    model = ScriptedChatModel(responses=[lookups(1, 0), ai("one"), lookups(2, 1), ai("two")])
    first = harness.graph(model, saver)
    state = ask(
        first, "t-kept", Context(principal=principal("cust-ada"), max_tool_calls=2, max_identical_calls=9)
    )
    budget = gateway_state(state)["budget"]
    assert budget["max_tool_calls"] == 2 and budget["tool_calls"] == 1
    # a second turn, in a graph of a process whose own defaults are generous (40 calls)
    later = harness.graph(model, saver)
    state = ask(later, "t-kept", Context(principal=principal("cust-ada")))
    answered = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}
    # the turn crosses the thread's budget at c2: the whole turn stops (c1 is answered, not run)
    assert answered["c1"]["error"] == "task_stopped" and answered["c2"]["error"] == "budget_exhausted"
    assert harness.handler_calls["lookup_order"] == 1 and state["status"] == "needs_review"
    assert gateway_state(state)["budget"]["max_tool_calls"] == 2  # the resume did not reset it


def test_raising_the_thread_budget_through_state_is_refused_as_tampering(harness: Harness) -> None:
    saver = InMemorySaver()
    graph = harness.graph(
        ScriptedChatModel(responses=[lookups(1, 0), ai("one"), lookups(1, 1), ai("x")]), saver
    )
    cfg = {"configurable": {"thread_id": "t-raise"}}
    state = ask(graph, "t-raise", Context(principal=principal("cust-ada"), max_tool_calls=1))
    graph.update_state(cfg, {"budget": {**gateway_state(state)["budget"], "max_tool_calls": 1000}})
    state = ask(graph, "t-raise", Context(principal=principal("cust-ada")))
    assert state["status"] == "refused" and harness.handler_calls["lookup_order"] == 1
    tampered = [e for e in harness.store.audit.events() if e.event == "state.tampered"]
    assert len(tampered) == 1 and "budget" in json.dumps(tampered[0].detail)
