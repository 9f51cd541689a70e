"""What a reviewer needs to decide (issue 28): a refund's facts, the requester's words, the other
proposals for the same order and a warning when approving would fail at execution.

Proposals are made by the real graph (scripted model) on both stores; the API's proposal view is
read through Starlette's test client as the console reads it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from typing import Any

import pytest
from langgraph.types import Command
from starlette.testclient import TestClient
from support import Harness, principal, start

import toolgate.graph.review.related as related
import toolgate.graph.server.http as http
from toolgate.graph import Context
from toolgate.graph.nodes.approval import add_shown
from toolgate.graph.review.decisions import decide
from toolgate.graph.review.edits import edit_proposal
from toolgate.graph.review.proposals import MAX_REQUESTER_TEXT
from toolgate.store import Store
from toolgate.store.records import ProposalRecord
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.demo.identities import demo_token
from toolgate.tools.registry import Registry

ASK = "My blender arrived broken, order O-5512. Please refund it. password=hunter2"


def propose(
    harness: Harness, thread: str, amount: int, order: str = "O-5512", text: str = ASK, user: str = "cust-ada"
) -> dict[str, Any]:
    """``user`` asks on ``thread``; the model proposes a refund of ``amount`` cents: the interrupt's facts."""
    call = tool_call("issue_refund", {"order_id": order, "amount_cents": amount, "reason": "damaged"}, "c1")
    graph = harness.graph(ScriptedChatModel(responses=[ai("", call), ai("done")]))
    state = start(graph, text, user, thread)
    return dict(state["__interrupt__"][0].value["toolgate"]["proposals"][0])


def view(harness: Harness, proposal_id: str, user: str = "fiona") -> dict[str, Any]:
    gw = harness.gateway()
    client = TestClient(http.create_app(lambda: gw, waker_interval_s=None))
    reply = client.get(
        f"/toolgate/proposals/{proposal_id}", headers={"Authorization": f"Bearer {demo_token(user)}"}
    )
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def test_the_requesters_words_are_kept_redacted_bounded_and_shown(store: Store) -> None:
    harness = Harness(store)
    facts = propose(harness, "t-words", 1000)
    stored = store.proposals.get(facts["proposal_id"])
    assert stored is not None and stored.authentic
    assert stored.requester_text is not None and stored.requester_text.startswith(
        "My blender arrived broken, order O-5512. Please refund it."
    )
    with store.transaction(write=False) as tx:
        row = tx.one("SELECT requester_text FROM proposals WHERE proposal_id = ?", (facts["proposal_id"],))
    assert row is not None and "hunter2" not in row["requester_text"]  # never stored
    shown = view(harness, facts["proposal_id"])
    assert shown["requester_text"] == stored.requester_text and "hunter2" not in str(shown)
    # an edit keeps the requester's words (never the editor's)
    edited = edit_proposal(
        harness.gateway(),
        facts["proposal_id"],
        principal("rita"),
        tool="issue_refund",
        arguments={"order_id": "O-5512", "amount_cents": 900, "reason": "damaged"},
    )
    assert edited.requester_text == stored.requester_text and edited.authentic
    # bounded: a long message is cut
    long = propose(harness, "t-long", 500, order="O-5520", text="refund O-5520 " + "x" * 5000)
    kept = store.proposals.get(long["proposal_id"])
    assert kept is not None and kept.requester_text is not None
    assert len(kept.requester_text) == MAX_REQUESTER_TEXT and kept.requester_text.endswith("…")


def test_a_refund_shows_the_orders_facts_and_the_other_refunds_of_the_same_order(store: Store) -> None:
    harness = Harness(store)
    first = propose(harness, "t-1", 2000)
    second = propose(harness, "t-2", 2000)
    elsewhere = propose(harness, "t-other", 2000, order="O-5520")  # another order: not related
    third = propose(harness, "t-3", 2000)
    shown = view(harness, third["proposal_id"])
    assert shown["review_details"] == {
        "order_id": "O-5512",
        "item": "Blender B-200",
        "currency": "USD",
        "order_amount_cents": 4999,
        "already_refunded_cents": 0,
        "remaining_cents": 4999,
        "this_refund_cents": 2000,
        "remaining_after_cents": 2999,
    }
    assert [
        (r["proposal_id"], r["status"], r["requester"], r["arguments"]["amount_cents"])
        for r in shown["related"]
    ] == [
        (second["proposal_id"], "pending_approval", "cust-ada", 2000),
        (first["proposal_id"], "pending_approval", "cust-ada", 2000),
    ]
    assert shown["related_total"] == 2 and elsewhere["proposal_id"] not in str(shown["related"])
    assert shown["related"][0]["resources"] == [{"kind": "order", "id": "O-5512"}]
    assert shown["warnings"] == [
        {
            "kind": "same_resource",
            "message": "2 other issue_refund proposals for order O-5512 are pending or approved (listed below).",
        },
        {
            "kind": "exceeds_remaining",
            "message": "Together with this one they ask for 6000 cents; only 4999 cents remain."
            " Approving all of them would fail at execution.",
        },
    ]
    # a decided one stays listed with its status but no longer counts as a live claim on the order
    decide(harness.gateway(), first["proposal_id"], principal("fiona"), "reject", reason="duplicate")
    again = view(harness, third["proposal_id"])
    assert [(r["proposal_id"], r["status"]) for r in again["related"]] == [
        (second["proposal_id"], "pending_approval"),
        (first["proposal_id"], "rejected"),
    ]
    assert again["warnings"] == [
        {
            "kind": "same_resource",
            "message": "1 other issue_refund proposal for order O-5512 is pending or approved (listed below).",
        }
    ]  # 4000 of 4999: together they fit
    # the other tenant's reviewer never sees them; a finished proposal carries no warnings
    gone = view(harness, elsewhere["proposal_id"])
    assert gone["related"] == [] and gone["warnings"] == []
    assert view(harness, first["proposal_id"])["warnings"] == []


def test_a_live_refund_behind_many_finished_ones_is_still_counted_where_both_warn(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search is bounded to the newest `SCAN_LIMIT` proposals of the tool. Before, the pause
    read (and verified) that many of every status and kept the live ones: a busy tool paid for its
    finished history at every pause, and a live refund older than it went uncounted. The warnings
    now count the newest `SCAN_LIMIT` live ones, found by the database."""
    monkeypatch.setattr(related, "SCAN_LIMIT", 2)
    harness = Harness(store)
    live = propose(harness, "t-live", 2000)
    for n in range(3):  # three newer refunds of the order, each rejected
        done = propose(harness, f"t-done{n}", 500)
        decide(harness.gateway(), done["proposal_id"], principal("fiona"), "reject", reason="duplicate")
    calls: list[list[str]] = []
    listing = store.proposals.beside

    def counted(*args: Any, **kwargs: Any) -> Any:
        found = listing(*args, **kwargs)
        calls.append([op.status for _, op in (*found.newest, *found.live, *found.same_effect)])
        return found

    monkeypatch.setattr(store.proposals, "beside", counted)
    paused = propose(harness, "t-new", 2000)
    # the pause read the live one in its one read (not itself, which it holds), none of the
    # finished ones (before issue 31's seventh pass: itself and the live one, through `for_tool`)
    assert calls == [["pending_approval"]]
    expected = [
        {
            "kind": "same_resource",
            "message": "1 other issue_refund proposal for order O-5512 is pending or approved (listed below).",
        }
    ]
    assert paused["warnings"] == expected
    shown = view(harness, paused["proposal_id"])
    assert shown["warnings"] == expected  # the console counts the same live one
    assert live["proposal_id"] not in [r["proposal_id"] for r in shown["related"]]  # listed: the newest 2


def _written(store: Store, proposal: ProposalRecord, status: str, *, keyed: bool) -> None:
    """``proposal`` and its operation in ``status`` written with database access alone: with the
    store's MAC (``keyed``: as the store would have) or without one (forged)."""
    row = {
        **{k: v for k, v in asdict(proposal).items() if k not in ("authentic", "editors")},
        "arguments": json.dumps(proposal.arguments),
        "mac": store.keys.mac("proposal", proposal.sealed()) if keyed else None,
    }
    with store.transaction() as tx:
        tx.execute(
            f"INSERT INTO proposals ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})", tuple(row.values())
        )
        tx.execute(
            "INSERT INTO operations (operation_key, proposal_id, tool, tenant_id, status, attempts,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?, 0, ?, ?)",
            (proposal.operation_key, proposal.proposal_id, proposal.tool, proposal.tenant_id, status)
            + (proposal.created_at,) * 2,
        )


def test_the_pause_reads_what_it_shows_once_and_every_row_is_verified_as_before(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pause's two listings (the live proposals on the order, the identical writes of the
    task) come from one read of the store (issue 31, seventh pass), each row MAC-verified as
    before: a forged identical write is never offered as having run; a forged live refund of the
    order is counted, as before, and the console lists it flagged."""
    harness = Harness(store)
    paused = propose(harness, "t-here", 1000)
    mine = store.proposals.get(paused["proposal_id"])
    assert mine is not None and mine.authentic

    def copy(n: int, thread: str = mine.thread_id) -> ProposalRecord:
        return replace(mine, proposal_id=f"prop_copy{n}", operation_key=f"op_copy{n}", call_id=f"c{n}", thread_id=thread)

    _written(store, copy(1), "succeeded", keyed=True)  # an identical write of the task that ran
    _written(store, copy(2), "succeeded", keyed=False)  # the same, forged
    _written(store, copy(3, "t-there"), "pending_approval", keyed=False)  # a forged live refund elsewhere
    reads: list[str] = []
    for name in ("beside", "for_tool", "same_effect"):
        real = getattr(store.proposals, name)
        monkeypatch.setattr(
            store.proposals, name, lambda *a, _real=real, _name=name, **k: reads.append(_name) or _real(*a, **k)
        )
    request: dict[str, Any] = {"toolgate": {"proposals": [{"proposal_id": mine.proposal_id}]}}
    add_shown(harness.gateway(), request, principal("cust-ada"))
    shown = request["toolgate"]["proposals"][0]
    assert reads == ["beside"]
    assert shown["identical_in_thread"] == [{"operation_key": "op_copy1", "status": "succeeded"}]
    assert "already ran" in shown["note"]
    assert shown["warnings"] == [
        {
            "kind": "same_resource",
            "message": "1 other issue_refund proposal for order O-5512 is pending or approved (listed below).",
        }
    ]
    listed = view(harness, mine.proposal_id)
    assert [(r["proposal_id"], r["status"], r["authentic"]) for r in listed["related"]] == [
        ("prop_copy3", "pending_approval", False),
        ("prop_copy2", "succeeded", False),
        ("prop_copy1", "succeeded", True),
    ]
    assert listed["warnings"] == shown["warnings"]


def test_the_consoles_view_lists_and_counts_the_same_resource_from_one_read(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console's view of a pending proposal lists the newest of every status on its order and
    counts the live ones; both come from one read (issue 31, seventh pass: two before), and a
    finished proposal, which counts none, still lists them from one read."""
    monkeypatch.setattr(related, "SCAN_LIMIT", 2)
    harness = Harness(store)
    live = propose(harness, "t-live", 2000)
    for n in range(2):  # two newer refunds of the order, each rejected
        done = propose(harness, f"t-done{n}", 500)
        decide(harness.gateway(), done["proposal_id"], principal("fiona"), "reject", reason="duplicate")
    paused = propose(harness, "t-new", 1000)
    reads: list[str] = []
    for name in ("beside", "for_tool", "same_effect"):
        real = getattr(store.proposals, name)
        monkeypatch.setattr(
            store.proposals, name, lambda *a, _real=real, _name=name, **k: reads.append(_name) or _real(*a, **k)
        )
    shown = view(harness, paused["proposal_id"])
    assert reads == ["beside"]
    # listed: the newest 2 of every status (itself one of them); counted: the live one behind them
    assert [(r["proposal_id"], r["status"]) for r in shown["related"]] == [(done["proposal_id"], "rejected")]
    assert [w["message"] for w in shown["warnings"]] == [
        "1 other issue_refund proposal for order O-5512 is pending or approved (listed below)."
    ]
    assert live["proposal_id"] not in str(shown["related"])
    del reads[:]
    finished = view(harness, done["proposal_id"])
    assert reads == ["beside"] and finished["warnings"] == []
    assert [r["proposal_id"] for r in finished["related"]] == [paused["proposal_id"]]


def test_a_refund_that_would_fail_at_execution_is_warned_before_approval(store: Store) -> None:
    harness = Harness(store)
    facts = propose(harness, "t-fail", 4999)
    assert view(harness, facts["proposal_id"])["warnings"] == []
    with store.transaction() as tx:  # meanwhile, part of the order was refunded elsewhere
        tx.execute("UPDATE sor_orders SET refunded_cents = 2000 WHERE order_id = 'O-5512'")
    shown = view(harness, facts["proposal_id"])
    assert shown["review_details"]["remaining_cents"] == 2999
    assert shown["review_details"]["remaining_after_cents"] == -2000
    assert shown["warnings"] == [
        {
            "kind": "semantic_check",
            "message": "If approved now, execution would be refused: amount_cents must be at most the"
            " unrefunded amount of the order (2999).",
        }
    ]
    # and it would: approved anyway, the payment system refuses it
    decide(harness.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    delivered = harness.gateway().executor.deliver(facts["operation_key"], worker_id="w-1")
    operation = store.operations.get(facts["operation_key"])
    assert operation is not None and operation.status == "failed", (delivered, operation)
    assert "unrefunded amount" in str(operation.error)


@pytest.mark.parametrize("failure", [RuntimeError("secret=hunter2 in the check"), TimeoutError()])
def test_a_failing_check_is_shown_as_unchecked_and_never_raised(store: Store, failure: BaseException) -> None:
    harness = Harness(store)
    facts = propose(harness, "t-broken", 1000)
    calls: list[tuple[str, str]] = []

    def broken(args: Any, ctx: Any) -> str | None:
        calls.append((ctx.tenant_id, ctx.user_id))
        raise failure

    specs = [
        replace(s, semantic_check=broken) if s.name == "issue_refund" else s
        for s in harness.registry.tools.values()
    ]
    harness.registry = Registry.of(harness.registry.release, specs, harness.system)
    shown = view(harness, facts["proposal_id"])
    assert calls == [("acme", "cust-ada")]  # as the requester, never the reviewer
    (warning,) = shown["warnings"]
    assert warning["kind"] == "check_unavailable" and "could not be checked" in warning["message"]
    assert "hunter2" not in str(shown)
    assert shown["review_details"]["order_id"] == "O-5512"  # the rest of the view stands


@pytest.mark.parametrize("answer", [{"problem": "secret=hunter2"}, 7, ["hunter2"]])
def test_a_check_answering_neither_none_nor_text_is_shown_as_unchecked(store: Store, answer: Any) -> None:
    harness = Harness(store)
    facts = propose(harness, "t-odd-answer", 1000)
    specs = [
        replace(s, semantic_check=lambda args, ctx: answer) if s.name == "issue_refund" else s
        for s in harness.registry.tools.values()
    ]
    harness.registry = Registry.of(harness.registry.release, specs, harness.system)
    shown = view(harness, facts["proposal_id"])
    (warning,) = shown["warnings"]
    assert warning["kind"] == "check_unavailable" and "could not be checked" in warning["message"]
    assert "hunter2" not in str(shown)


def test_the_related_proposals_are_only_those_the_caller_could_open(store: Store) -> None:
    harness = Harness(store)
    staff = propose(harness, "t-staff", 1000, user="rita")  # support acts on ada's order for her
    own = propose(harness, "t-own", 1000)
    # the requester follows her own proposal and sees only her own proposals beside it: none
    mine = view(harness, own["proposal_id"], "cust-ada")
    assert mine["related"] == [] and mine["related_total"] == 0
    assert all(w["kind"] != "same_resource" for w in mine["warnings"])
    # the reviewer sees the staff member's refund of the same order, and is warned
    reviewed = view(harness, own["proposal_id"], "fiona")
    assert [(r["proposal_id"], r["requester"]) for r in reviewed["related"]] == [
        (staff["proposal_id"], "rita")
    ]
    assert [w["kind"] for w in reviewed["warnings"]] == ["same_resource"]


def test_the_interrupt_shows_the_warnings_the_console_shows_its_requester(store: Store) -> None:
    """Before, the approval interrupt (what Studio and chat UIs show) carried the review facts and
    the identical writes but none of the console's warnings: a reviewer answering in a chat UI
    approved a refund the console would have flagged. The payload is readable by whoever may read
    the thread, so it counts the other proposals its requester could open themselves, as the
    console shows them to her."""
    harness = Harness(store)
    staff = propose(harness, "t-staff", 1000, user="rita")  # not ada's to open: never counted for her
    assert staff["warnings"] == []
    first = propose(harness, "t-1", 2000)
    assert first["warnings"] == view(harness, first["proposal_id"], "cust-ada")["warnings"] == []
    propose(harness, "t-2", 2000)
    third = propose(harness, "t-3", 2000)
    assert third["warnings"] == view(harness, third["proposal_id"], "cust-ada")["warnings"]
    assert third["warnings"] == [
        {
            "kind": "same_resource",
            "message": "2 other issue_refund proposals for order O-5512 are pending or approved (listed below).",
        },
        {
            "kind": "exceeds_remaining",
            "message": "Together with this one they ask for 6000 cents; only 4999 cents remain."
            " Approving all of them would fail at execution.",
        },
    ]


def test_the_interrupt_warns_when_the_tools_own_check_would_refuse_now(store: Store) -> None:
    """The check runs each time the node pauses: a wake-up after the order changed shows it."""
    harness = Harness(store)
    call = tool_call("issue_refund", {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}, "c1")
    graph = harness.graph(ScriptedChatModel(responses=[ai("", call), ai("done")]))
    facts = start(graph, ASK, "cust-ada", "t-over")["__interrupt__"][0].value["toolgate"]["proposals"][0]
    assert facts["warnings"] == []
    with store.transaction() as tx:  # meanwhile, part of the order was refunded elsewhere
        tx.execute("UPDATE sor_orders SET refunded_cents = 2000 WHERE order_id = 'O-5512'")
    again = graph.invoke(
        Command(resume={"wake": True}),
        {"configurable": {"thread_id": "t-over"}},
        context=Context(principal=principal("cust-ada")),
    )
    (shown,) = again["__interrupt__"][0].value["toolgate"]["proposals"]
    assert shown["proposal_id"] == facts["proposal_id"]
    assert shown["warnings"] == [
        {
            "kind": "semantic_check",
            "message": "If approved now, execution would be refused: amount_cents must be at most the"
            " unrefunded amount of the order (2999).",
        }
    ]
    assert shown["details"]["remaining_cents"] == 2999
