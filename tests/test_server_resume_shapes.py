"""Every resume shape LangChain's clients send reaches a reviewer's decision on the REAL ``langgraph dev``.

agent-chat-ui answers an approval with ``useStream().submit({}, {command: {resume}})``: a POST to
``/threads/{id}/runs/stream`` whose body carries ``"input": {}`` beside the command (the stream
modes its hook tracks, ``on_disconnect`` and the thread head's checkpoint too). These tests send
that body byte for byte, as a reviewer who does not own the thread, for each decision the UI
makes, in its current LangChain HITL shape (``{"decisions": [...]}``) and its older agent-inbox
shape (``[{"type": "accept" | "response" | "edit", "args": ...}]``); and the Python SDK's (no
``input``). Proven, with the store's rows, the handler's effects and the audit log:

* approve, reject, edit and respond each work (an approval runs the refund once); a reviewer's
  edit is approved with the digest the reviewer saw, a bare approve of it refused
  ``digest_required`` (a resume names no interrupt: tests/test_red_team_stale_decisions.py);
* a refused decision (a reviewer lacking the tool's role, a rejection without a reason) changes
  nothing and says why in the streamed output, in the next interrupt's ``last_review`` and in the
  description of the action request the UI shows again;
* a reviewer's run carrying real input, or a ``goto``, is still refused, and so is a caller
  without a token.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from server_support import client_as, interrupts_of, people_server_and_store
from test_server_auth import GRAPH, Rig, proposal_args, start_refund

from toolgate.store.audit import actor_hash
from toolgate.tools.demo.identities import demo_token

pytestmark = [pytest.mark.server, pytest.mark.slow]

STREAM_MODES = ["values", "messages-tuple", "custom"]
"""What agent-chat-ui's ``useStream`` asks for: the values and messages it reads, its custom events."""


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with people_server_and_store(tmp_path_factory.mktemp("lgdev-resume")) as (server, store):
        yield Rig(server, store)


def chat_ui_body(rig: Rig, user: str, thread_id: str, resume: Any, **overrides: Any) -> dict[str, Any]:
    """The JSON body agent-chat-ui's ``thread.submit({}, {command: {resume}})`` posts: ``input: {}``,
    the command, its stream modes, ``on_disconnect`` and the head checkpoint (without thread id)
    that ``useStream`` resumes from when it fetched the thread's history."""
    with client_as(rig.server, user) as client:
        checkpoint = dict(client.threads.get_state(thread_id)["checkpoint"])
    checkpoint.pop("thread_id", None)
    body = {
        "input": {},
        "command": {"resume": resume},
        "stream_mode": STREAM_MODES,
        "assistant_id": GRAPH,
        "on_disconnect": "cancel",
        "checkpoint": checkpoint,
    }
    body.update(overrides)
    return body


def post_stream(
    rig: Rig, user: str | None, thread_id: str, body: dict[str, Any], **auth_headers: str
) -> httpx.Response:
    """POST the body as agent-chat-ui does (JSON; the user's token as a bearer token unless
    ``auth_headers`` say otherwise), reading the whole SSE answer."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if user:
        headers["Authorization"] = f"Bearer {demo_token(user)}"
    headers.update({k.replace("_", "-"): v for k, v in auth_headers.items()})
    with httpx.Client(timeout=120.0, trust_env=False) as http:
        return http.post(
            f"{rig.server.url}/threads/{thread_id}/runs/stream", content=json.dumps(body), headers=headers
        )


def sse_events(response: httpx.Response) -> list[tuple[str, Any]]:
    """``(event, data)`` pairs of a server-sent-events answer."""
    events: list[tuple[str, Any]] = []
    for block in response.text.replace("\r\n", "\n").split("\n\n"):
        name, data = "", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[len("event:") :].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:") :].strip())
        if name:
            events.append((name, json.loads("\n".join(data)) if data else None))
    return events


def streamed_output(response: httpx.Response) -> dict[str, Any]:
    """The run's output as the UI sees it: the last ``values`` event (no ``error`` event on the way)."""
    assert response.status_code == 200, response.text
    events = sse_events(response)
    assert not [data for name, data in events if name == "error"], events
    values = [data for name, data in events if name == "values"]
    assert values, events
    last: dict[str, Any] = values[-1]
    return last


def decide_as_chat_ui(rig: Rig, user: str, thread_id: str, resume: Any) -> dict[str, Any]:
    return streamed_output(post_stream(rig, user, thread_id, chat_ui_body(rig, user, thread_id, resume)))


def interrupt_now(rig: Rig, thread_id: str) -> dict[str, Any]:
    with client_as(rig.server, "cust-ada") as client:
        (interrupt,) = interrupts_of(client.threads.get_state(thread_id))
    value: dict[str, Any] = interrupt["value"]
    return value


def approvals(rig: Rig, proposal_id: str) -> list[tuple[str, str, str]]:
    return [(a.reviewer_id, a.decision, a.reason) for a in rig.store.approvals.for_proposal(proposal_id)]


def audited(rig: Rig, event: str, proposal_id: str) -> list[tuple[str, str]]:
    """``(person, code)`` of each ``event`` about the proposal (people are keyed hashes there)."""
    people = {actor_hash(rig.store.keys.key("actor"), u): u for u in ("fiona", "rita", "omar", "cust-ada")}
    return [
        (people.get(e.actor_id or "", e.actor_id or ""), e.code or "")
        for e in rig.store.audit.events()
        if e.event == event and e.proposal_id == proposal_id
    ]


@pytest.mark.parametrize(
    "resume",
    [{"decisions": [{"type": "approve"}]}, [{"type": "accept", "args": None}]],
    ids=["approve", "agent-inbox-accept"],
)
def test_a_reviewer_approves_with_agent_chat_uis_request_and_the_refund_runs_once(
    rig: Rig, resume: Any
) -> None:
    thread_id, proposal = start_refund(rig)
    done = decide_as_chat_ui(rig, "fiona", thread_id, resume)
    assert done["status"] == "done", done
    assert done["review"] == {
        "reviewer": "fiona",
        "outcomes": [{"proposal_id": proposal["proposal_id"], "decision": "approve", "result": "recorded"}],
    }
    assert rig.payments(proposal["operation_key"]) == 1
    op = rig.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "succeeded"
    assert approvals(rig, proposal["proposal_id"]) == [("fiona", "approve", "")]
    assert [u for u, _ in audited(rig, "approval.recorded", proposal["proposal_id"])] == ["fiona"]
    assert audited(rig, "approval.refused", proposal["proposal_id"]) == []


@pytest.mark.parametrize(
    "resume",
    [
        {"decisions": [{"type": "reject", "message": "wrong order"}]},
        [{"type": "response", "args": "wrong order"}],
    ],
    ids=["reject", "agent-inbox-respond"],
)
def test_a_reviewer_rejects_or_responds_with_agent_chat_uis_request(rig: Rig, resume: Any) -> None:
    thread_id, proposal = start_refund(rig)
    out = decide_as_chat_ui(rig, "fiona", thread_id, resume)
    assert out["review"] == {
        "reviewer": "fiona",
        "outcomes": [{"proposal_id": proposal["proposal_id"], "decision": "reject", "result": "recorded"}],
    }
    assert out["status"] != "awaiting_approval", out
    op = rig.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "rejected" and rig.payments(proposal["operation_key"]) == 0
    assert approvals(rig, proposal["proposal_id"]) == [("fiona", "reject", "wrong order")]
    assert [u for u, _ in audited(rig, "proposal.rejected", proposal["proposal_id"])] == ["fiona"]


def test_a_reviewer_edits_with_agent_chat_uis_request_and_the_edit_waits_for_its_own_digest_bound_approval(
    rig: Rig,
) -> None:
    thread_id, proposal = start_refund(rig)
    # the UI's edit form hands back what was typed: a number field comes back as a string
    edited_args = {**proposal_args(rig, proposal), "amount_cents": "700"}
    out = decide_as_chat_ui(
        rig,
        "rita",
        thread_id,
        {"decisions": [{"type": "edit", "edited_action": {"name": "issue_refund", "args": edited_args}}]},
    )
    (outcome,) = out["review"]["outcomes"]
    assert (outcome["decision"], outcome["result"]) == ("edit", "recorded"), out["review"]
    assert out["status"] == "awaiting_approval"
    (waiting,) = interrupt_now(rig, thread_id)["toolgate"]["proposals"]
    assert waiting["proposal_id"] == outcome["new_proposal_id"] != proposal["proposal_id"]
    replacement = rig.store.proposals.get(waiting["proposal_id"])
    assert replacement is not None and replacement.arguments["amount_cents"] == 700
    assert replacement.supersedes == proposal["proposal_id"] and "rita" in replacement.editors
    original = rig.store.operations.get(proposal["operation_key"])
    assert original is not None and original.status == "rejected"

    # a bare approve names no interrupt: sent from a view older than the edit it would approve
    # arguments it never showed, so an edit is approved with the digest the reviewer saw
    bare = decide_as_chat_ui(rig, "fiona", thread_id, {"decisions": [{"type": "approve"}]})
    (refused,) = bare["review"]["outcomes"]
    assert (refused["result"], refused["code"]) == ("refused", "digest_required"), bare["review"]
    assert bare["status"] == "awaiting_approval" and rig.payments(waiting["operation_key"]) == 0
    done = decide_as_chat_ui(
        rig, "fiona", thread_id, {"decisions": [{"type": "approve", "digest": waiting["digest"]}]}
    )
    assert done["status"] == "done", done
    assert rig.payments(waiting["operation_key"]) == 1 and rig.payments(proposal["operation_key"]) == 0


def test_the_python_sdks_resume_without_input_works_the_same(rig: Rig) -> None:
    thread_id, proposal = start_refund(rig)
    with client_as(rig.server, "fiona") as client:
        parts = list(
            client.runs.stream(
                thread_id,
                GRAPH,
                command={"resume": {"decisions": [{"type": "approve"}]}},
                stream_mode="values",
            )
        )
    values = [p.data for p in parts if p.event == "values"]
    assert values and values[-1]["status"] == "done", parts
    assert rig.payments(proposal["operation_key"]) == 1
    assert approvals(rig, proposal["proposal_id"]) == [("fiona", "approve", "")]


@pytest.mark.parametrize(
    ("user", "resume", "code", "reason"),
    [
        ("omar", {"decisions": [{"type": "approve"}]}, "missing_role", "role"),
        ("fiona", {"decisions": [{"type": "reject"}]}, "reason_required", "needs a reason"),
    ],
)
def test_a_refused_decision_says_why_in_the_output_and_the_next_interrupt(
    rig: Rig, user: str, resume: Any, code: str, reason: str
) -> None:
    thread_id, proposal = start_refund(rig)
    out = decide_as_chat_ui(rig, user, thread_id, resume)
    assert out["status"] == "awaiting_approval"
    (outcome,) = out["review"]["outcomes"]
    assert (outcome["result"], outcome["code"]) == ("refused", code), out["review"]
    assert reason in outcome["message"]
    interrupt = interrupt_now(rig, thread_id)
    assert interrupt["toolgate"]["last_review"] == out["review"]
    description = interrupt["action_requests"][0]["description"]
    assert description.startswith(f"Last decision refused ({outcome['decision']} by {user}: {code}): ")
    assert outcome["message"] in description
    op = rig.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "pending_approval" and rig.payments(proposal["operation_key"]) == 0
    assert approvals(rig, proposal["proposal_id"]) == []
    assert audited(rig, "approval.refused", proposal["proposal_id"]) == [(user, code)]

    done = decide_as_chat_ui(rig, "fiona", thread_id, {"decisions": [{"type": "approve"}]})
    assert done["status"] == "done" and rig.payments(proposal["operation_key"]) == 1


def test_a_reviewers_run_with_real_input_or_a_goto_is_still_refused(rig: Rig) -> None:
    thread_id, proposal = start_refund(rig)
    approve = {"decisions": [{"type": "approve"}]}
    new_turn = {"messages": [{"type": "human", "content": "refund O-5513 too"}]}
    attempts = {
        "input beside the resume": chat_ui_body(rig, "fiona", thread_id, approve, input=new_turn),
        "mark as resolved (goto)": chat_ui_body(
            rig, "fiona", thread_id, approve, command={"goto": "__end__"}
        ),
        "update beside the resume": chat_ui_body(
            rig, "fiona", thread_id, approve, command={"resume": approve, "update": {"status": "done"}}
        ),
    }
    for what, body in attempts.items():
        refused = post_stream(rig, "fiona", thread_id, body)
        assert refused.status_code in (403, 404), (what, refused.status_code, refused.text)
    unauthenticated = post_stream(rig, None, thread_id, chat_ui_body(rig, "fiona", thread_id, approve))
    assert unauthenticated.status_code == 401 and "missing_token" in unauthenticated.text
    assert approvals(rig, proposal["proposal_id"]) == [] and rig.payments(proposal["operation_key"]) == 0
    op = rig.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "pending_approval"
    with client_as(rig.server, "cust-ada") as owner:
        state = owner.threads.get_state(thread_id)
    assert state["values"]["status"] == "awaiting_approval" and list(state["next"]) == ["approval"]


def test_agent_chat_uis_api_key_field_carries_the_token(rig: Rig) -> None:
    """agent-chat-ui sends its "API key" as ``X-Api-Key`` (never an Authorization header): a
    toolgate token there is the reviewer's; a bearer header, when sent, still decides alone."""
    thread_id, proposal = start_refund(rig)
    body = chat_ui_body(rig, "fiona", thread_id, {"decisions": [{"type": "approve"}]})
    for headers, code in (
        ({"X_Api_Key": "tg_not-a-token"}, "authentication_failed"),
        (
            {"Authorization": "Bearer tg_not-a-token", "X_Api_Key": demo_token("fiona")},
            "authentication_failed",
        ),
    ):
        refused = post_stream(rig, None, thread_id, body, **headers)
        assert refused.status_code == 401 and code in refused.text, refused.text
    assert approvals(rig, proposal["proposal_id"]) == [] and rig.payments(proposal["operation_key"]) == 0
    done = streamed_output(post_stream(rig, None, thread_id, body, X_Api_Key=demo_token("fiona")))
    assert done["status"] == "done" and done["review"]["reviewer"] == "fiona", done
    assert rig.payments(proposal["operation_key"]) == 1
    assert approvals(rig, proposal["proposal_id"]) == [("fiona", "approve", "")]
