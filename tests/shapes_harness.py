"""Runs tools of any shape through the real graph: exposure, dispatch, proposal, approval, execute.

Every shape test registers one read tool and one write tool, lets a scripted model call the read
and then the write, has a reviewer approve the write's proposal, and returns the final state.
The tests themselves count handler calls at the source (a list, or the MCP server's call log).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from support import principal, start, tool_messages

from toolgate.graph import Context
from toolgate.graph.bootstrap import initialize_store
from toolgate.graph.review.decisions import decide
from toolgate.policy.authorization import visible_tools
from toolgate.policy.identities import IdentityDirectory
from toolgate.store import Store
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import ApprovalClass, NoRollback, Registry, ToolSpec
from toolgate.tools.demo import REFUND_RELEASE, DemoSystem
from toolgate.tools.demo.identities import seed_demo_identities
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.shapes.operator_policy import OperatorPolicy

RELEASE = "shapes-test/1.0.0"
READ = OperatorPolicy(risk="read-only", owner="weather-team", scopes=frozenset({"ops:read"}))
"""A read: defaults for everything but owner and scopes (sam and omar hold ``ops:read``)."""
WRITE = OperatorPolicy(
    risk="caution",
    owner="weather-team",
    scopes=frozenset({"ops:restart"}),
    approval=ApprovalClass.role("operator"),
    effect="Creates a weather alert for one city.",
    rollback=NoRollback("alerts expire on their own"),
    timeout_s=30,
)
"""A write sam may propose and omar (operator) may approve; cust-ada sees neither tool."""


@dataclass
class Flow:
    """What one read-then-write run produced."""

    final: dict[str, Any]
    """The graph's final state."""
    read: dict[str, Any]
    """The read's ToolMessage payload."""
    write: dict[str, Any]
    """The write's ToolMessage payload."""
    proposal: dict[str, Any]
    """The write's proposal as the approval interrupt showed it."""


def run_read_then_write(
    store: Store,
    specs: Sequence[ToolSpec],
    read: tuple[str, dict[str, Any]],
    write: tuple[str, dict[str, Any]],
    *,
    write_calls: Callable[[], int],
) -> Flow:
    """Sam calls ``read`` then ``write``; omar approves; the write runs; the model answers."""
    initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
    seed_demo_identities(IdentityDirectory(store))
    registry = Registry.of(RELEASE, specs, DemoSystem(store))
    assert [s.name for s in visible_tools(registry, principal("cust-ada"))] == []
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call(read[0], read[1], "call_read")),
            ai("", tool_call(write[0], write[1], "call_write")),
            ai("Done."),
        ]
    )
    app = open_test_app(
        release=DEMO_RELEASES[REFUND_RELEASE], tools=registry, model=model, store=store, start=False
    )
    graph = app.compiled(checkpointer=InMemorySaver())
    paused = start(graph, "Check the weather, then set an alert.", "sam", "t-shapes")
    assert sorted(model.requests[0].tool_names) == sorted([read[0], write[0]])
    payload = paused["__interrupt__"][0].value
    proposal = payload["toolgate"]["proposals"][0]
    assert payload["action_requests"][0]["name"] == write[0]
    assert proposal["status"] == "pending_approval" and write_calls() == 0
    decide(app.gateway_with(model), proposal["proposal_id"], principal("omar"), "approve")
    final = graph.invoke(
        Command(resume={"wake": True}), {"configurable": {"thread_id": "t-shapes"}}, context=Context()
    )
    model.assert_complete()
    messages = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(final)}
    assert final["status"] == "done"
    # the store's records, not only the messages: one proposal, its operation succeeded once
    [(stored, operation)] = store.proposals.list()
    assert stored.tool == write[0] and stored.call_id == "call_write" and operation.status == "succeeded"
    events = [(e.event, e.tool) for e in store.audit.events()]
    assert events.count(("call.completed", read[0])) == 1
    assert events.count(("handler.started", write[0])) == 1
    assert events.count(("operation.completed", write[0])) == 1
    return Flow(final=final, read=messages["call_read"], write=messages["call_write"], proposal=proposal)
