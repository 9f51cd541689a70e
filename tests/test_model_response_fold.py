"""A tool-calling model turn's ``model.response`` travels with the thread's next audited step.

The model node leaves the event waiting (`toolgate.graph.nodes.response_audit`); the next step
that appends audit events links it first, in the same transaction: dispatch with its refusals,
execute with a read's events, the proposal node with the proposal. Every path after such a turn
ends with the event in the chain exactly once, before the events of its calls; a step run again,
or a thread resumed in a process that never saw the event, does not write it twice. A text answer
keeps its own append. Counted here by the transactions that link events (`AuditLog._chain`), on
both backends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Command, Overwrite
from support import REFUND_REQUEST, Harness, principal, start, tool_messages
from test_dispatch_refusals import CASES as DISPATCH_REFUSALS

from toolgate.clock import parse_iso
from toolgate.graph import Context
from toolgate.graph.nodes import dispatch as dispatch_node
from toolgate.graph.nodes import execute_calls
from toolgate.graph.nodes import proposal as proposal_node
from toolgate.graph.nodes.response_audit import DEFERRED, response_event_id
from toolgate.graph.review.decisions import decide
from toolgate.graph.state import gateway_state
from toolgate.store.audit_log import AuditLog
from toolgate.store.audit_records import AuditEvent
from toolgate.store.chain import verify_chain
from toolgate.testing import ScriptedChatModel, ai, tool_call

LOOKUP = {"order_id": "O-5512"}
REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


@pytest.fixture
def links(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """The events of each linking transaction that linked any, by name, in commit order (spied on
    `AuditLog._chain`, which both ways of linking go through: `AuditLog.link` and
    `AuditLog.link_behind`, the proposal's)."""
    seen: list[list[str]] = []
    chain, ahead = AuditLog._chain, AuditLog.link_ahead
    waiting: list[list[list[str]]] = []  # inside `link_ahead`: its last chaining, not yet known linked

    def counted(self: AuditLog, tx: Any, *args: Any) -> list[AuditEvent]:
        linked = chain(self, tx, *args)
        if linked:
            (waiting[-1] if waiting else seen).append([e.event for e in linked])
        return linked

    def counted_ahead(self: AuditLog, tx: Any, *args: Any, **kwargs: Any) -> Any:
        # a proposal's events are chained before its script says whether it stored the proposal
        # (PostgreSQL, `AuditLog.link_ahead`): they count as linked only when it did (its first
        # statement's rows), and as the last chaining (linked again after a moved chain head)
        waiting.append([])
        try:
            answers = ahead(self, tx, *args, **kwargs)
        finally:
            chained = waiting.pop()
        if answers[0] and chained:
            seen.append(chained[-1])
        return answers

    monkeypatch.setattr(AuditLog, "_chain", counted)
    monkeypatch.setattr(AuditLog, "link_ahead", counted_ahead)
    yield seen


def thread_events(harness: Harness, thread: str) -> list[AuditEvent]:
    return [e for e in harness.store.audit.events() if e.thread_id == thread]


def responses_of(harness: Harness, thread: str) -> list[AuditEvent]:
    return [e for e in thread_events(harness, thread) if e.event == "model.response"]


def check_chain(harness: Harness) -> None:
    assert verify_chain(harness.store).ok


def test_a_read_call_links_its_model_turn_with_the_read_events(
    harness: Harness, links: list[list[str]]
) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", LOOKUP, "c1")), ai("Shipped.")])
    state = start(harness.graph(model), "where is O-5512?", "cust-ada", "t-read")
    assert harness.handler_calls["lookup_order"] == 1 and state["status"] == "done"
    # two audited transactions per read call, not three: the turn's event first in the read's
    assert links == [["model.response", "call.accepted", "call.completed"], ["model.response"]]
    first, final = responses_of(harness, "t-read")
    assert first.detail["turn"] == 1 and first.detail["tool_calls"] == 1
    assert first.detail["tools_offered"] and first.detail["tool_choice"] == "auto"
    assert first.response_id is not None
    # the time the model answered, which the linking transaction's time would misdate
    answered = parse_iso(first.detail["answered_at"])
    assert answered <= parse_iso(first.occurred_at)
    assert "answered_at" not in final.detail and final.detail["turn"] == 2  # a text answer: at once
    assert state.get("unaudited_response") is None
    assert first.event_id not in DEFERRED._events  # linked: no longer kept


@pytest.mark.parametrize("code", list(DISPATCH_REFUSALS))
def test_a_call_refused_at_dispatch_links_the_turn_with_the_refusal(
    harness: Harness, links: list[list[str]], code: str
) -> None:
    user, bad = DISPATCH_REFUSALS[code]
    model = ScriptedChatModel(responses=[bad, ai("Sorry.")])
    state = start(harness.graph(model), "please help", user, f"t-refused-{code}")
    assert json.loads(str(tool_messages(state)[0].content))["error"] == code
    assert links == [["model.response", "call.rejected"], ["model.response"]]
    events = thread_events(harness, f"t-refused-{code}")
    assert [(e.event, e.code) for e in events] == [
        ("model.response", None),
        ("call.rejected", code),
        ("model.response", None),
    ]


def test_a_loop_refused_at_dispatch_links_each_turn_once(harness: Harness, links: list[list[str]]) -> None:
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("lookup_order", LOOKUP, "c1")),
            ai("", tool_call("lookup_order", LOOKUP, "c2")),
            ai("done"),
        ]
    )
    state = gateway_state(
        harness.graph(model).invoke(
            {"messages": [HumanMessage("twice")]},
            cfg("t-loop"),
            context=Context(principal=principal("cust-ada"), max_identical_calls=1),
        )
    )
    assert json.loads(str(tool_messages(state)[-1].content))["error"] == "loop_detected"
    assert links[:2] == [
        ["model.response", "call.accepted", "call.completed"],
        ["model.response", "call.rejected"],
    ]
    assert [e.detail["turn"] for e in responses_of(harness, "t-loop")] == [
        1,
        2,
        *([3] if len(links) > 2 else []),
    ]


@pytest.mark.parametrize("limit", ["budget", "deadline"])
def test_a_turn_past_its_budget_or_deadline_links_with_the_stop(
    harness: Harness, links: list[list[str]], limit: str
) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", LOOKUP, "c1"))])
    extra = {"max_tool_calls": 0} if limit == "budget" else {"deadline_s": 1e-9}
    state = start(harness.graph(model), "where is O-5512?", "cust-ada", f"t-{limit}", **extra)
    assert state["status"] == "needs_review" and harness.total_handler_calls() == 0
    assert json.loads(str(tool_messages(state)[0].content))["error"] == "budget_exhausted"
    assert links == [["model.response", "call.rejected"]]
    assert len(responses_of(harness, f"t-{limit}")) == 1


def test_a_proposed_write_links_its_turn_with_the_proposal_through_interrupt_and_resume(
    harness: Harness, links: list[list[str]]
) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("Refunded.")])
    graph = harness.graph(model)
    paused = start(graph, REFUND_REQUEST, "cust-ada", "t-write")
    assert links == [["model.response", "call.accepted", "proposal.created"]]
    proposal = paused["__interrupt__"][0].value["toolgate"]["proposals"][0]
    decide(harness.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    final = graph.invoke(
        Command(resume={"wake": True}), cfg("t-write"), context=Context(principal=principal("fiona"))
    )
    assert final["outcomes"]["c1"]["status"] == "completed" and harness.handler_calls["issue_refund"] == 1
    assert [e.detail["turn"] for e in responses_of(harness, "t-write")] == [1, 2]
    names = [e.event for e in thread_events(harness, "t-write")]
    assert names[:3] == ["model.response", "call.accepted", "proposal.created"]
    assert names.count("model.response") == 2


def test_a_proposal_run_again_after_its_commit_does_not_write_the_event_twice(
    harness: Harness, links: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies after the proposal committed with the turn's event: run again, the node
    finds its proposal stored (``proposal.reused``), and the event offered with it is left out."""
    crash = {"left": 1}
    store_proposal = proposal_node.store_proposal

    def dies_after_commit(*args: Any, **kwargs: Any) -> Any:
        stored = store_proposal(*args, **kwargs)
        if crash["left"]:
            crash["left"] -= 1
            raise RuntimeError("process died")
        return stored

    monkeypatch.setattr(proposal_node, "store_proposal", dies_after_commit)
    graph = harness.graph(ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1"))]))
    with pytest.raises(RuntimeError, match="process died"):
        start(graph, REFUND_REQUEST, "cust-ada", "t-proposal-rerun")
    paused = graph.invoke(None, cfg("t-proposal-rerun"), context=Context(principal=principal("cust-ada")))
    assert paused["__interrupt__"]
    assert links == [["model.response", "call.accepted", "proposal.created"], ["proposal.reused"]]
    assert len(responses_of(harness, "t-proposal-rerun")) == 1
    check_chain(harness)


def test_a_step_run_again_after_its_commit_does_not_write_the_event_twice(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies after the read's append committed, before its checkpoint: LangGraph runs
    execute again on resume (the read runs again); the turn's event stays in the chain once."""
    crash = {"left": 1}
    result_message = execute_calls.result_message

    def dies_once(*args: Any, **kwargs: Any) -> Any:
        if crash["left"]:
            crash["left"] -= 1
            raise RuntimeError("process died")
        return result_message(*args, **kwargs)

    monkeypatch.setattr(execute_calls, "result_message", dies_once)
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", LOOKUP, "c1")), ai("Shipped.")])
    graph = harness.graph(model)
    with pytest.raises(RuntimeError, match="process died"):
        start(graph, "where is O-5512?", "cust-ada", "t-rerun")
    assert [e.event for e in thread_events(harness, "t-rerun")] == [
        "model.response",
        "call.accepted",
        "call.completed",
    ]
    final = graph.invoke(None, cfg("t-rerun"), context=Context(principal=principal("cust-ada")))
    assert final["status"] == "done" and harness.handler_calls["lookup_order"] == 2
    assert [e.detail["turn"] for e in responses_of(harness, "t-rerun")] == [1, 2]
    check_chain(harness)


def test_dispatch_run_again_after_its_commit_does_not_write_the_event_twice(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash = {"left": 1}
    flush = dispatch_node.Turn.flush

    def dies_after_commit(self: dispatch_node.Turn, waiting: Any) -> None:
        flush(self, waiting)
        if crash["left"]:
            crash["left"] -= 1
            raise RuntimeError("process died")

    monkeypatch.setattr(dispatch_node.Turn, "flush", dies_after_commit)
    user, bad = DISPATCH_REFUSALS["unknown_tool"]
    graph = harness.graph(ScriptedChatModel(responses=[bad, ai("Sorry.")]))
    with pytest.raises(RuntimeError, match="process died"):
        start(graph, "please help", user, "t-dispatch-rerun")
    final = graph.invoke(None, cfg("t-dispatch-rerun"), context=Context(principal=principal(user)))
    assert final["status"] == "done"
    assert [e.detail["turn"] for e in responses_of(harness, "t-dispatch-rerun")] == [1, 2]
    check_chain(harness)


@pytest.mark.parametrize("next_step", ["execute", "proposal"])
def test_a_thread_resumed_in_a_new_process_rebuilds_the_waiting_event(
    harness: Harness, links: list[list[str]], next_step: str
) -> None:
    """The process died between the model node and the next step: a process that never saw the
    event makes it again from the sealed message and the turn's offer, and links it once."""
    call = (
        tool_call("lookup_order", LOOKUP, "c1")
        if next_step == "execute"
        else tool_call("issue_refund", REFUND, "c1")
    )
    model = ScriptedChatModel(responses=[ai("", call), ai("done")])
    graph = harness.graph(model)
    graph.invoke(
        {"messages": [HumanMessage(REFUND_REQUEST)]},
        cfg(f"t-new-{next_step}"),
        context=Context(principal=principal("cust-ada")),
        interrupt_before=[next_step],
    )
    token = gateway_state(graph.get_state(cfg(f"t-new-{next_step}")).values)["unaudited_response"]
    kept = DEFERRED.get(response_event_id(f"t-new-{next_step}", token))
    assert kept is not None and links == []  # nothing appended yet: the event waits
    DEFERRED.clear()  # a new process
    graph.invoke(None, cfg(f"t-new-{next_step}"), context=Context(principal=principal("cust-ada")))
    (first, *_) = responses_of(harness, f"t-new-{next_step}")
    assert links[0][0] == "model.response" and len(links[0]) > 1  # with the step's own events
    assert first.detail["rebuilt"] is True and "answered_at" not in first.detail
    for field in ("tools_exposed", "tools_offered", "tool_choice", "tool_calls", "turn", "task", "tokens"):
        assert first.detail[field] == kept.detail[field], field
    assert first.response_id == kept.response_id or kept.response_id is None
    assert sum(e.detail["turn"] == 1 for e in responses_of(harness, f"t-new-{next_step}")) == 1
    assert first.event_id == response_event_id(f"t-new-{next_step}", token)


def test_a_dropped_marker_is_refused(harness: Harness) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", LOOKUP, "c1")), ai("done")])
    graph = harness.graph(model)
    graph.invoke(
        {"messages": [HumanMessage("status of O-5512")]},
        cfg("t-dropped"),
        context=Context(principal=principal("cust-ada")),
        interrupt_before=["execute"],
    )
    stored = graph.get_state(cfg("t-dropped")).values["bookkeeping"]
    assert isinstance(stored["unaudited_response"], int)
    graph.update_state(cfg("t-dropped"), {"bookkeeping": Overwrite({**stored, "unaudited_response": None})})
    final = graph.invoke(None, cfg("t-dropped"), context=Context(principal=principal("cust-ada")))
    assert final["status"] == "refused" and harness.total_handler_calls() == 0
    (tampered,) = [e for e in thread_events(harness, "t-dropped") if e.event == "state.tampered"]
    assert tampered.code == "state_tampered" and tampered.detail["keys"] == ["unaudited_response"]


def test_a_text_answer_keeps_its_own_append(harness: Harness, links: list[list[str]]) -> None:
    state = start(harness.graph(ScriptedChatModel(responses=[ai("Hello.")])), "hi", "cust-ada", "t-text")
    assert state["status"] == "done" and links == [["model.response"]]
    assert isinstance(state["messages"][-1], AIMessage)


def test_a_thread_changed_outside_the_gateway_links_the_waiting_event_with_its_refusal(
    harness: Harness, links: list[list[str]]
) -> None:
    """The state is refused before the next step runs: the event this process keeps, under a
    marker the seal still vouches for, goes with the ``state.tampered`` append."""
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", LOOKUP, "c1")), ai("done")])
    graph = harness.graph(model)
    graph.invoke(
        {"messages": [HumanMessage("status of O-5512")]},
        cfg("t-changed"),
        context=Context(principal=principal("cust-ada")),
        interrupt_before=["execute"],
    )
    graph.update_state(cfg("t-changed"), {"status_reason": "approved by the CEO"})
    final = gateway_state(
        graph.invoke(None, cfg("t-changed"), context=Context(principal=principal("cust-ada")))
    )
    assert final["status"] == "refused" and harness.total_handler_calls() == 0
    assert links[0] == ["model.response", "state.tampered"]
    assert len(responses_of(harness, "t-changed")) == 1 and final.get("unaudited_response") is None
