"""An approved write and its status check act as the *requesting* user, asserted at a real local
downstream: the user's forwarded ``crm_token`` is sealed with the proposal, unsealed for the
execution (resumed by a reviewer who sends a token of their own) and for the status check, and
deleted once the operation ends. A revoked token is refused by the downstream and the operation
fails with ``credential_refused`` (never retried, never unknown); a tampered sealed record fails
closed (``delegation_invalid``, audited) and one past its proposal's expiry (a skewed clock) is
refused as ``delegation_expired``. SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from downstream_fake import Downstream, refund_tool, serve
from langgraph.types import Command
from support import REFUND_REQUEST, Harness, principal, shift_store_clock, start, tool_messages

from toolgate.graph import Context
from toolgate.graph.delivery.recovery import reconcile
from toolgate.graph.review.decisions import decide
from toolgate.store import Store
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools import Registry

REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
ADA_TOKEN = "crm_ada_own_token_0001"
FIONA_TOKEN = "crm_fiona_reviewer_token_0002"


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    fake = Downstream(tokens={ADA_TOKEN, FIONA_TOKEN})
    server, thread = serve(fake)
    yield fake
    server.shutdown()
    server.server_close()
    thread.join(10)


def wired(harness: Harness, downstream: Downstream, **overrides: Any) -> Harness:
    """``harness`` with ``issue_refund`` acting through ``downstream``."""
    refund = refund_tool(harness.registry.tools["issue_refund"], downstream, **overrides)
    specs = [refund if s.name == "issue_refund" else s for s in harness.registry.tools.values()]
    harness.registry = Registry.of(harness.registry.release, specs, harness.system)
    return harness


def proposed(harness: Harness, thread: str) -> tuple[Any, dict[str, Any]]:
    """cust-ada asks for the refund, forwarding her CRM token (and one the tool did not declare)."""
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    graph = harness.graph(model)
    credentials = {"crm_token": ADA_TOKEN, "hr_token": "hr_not_declared_0003"}
    state = start(graph, REFUND_REQUEST, "cust-ada", thread, credentials=credentials)
    return graph, state["__interrupt__"][0].value["toolgate"]["proposals"][0]


def sealed_rows(store: Store) -> list[dict[str, Any]]:
    with store.transaction(write=False) as tx:
        return tx.execute("SELECT * FROM sealed_delegations")


def events(store: Store, key: str, name: str) -> list[Any]:
    return [e for e in store.audit.events(operation_key=key) if e.event == name]


def test_the_approved_write_runs_with_the_requesters_token_not_the_reviewers(
    store: Store, downstream: Downstream
) -> None:
    harness = wired(Harness(store), downstream)
    graph, facts = proposed(harness, "t-deleg-ok")
    rows = sealed_rows(store)
    assert [r["operation_key"] for r in rows] == [facts["operation_key"]]
    assert ADA_TOKEN not in str(rows) and "hr_not_declared" not in str(rows)  # sealed, never plain
    assert downstream.requests == []  # nothing runs before approval

    done = graph.invoke(
        Command(resume={"decisions": [{"type": "approve"}]}),
        {"configurable": {"thread_id": "t-deleg-ok"}},
        context=Context(principal=principal("fiona"), credentials={"crm_token": FIONA_TOKEN}),
    )
    assert done["status"] == "done"
    assert '"completed"' in str(tool_messages(done)[-1].content)
    assert downstream.authorizations() == [f"Bearer {ADA_TOKEN}"]  # the requester's, once
    op = store.operations.get(facts["operation_key"])
    assert op is not None and op.status == "succeeded" and op.result is not None
    assert op.result["refund_id"] == "R-1"
    assert sealed_rows(store) == []  # deleted once the operation is terminal


def test_the_status_check_of_an_unknown_outcome_runs_with_the_requesters_token(
    store: Store, downstream: Downstream
) -> None:
    def lost_response() -> None:
        raise ConnectionResetError("the response was lost after the effect")

    harness = wired(Harness(store), downstream, after_effect=lost_response)
    _, facts = proposed(harness, "t-deleg-unknown")
    gateway = harness.gateway()
    decide(gateway, facts["proposal_id"], principal("fiona"), "approve")
    delivery = gateway.executor.deliver(facts["operation_key"], worker_id="w1")
    assert delivery.status == "unknown"
    key = facts["operation_key"]  # both still needed: the status check acts as the user too
    assert sorted(r["operation_key"] for r in sealed_rows(store)) == [key, f"reconcile:{key}"]

    found = reconcile(gateway.executor, facts["operation_key"], delays=(0.0,))
    assert found.status == "succeeded" and found.found
    assert downstream.authorizations("GET") == [f"Bearer {ADA_TOKEN}"]
    assert downstream.authorizations() == [f"Bearer {ADA_TOKEN}"] * 2  # the write, then its status check
    assert len(downstream.effects) == 1


def test_a_revoked_token_is_refused_downstream_and_the_write_fails_without_retry(
    store: Store, downstream: Downstream
) -> None:
    harness = wired(Harness(store), downstream)
    _, facts = proposed(harness, "t-deleg-revoked")
    downstream.revoked.add(ADA_TOKEN)  # the user's CRM session was revoked after the proposal
    gateway = harness.gateway()
    decide(gateway, facts["proposal_id"], principal("fiona"), "approve")
    key = facts["operation_key"]
    delivery = gateway.executor.deliver(key, worker_id="w1")
    assert delivery.status == "failed" and delivery.error is not None
    assert (delivery.error["kind"], delivery.error["retryable"]) == ("credential_refused", False)
    again = gateway.executor.deliver(key, worker_id="w2")
    assert again.duplicate and again.status == "failed"  # the stored outcome, never a second try
    assert downstream.authorizations() == [f"Bearer {ADA_TOKEN}"]  # refused once, not retried
    assert downstream.effects == {}
    assert [e.code for e in events(store, key, "handler.finished")] == ["credential_refused"]
    assert sealed_rows(store) == []


@pytest.mark.parametrize("tamper", ["flipped", "moved", "expiry"])
def test_a_tampered_sealed_record_fails_closed_and_is_audited(
    store: Store, downstream: Downstream, tamper: str
) -> None:
    harness = wired(Harness(store), downstream)
    _, facts = proposed(harness, f"t-deleg-{tamper}")
    _, other = proposed(harness, f"t-deleg-{tamper}-other")
    key = facts["operation_key"]
    record = store.delegations.get(key)
    assert record is not None
    if tamper == "flipped":
        body = record.sealed
        store.delegations.put(
            key, body[:-3] + ("A" if body[-3] != "A" else "B") + body[-2:], record.expires_at
        )
    elif tamper == "moved":  # another operation's sealed credentials (same user) copied onto this one
        moved = store.delegations.get(other["operation_key"])
        assert moved is not None
        store.delegations.put(key, moved.sealed, record.expires_at)
    else:  # the stored expiry stretched: the bound associated data no longer matches
        later = record.expires_at.replace(record.expires_at[:4], str(int(record.expires_at[:4]) + 1))
        store.delegations.put(key, record.sealed, later)
    gateway = harness.gateway()
    decide(gateway, facts["proposal_id"], principal("fiona"), "approve")
    delivery = gateway.executor.deliver(key, worker_id="w1")
    assert delivery.status == "failed" and delivery.error is not None
    assert delivery.error["kind"] == "delegation_invalid"
    assert downstream.requests == []  # the handler never ran
    refused = events(store, key, "delegation.refused")
    assert [e.code for e in refused] == ["delegation_invalid"]
    assert store.delegations.get(key) is None


def test_a_status_check_past_the_proposals_expiry_is_refused_and_goes_to_a_person(
    store: Store, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    def lost_response() -> None:
        raise ConnectionResetError("lost")

    harness = wired(Harness(store), downstream, after_effect=lost_response)
    _, facts = proposed(harness, "t-deleg-expired")
    gateway = harness.gateway()
    decide(gateway, facts["proposal_id"], principal("fiona"), "approve")
    key = facts["operation_key"]
    assert gateway.executor.deliver(key, worker_id="w1").status == "unknown"
    shift_store_clock(monkeypatch, store, timedelta(days=2))  # the store's clock is past the expiry
    found = reconcile(gateway.executor, key, delays=(0.0, 0.0))
    assert found.status == "dead_lettered" and found.checks == 1  # refused once, never run without it
    assert downstream.authorizations("GET") == []
    assert [e.code for e in events(store, key, "delegation.refused")] == ["delegation_expired"]
    letters = store.operations.dead_letters()
    assert letters[0].context["history"] == [{"check": "1", "error": "delegation_expired"}]


def test_a_reviewers_edit_keeps_the_requesters_token_not_the_editors(
    store: Store, downstream: Downstream
) -> None:
    from toolgate.graph.review.edits import edit_proposal

    harness = wired(Harness(store), downstream)
    _, facts = proposed(harness, "t-deleg-edit")
    gateway = harness.gateway()
    edited = edit_proposal(
        gateway,
        facts["proposal_id"],
        principal("fiona"),
        tool="issue_refund",
        arguments={**REFUND, "amount_cents": 2500},
    )
    assert store.delegations.get(edited.operation_key) is not None  # carried over, sealed anew
    decide(gateway, edited.proposal_id, principal("stella"), "approve")
    delivery = gateway.executor.deliver(edited.operation_key, worker_id="w1")
    assert delivery.status == "succeeded" and delivery.result is not None
    assert delivery.result["amount_cents"] == 2500
    assert downstream.authorizations() == [f"Bearer {ADA_TOKEN}"]
    assert store.delegations.purge() == 1  # the original's (rejected by the edit) goes too
    assert sealed_rows(store) == []
