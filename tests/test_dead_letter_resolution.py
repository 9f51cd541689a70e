"""Settling a dead-lettered operation (`toolgate.graph.delivery.dead_letters`): the approval rules hold,
nobody settles their own write, and every refusal is audited and changes nothing.

World: rita (support) asks for a refund, fiona (finance) approves it, the delivery's outcome is
unknown and its lease lapses (the store's clock moves, nothing sleeps): the operation is
dead-lettered. Then people try to record its outcome.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from support import REFUND_REQUEST, Harness, principal, shift_store_clock, start

from toolgate.errors import ApprovalError
from toolgate.graph.delivery.dead_letters import resolve_dead_letter
from toolgate.graph.gateway import Gateway
from toolgate.graph.review.decisions import decide
from toolgate.store import Store
from toolgate.store.audit import Auditor
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}


def dead_lettered(store: Store, monkeypatch: pytest.MonkeyPatch) -> tuple[Gateway, str]:
    harness = Harness(store)
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    facts = start(harness.graph(model), REFUND_REQUEST, "rita", "t-dead")["__interrupt__"][0].value
    proposal = facts["toolgate"]["proposals"][0]
    gw = harness.gateway()
    decide(gw, proposal["proposal_id"], principal("fiona"), "approve")
    key = str(proposal["operation_key"])
    assert store.operations.claim(key, "doomed-worker", 30.0) is not None
    store.operations.transition(key, "executing", "unknown")
    shift_store_clock(monkeypatch, store, timedelta(seconds=60))  # the claim's lease lapsed
    assert store.operations.dead_letter(key, "outcome unknown", {"tool": "issue_refund"}) is not None
    return gw, key


def snapshot(store: Store, key: str) -> tuple[Any, ...]:
    op = store.operations.get(key)
    assert op is not None
    letters = [(d.operation_key, d.resolution, d.resolved_by) for d in store.operations.dead_letters(open_only=False)]
    return op.status, op.error, letters


def refusals(store: Store) -> list[tuple[str | None, str | None]]:
    """(who, code) of each ``deadletter.refused`` event (actors are keyed hashes in the log)."""
    people = {Auditor(store, "x").actor(p): p for p in ("rita", "omar", "gina", "sam", "fiona")}
    return [
        (people.get(e.actor_id or ""), e.code)
        for e in store.audit.events()
        if e.event == "deadletter.refused"
    ]


@pytest.mark.parametrize(
    ("who", "code"),
    [
        ("rita", "self_resolution"),  # the requester, although she holds a reviewing role (support)
        ("omar", "missing_role"),  # an operator: no role of the refund's approval class
        ("gina", "cross_tenant"),  # a reviewer of another tenant
    ],
)
def test_who_may_not_settle_it_is_refused_audited_and_nothing_changes(
    store: Store, monkeypatch: pytest.MonkeyPatch, who: str, code: str
) -> None:
    gw, key = dead_lettered(store, monkeypatch)
    before = snapshot(store, key)
    with pytest.raises(ApprovalError) as refused:
        resolve_dead_letter(gw, principal(who), key, "succeeded", "found pay_1")
    assert refused.value.code == code
    assert snapshot(store, key) == before
    assert refusals(store) == [(who, code)]
    assert not [e for e in store.audit.events() if e.event == "deadletter.resolved"]


def test_another_reviewer_settles_it_once_with_the_evidence_and_a_second_is_refused(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw, key = dead_lettered(store, monkeypatch)
    settled = resolve_dead_letter(gw, principal("sam"), key, "failed", "no payment found for the key")
    assert settled.status == "failed" and settled.error == {
        "kind": "resolved_failed",
        "message": "no payment found for the key",
    }
    (letter,) = store.operations.dead_letters(open_only=False)
    assert (letter.resolution, letter.resolved_by) == ("failed", "sam")
    (event,) = [e for e in store.audit.events() if e.event == "deadletter.resolved"]
    assert (event.actor_id, event.result, event.operation_key) == (gw.auditor.actor("sam"), "failed", key)
    before = snapshot(store, key)
    with pytest.raises(ApprovalError) as again:
        resolve_dead_letter(gw, principal("fiona"), key, "succeeded", "found it after all")
    assert again.value.code == "not_dead_lettered"
    assert snapshot(store, key) == before and refusals(store) == [("fiona", "not_dead_lettered")]


def test_two_reviewers_settling_at_once_record_one_outcome(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw, key = dead_lettered(store, monkeypatch)
    barrier = threading.Barrier(2)

    def settle(who: str, outcome: str) -> str:
        barrier.wait()  # both past their own checks' start at the same moment
        try:
            return resolve_dead_letter(gw, principal(who), key, outcome, f"{who} checked").status
        except ApprovalError as exc:
            return exc.code

    with ThreadPoolExecutor(2) as pool:
        results = sorted(pool.map(settle, ["sam", "fiona"], ["succeeded", "failed"]))
    won = [r for r in results if r in ("succeeded", "failed")]
    lost = [r for r in results if r not in ("succeeded", "failed")]
    assert len(won) == 1 and lost and lost[0] in ("not_open", "not_dead_lettered")
    op = store.operations.get(key)
    assert op is not None and op.status == won[0]
    assert len([e for e in store.audit.events() if e.event == "deadletter.resolved"]) == 1
    assert len(refusals(store)) == 1


def test_an_operation_row_pointing_at_another_proposal_is_refused(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw, key = dead_lettered(store, monkeypatch)
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c2")), ai("done")])
    other = start(Harness(store).graph(model), REFUND_REQUEST, "cust-ada", "t-other")["__interrupt__"][
        0
    ].value
    with store.transaction() as tx:  # re-pointed with database access: ada's request, not rita's
        tx.execute(
            "UPDATE operations SET proposal_id = ? WHERE operation_key = ?",
            (other["toolgate"]["proposals"][0]["proposal_id"], key),
        )
    before = snapshot(store, key)
    with pytest.raises(ApprovalError) as refused:
        resolve_dead_letter(gw, principal("rita"), key, "succeeded", "found pay_1")
    assert refused.value.code == "operation_mismatch"
    assert snapshot(store, key) == before and refusals(store) == [("rita", "operation_mismatch")]


def test_an_unknown_outcome_word_or_operation_changes_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw, key = dead_lettered(store, monkeypatch)
    before = snapshot(store, key)
    with pytest.raises(ApprovalError) as bad:
        resolve_dead_letter(gw, principal("sam"), key, "maybe", "x")
    assert bad.value.code == "invalid_outcome"
    with pytest.raises(Exception, match="no operation"):
        resolve_dead_letter(gw, principal("sam"), "op_nope", "succeeded", "x")
    assert snapshot(store, key) == before
    assert refusals(store) == [("sam", "not_found")]
