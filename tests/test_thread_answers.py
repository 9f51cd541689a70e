"""A thread whose run ended before its write settled is answered from the store (issue 29), by
the server's waker, by ``toolgate resume`` and by the worker (tests/test_full_disk_recovery.py).

The write is held in its handler (an event, never a sleep) past its timeout, so the thread ends
``done`` with the refund's outcome ``unknown`` (its lease kept while the handler lives); released,
the late success is recorded in the store while no run of the thread is going on. Every reader
of the thread's state saw ``unknown`` from then on. Now the waker's answer round runs the
thread's respond node once more, which renders the store's ``completed``, once per change; forged
thread state picks nothing to run.
SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from typing import Any

from langgraph.types import Command
from support import Harness, principal, start

from toolgate.graph.context import Context
from toolgate.graph.review.decisions import decide
from toolgate.graph.worker import waker
from toolgate.graph.worker.answers import answer_thread, might_be_stale, stale_writes
from toolgate.store.base import Store
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}


class Loopback:
    """Stands in for the server's loopback client over one local graph: thread searches by
    status, and runs that apply their command to the graph."""

    def __init__(self, graph: Any, idle: list[Any]) -> None:
        self.threads = self
        self.runs = self
        self.graph = graph
        self.idle = idle
        self.created: list[tuple[str, dict[str, Any]]] = []

    async def search(self, *, status: str, limit: int, sort_by: str, sort_order: str) -> list[Any]:
        assert (limit, sort_by, sort_order) == (100, "updated_at", "desc")
        return self.idle if status == "idle" else []

    async def create(
        self, thread_id: str, assistant_id: str, *, command: Any, multitask_strategy: str
    ) -> None:
        assert (assistant_id, multitask_strategy) == ("toolgate", "reject")
        self.created.append((thread_id, command))
        config: Any = {"configurable": {"thread_id": thread_id}}
        self.graph.invoke(Command(goto=command["goto"]), config, context=Context())


def test_a_thread_that_ended_before_its_write_settled_is_answered_from_the_store(store: Store) -> None:
    harness = Harness(store)
    refund = harness.registry.tools["issue_refund"]
    entered, release = threading.Event(), threading.Event()

    def held(args: Any, ctx: Any) -> Any:
        entered.set()
        assert release.wait(120), "never released"
        return refund.handler(args, ctx)

    harness.registry = replace(
        harness.registry,
        tools={**harness.registry.tools, refund.name: replace(refund, handler=held, timeout_s=0.5)},
    )
    model = ScriptedChatModel(
        responses=[ai("", tool_call("issue_refund", REFUND, "c-refund")), ai("Under way.")]
    )
    graph = harness.graph(model)
    config: Any = {"configurable": {"thread_id": "t-late"}}
    first = start(graph, "refund O-5512", "cust-ada", "t-late")
    proposal = first["__interrupt__"][0].value["toolgate"]["proposals"][0]
    decide(harness.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    # the handler holds the refund past its timeout: the run ends with its outcome unknown (one
    # status check, at once: the default schedule would wait 31 s for a handler held until released)
    ended = graph.invoke(Command(resume={"wake": True}), config, context=Context(reconcile_delays=(0.0,)))
    assert entered.is_set() and ended["status"] == "done"
    assert ended["outcomes"]["c-refund"]["status"] == "unknown"
    release.set()
    deadline = time.monotonic() + 60
    while (op := store.operations.get(proposal["operation_key"])) is None or op.status != "succeeded":
        assert time.monotonic() < deadline, f"the released refund never succeeded: {op}"
        time.sleep(0.02)
    model.assert_complete()

    values = dict(graph.get_state(config).values)
    assert might_be_stale(values) and stale_writes(store, values) == [proposal["operation_key"]]
    forged = {"calls": {"x": {"operation_key": "op_nope"}, "y": "junk", 3: {}}, "outcomes": "junk"}
    loopback = Loopback(
        graph,
        [{"thread_id": "t-late", "values": values}, {"thread_id": "t-forged", "values": forged}, "junk"],
    )
    answered: waker.Answered = {}
    gw = harness.gateway()
    assert asyncio.run(waker.answer_settled_threads(gw, loopback, answered)) == ["t-late"]
    assert loopback.created == [("t-late", {"goto": "respond"})]

    now = dict(graph.get_state(config).values)
    assert now["status"] == "done" and now["outcomes"]["c-refund"]["status"] == "completed"
    answer = now["messages"][-1].content
    assert "issue_refund [c-refund]: completed" in answer and "unknown" not in answer
    assert "Assistant summary" not in answer  # never the earlier answer quoted as the model's words
    assert harness.handler_calls["issue_refund"] == 1  # answering runs nothing again
    # once per change: the thread is current now, and a second round answers nothing
    loopback.idle = [{"thread_id": "t-late", "values": now}]
    assert asyncio.run(waker.answer_settled_threads(gw, loopback, answered)) == []
    assert answer_thread(graph, store, "t-late") == "current"
    assert answer_thread(graph, store, "t-never") == "missing"


def test_an_interrupted_thread_whose_write_a_worker_delivered_is_resumed_from_the_store(store: Store) -> None:
    """The clock-skewed view: a worker delivered the approved refund while the thread still
    waited at its interrupt (``awaiting_approval``); answering resumes it, which returns the
    stored result and runs nothing twice."""
    harness = Harness(store)
    model = ScriptedChatModel(
        responses=[ai("", tool_call("issue_refund", REFUND, "c-refund")), ai("Refunded.")]
    )
    graph = harness.graph(model)
    first = start(graph, "refund O-5512", "cust-ada", "t-waiting")
    proposal = first["__interrupt__"][0].value["toolgate"]["proposals"][0]
    gw = harness.gateway()
    assert answer_thread(graph, store, "t-waiting") == "waiting"  # nothing decided yet
    decide(gw, proposal["proposal_id"], principal("fiona"), "approve")
    delivery = gw.executor.deliver(proposal["operation_key"], worker_id="w-elsewhere")
    assert delivery.status == "succeeded"
    config: Any = {"configurable": {"thread_id": "t-waiting"}}
    assert graph.get_state(config).values["status"] == "awaiting_approval"

    assert answer_thread(graph, store, "t-waiting") == "resumed"
    now = dict(graph.get_state(config).values)
    assert now["status"] == "done" and now["outcomes"]["c-refund"]["status"] == "completed"
    assert harness.handler_calls["issue_refund"] == 1
    assert answer_thread(graph, store, "t-waiting") == "current"
