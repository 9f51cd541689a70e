"""A reviewer's decision sent from a stale interrupt (redteam8): a resume names no interrupt.

A chat UI answers an approval interrupt with ``{"decisions": [{"type": "approve"}]}``: no
proposal id, no digest. The decision lands on whatever the thread's *current* interrupt asks
about (`toolgate.graph.review.hitl` binds it to that proposal's digest). Another reviewer's edit
replaces the proposal and wakes the thread, which pauses again on the edit, in the same place: a
reviewer who still looks at the original and approves it approves arguments they never saw.

On the base this approval was recorded and the edited refund ran. The server cannot tell that
reviewer from one who saw the new interrupt, so the decision taken: a resume's approval of a
reviewer's edit (a proposal that supersedes another) must carry the digest the reviewer saw,
else it is refused ``digest_required`` (audited, nothing recorded). A bare chat-UI approve of an
edit is refused with it (tests/test_server_resume_shapes.py); an original proposal is still
approved with a bare approve, which the server binds to the head checkpoint a chat UI names.
"""

from __future__ import annotations

import json
from typing import Any

from langgraph.types import Command
from support import REFUND_REQUEST, Harness, principal, start, tool_messages

from toolgate.graph import Context
from toolgate.graph.review.edits import edit_proposal
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 100, "reason": "damaged"}


def resume(graph: Any, thread: str, value: Any, who: str) -> dict[str, Any]:
    out: dict[str, Any] = graph.invoke(
        Command(resume=value),
        {"configurable": {"thread_id": thread}},
        context=Context(principal=principal(who)),
    )
    return out


def test_a_stale_approval_without_a_digest_never_approves_an_edit_the_reviewer_did_not_see(
    harness: Harness,
) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    graph = harness.graph(model)
    shown = start(graph, REFUND_REQUEST, "cust-ada", "t-stale")["__interrupt__"][0].value
    assert shown["action_requests"][0]["args"]["amount_cents"] == 100  # what fiona's chat UI shows
    original = shown["toolgate"]["proposals"][0]["proposal_id"]
    # rita edits the refund to 4999 (the API wakes the thread, which pauses again on the edit)
    edited = edit_proposal(
        harness.gateway(),
        original,
        principal("rita"),
        tool="issue_refund",
        arguments={**REFUND, "amount_cents": 4999},
    )
    woken = resume(graph, "t-stale", {"wake": True}, "rita")
    assert [p["proposal_id"] for p in woken["__interrupt__"][0].value["toolgate"]["proposals"]] == [
        edited.proposal_id
    ]
    # fiona, still looking at the 100-cent refund, approves it from her chat UI
    stale = resume(graph, "t-stale", {"decisions": [{"type": "approve"}]}, "fiona")
    assert stale["status"] == "awaiting_approval"
    assert [(o["proposal_id"], o["result"], o["code"]) for o in stale["review"]["outcomes"]] == [
        (edited.proposal_id, "refused", "digest_required")
    ]
    assert harness.store.approvals.for_proposal(edited.proposal_id) == []
    op = harness.store.operations.get(edited.operation_key)
    assert op is not None and op.status == "pending_approval"
    assert harness.payments() == 0 and harness.handler_calls["issue_refund"] == 0
    refused = [e for e in harness.store.audit.events() if e.event == "approval.refused"]
    assert [(e.code, e.proposal_id, e.thread_id) for e in refused] == [
        ("digest_required", edited.proposal_id, "t-stale")
    ]
    assert refused[0].actor_id  # the reviewer who resumed (a keyed hash)
    # approving the edit she reviewed, by its digest, runs it once with its own arguments
    done = resume(graph, "t-stale", {"decisions": [{"type": "approve", "digest": edited.digest}]}, "fiona")
    assert done["status"] == "done" and done["review"]["outcomes"][0]["result"] == "recorded"
    result = json.loads(str(tool_messages(done)[-1].content))
    assert result["status"] == "completed" and result["data"]["amount_cents"] == 4999
    assert harness.payments() == 1 and harness.handler_calls["issue_refund"] == 1

