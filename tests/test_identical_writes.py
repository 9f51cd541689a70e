"""Exactly-once is about one approved proposal delivered many times, not about calls that look alike.

Two identical write calls in one thread (the user asked for two equal refunds of an order with
room for both) are two operations: each is proposed, approved and executed once, and the reviewer
of the second is told an identical one already ran. The same model response delivered again
(same call ids) finds the same operation and makes no extra effect.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.types import Command
from support import REFUND_REQUEST, Harness, principal, start

from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.testing import ScriptedChatModel, ai, tool_call

HALF = {"order_id": "O-5512", "amount_cents": 2000, "reason": "damaged"}


def resume(graph: Any, thread: str) -> dict[str, Any]:
    result: dict[str, Any] = graph.invoke(
        Command(resume={"wake": True}), {"configurable": {"thread_id": thread}}, context=Context()
    )
    return result


def test_two_identical_calls_are_two_operations_and_two_effects(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("issue_refund", HALF, "first")),
            ai("", tool_call("issue_refund", HALF, "second")),
            ai("both done"),
        ]
    )
    graph = harness.graph(model)
    first = start(graph, REFUND_REQUEST, "cust-ada", "t-twice")["__interrupt__"][0].value["toolgate"][
        "proposals"
    ][0]
    assert first["identical_in_thread"] == [] and first["note"] == ""
    decide(harness.gateway(), first["proposal_id"], principal("fiona"), "approve")
    waiting = resume(graph, "t-twice")
    second = waiting["__interrupt__"][0].value["toolgate"]["proposals"][0]
    assert second["operation_key"] != first["operation_key"]
    assert second["identical_in_thread"] == [{"operation_key": first["operation_key"], "status": "succeeded"}]
    assert "already ran" in second["note"]  # the reviewer is told before approving a second effect
    decide(harness.gateway(), second["proposal_id"], principal("fiona"), "approve")
    done = resume(graph, "t-twice")
    assert done["status"] == "done"
    assert harness.refunds() == 2 and harness.payments() == 2 and harness.handler_calls["issue_refund"] == 2
    statuses = {o["call_id"]: o["status"] for o in done["outcomes"].values()}
    assert statuses["first"] == statuses["second"] == "completed"


def test_the_same_model_response_delivered_again_makes_no_extra_effect(harness: Harness) -> None:
    call = tool_call("issue_refund", HALF, "replayed")
    graph = harness.graph(ScriptedChatModel(responses=[ai("", call), ai("done")]))
    proposal = start(graph, REFUND_REQUEST, "cust-ada", "t-replay")["__interrupt__"][0].value["toolgate"][
        "proposals"
    ][0]
    decide(harness.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    resume(graph, "t-replay")
    assert harness.refunds() == 1
    # the same response again, in the same thread (a retried provider request, a duplicated delivery)
    replay = harness.graph(ScriptedChatModel(responses=[ai("", call), ai("done")]))
    again = start(replay, REFUND_REQUEST, "cust-ada", "t-replay")
    assert "__interrupt__" not in again, "the replayed call found its stored, completed operation"
    assert harness.refunds() == 1 and harness.payments() == 1
    assert [p.proposal_id for p, _ in harness.store.proposals.list()] == [proposal["proposal_id"]]


def test_the_listing_is_read_when_the_thread_pauses_and_recorded_with_its_interrupt_never_on_resume(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The approval node reads the identical writes of the task only when it pauses (the payload
    LangGraph records carries them, as a reviewer reading the thread later sees it); a resume
    re-runs the node, whose payload is thrown away, and reads no listing (issue 31)."""
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("issue_refund", HALF, "first")),
            ai("", tool_call("issue_refund", HALF, "second")),
            ai("both done"),
        ]
    )
    graph = harness.graph(model)
    listings: list[str] = []
    reads = type(harness.store.proposals)

    def counted(name: str) -> Any:
        real = getattr(reads, name)

        def read(self: Any, *args: Any, **kwargs: Any) -> Any:
            proposal = args[0] if name != "for_tool" else None
            listings.append(proposal.proposal_id if proposal is not None else f"{name}()")
            return real(self, *args, **kwargs)

        return read

    for name in ("beside", "same_effect", "for_tool"):  # the listing's one read, and any other
        monkeypatch.setattr(reads, name, counted(name))
    first = start(graph, REFUND_REQUEST, "cust-ada", "t-listed")["__interrupt__"][0].value["toolgate"][
        "proposals"
    ][0]
    assert listings == [first["proposal_id"]]
    decide(harness.gateway(), first["proposal_id"], principal("fiona"), "approve")
    waiting = resume(graph, "t-listed")  # resumes the first pause (no listing), pauses on the second
    second = waiting["__interrupt__"][0].value["toolgate"]["proposals"][0]
    assert listings == [first["proposal_id"], second["proposal_id"]]
    (recorded,) = graph.get_state({"configurable": {"thread_id": "t-listed"}}).interrupts
    shown = recorded.value["toolgate"]["proposals"][0]
    assert shown["identical_in_thread"] == [{"operation_key": first["operation_key"], "status": "succeeded"}]
    assert "already ran" in shown["note"]
    decide(harness.gateway(), second["proposal_id"], principal("fiona"), "approve")
    assert resume(graph, "t-listed")["status"] == "done"
    assert listings == [first["proposal_id"], second["proposal_id"]]  # neither resume read one
    assert harness.refunds() == 2 and harness.handler_calls["issue_refund"] == 2
