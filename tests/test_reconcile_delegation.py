"""An unknown outcome is reconciled as the requesting user even after the approval window: the
claim seals the user's credentials again for the write's status checks (``reconcile:<key>``),
until the configured reconcile schedule can have ended (never before the proposal's expiry, never
past a one-day cap), that expiry bound in the associated data. Asserted at a real local
downstream: the check carries the requester's token and settles the operation with its one
effect. A flipped, re-dated or another operation's seal is ``delegation_invalid`` and one past
its own expiry ``delegation_expired`` (the check never runs; audited); the seal never executes
anything: an expired approval is still refused, and the seal put in the proposal's place does not
open. SQLite and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from downstream_fake import Downstream, refund_tool, serve
from support import REFUND_REQUEST, Harness, principal, shift_store_clock, start
from test_handler_delegation import ADA_TOKEN, REFUND, events, sealed_rows

from toolgate.clock import parse_iso
from toolgate.graph.delivery.delegation import RECONCILE_CAP_S, reconcile_key
from toolgate.graph.delivery.recovery import reconcile
from toolgate.graph.review.decisions import decide
from toolgate.store import Store
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools import Registry

SLOW_SCHEDULE = "600,600"
"""A reconcile schedule (20 minutes) that outlasts the 15-minute approval window."""


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    fake = Downstream(tokens={ADA_TOKEN})
    server, thread = serve(fake)
    yield fake
    server.shutdown()
    server.server_close()
    thread.join(10)


@pytest.fixture(autouse=True)
def schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLGATE_RECONCILE_DELAYS", SLOW_SCHEDULE)


def lost_response() -> None:
    raise ConnectionResetError("the response was lost after the effect")


def lost_before_effect(args: Any, ctx: Any) -> Any:
    raise ConnectionResetError("the connection dropped before the request was sent")


def harness_for(store: Store, downstream: Downstream, **overrides: Any) -> Harness:
    harness = Harness(store)
    refund = refund_tool(harness.registry.tools["issue_refund"], downstream, **overrides)
    specs = [refund if s.name == "issue_refund" else s for s in harness.registry.tools.values()]
    harness.registry = Registry.of(harness.registry.release, specs, harness.system)
    return harness


def approved(harness: Harness, thread: str) -> tuple[str, str]:
    """cust-ada's refund (her CRM token forwarded), approved by fiona: (operation key, proposal id)."""
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    state = start(
        harness.graph(model), REFUND_REQUEST, "cust-ada", thread, credentials={"crm_token": ADA_TOKEN}
    )
    facts = state["__interrupt__"][0].value["toolgate"]["proposals"][0]
    decide(harness.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    return facts["operation_key"], facts["proposal_id"]


def unknown(harness: Harness, thread: str) -> tuple[str, str]:
    """An approved refund delivered and left ``unknown``."""
    key, proposal_id = approved(harness, thread)
    assert harness.gateway().executor.deliver(key, worker_id="w1").status == "unknown"
    return key, proposal_id


def past(store: Store, when: str, monkeypatch: pytest.MonkeyPatch, by: timedelta) -> None:
    """Move the store's clock to ``by`` after ``when``."""
    shift_store_clock(monkeypatch, store, parse_iso(when) - store.now() + by)


def test_an_unknown_outcome_is_checked_as_the_requester_after_the_approval_window(
    store: Store, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = harness_for(store, downstream, after_effect=lost_response)
    key, proposal_id = unknown(harness, "t-rdeleg-late")
    proposal = store.proposals.get(proposal_id)
    sealed = store.delegations.get(reconcile_key(key))
    assert proposal is not None and sealed is not None
    assert ADA_TOKEN not in sealed.sealed
    assert parse_iso(sealed.expires_at) > parse_iso(proposal.expires_at) + timedelta(minutes=5)

    past(store, proposal.expires_at, monkeypatch, timedelta(minutes=1))  # the approval window is over
    found = reconcile(harness.gateway().executor, key, delays=(0.0,))
    assert (found.status, found.found, found.checks) == ("succeeded", True, 1)
    assert downstream.authorizations("GET") == [f"Bearer {ADA_TOKEN}"]  # the requester's, not none
    assert len(downstream.effects) == 1
    op = store.operations.get(key)
    assert op is not None and op.status == "succeeded" and op.result is not None
    assert op.result["refund_id"] == "R-1"
    assert events(store, key, "delegation.refused") == []
    assert sealed_rows(store) == []  # settled: both seals are gone


@pytest.mark.parametrize("tamper", ["flipped", "redated", "moved", "promoted_proposal"])
def test_a_tampered_reconcile_seal_never_runs_the_check(
    store: Store, downstream: Downstream, monkeypatch: pytest.MonkeyPatch, tamper: str
) -> None:
    harness = harness_for(store, downstream, after_effect=lost_response)
    key, _ = unknown(harness, f"t-rdeleg-{tamper}")
    other, _ = unknown(harness, f"t-rdeleg-{tamper}-other")
    record, theirs = store.delegations.get(reconcile_key(key)), store.delegations.get(reconcile_key(other))
    assert record is not None and theirs is not None
    if tamper == "flipped":
        body = record.sealed
        flipped = body[:-3] + ("A" if body[-3] != "A" else "B") + body[-2:]
        store.delegations.put(reconcile_key(key), flipped, record.expires_at)
    elif tamper == "redated":  # a DB-only attacker stretches the stored expiry
        later = record.expires_at.replace(record.expires_at[:4], str(int(record.expires_at[:4]) + 1))
        store.delegations.put(reconcile_key(key), record.sealed, later)
    elif tamper == "moved":  # another operation's seal (same user, same tenant) copied onto this one
        store.delegations.put(reconcile_key(key), theirs.sealed, theirs.expires_at)
    else:  # the proposal's own seal (expiring with the approval) put in the reconcile seal's place
        proposal_seal = store.delegations.get(key)
        assert proposal_seal is not None
        store.delegations.put(reconcile_key(key), proposal_seal.sealed, record.expires_at)
    posts = len(downstream.authorizations("POST"))
    # the claims' leases lapsed; the approval (and its own seal) is still live: no fallback to it
    shift_store_clock(monkeypatch, store, timedelta(minutes=2))

    found = reconcile(harness.gateway().executor, key, delays=(0.0, 0.0))
    assert (found.status, found.checks) == ("dead_lettered", 1)  # refused once, never run without it
    assert downstream.authorizations("GET") == []  # the status check never ran
    assert len(downstream.authorizations("POST")) == posts and len(downstream.effects) == 2
    assert [e.code for e in events(store, key, "delegation.refused")] == ["delegation_invalid"]
    (letter,) = store.operations.dead_letters()
    assert letter.context["history"] == [{"check": "1", "error": "delegation_invalid"}]
    assert events(store, other, "delegation.refused") == []


def test_a_reconcile_seal_past_its_own_expiry_is_refused(
    store: Store, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = harness_for(store, downstream, after_effect=lost_response)
    key, _ = unknown(harness, "t-rdeleg-expired")
    record = store.delegations.get(reconcile_key(key))
    assert record is not None
    past(store, record.expires_at, monkeypatch, timedelta(seconds=1))  # a store clock past the schedule
    found = reconcile(harness.gateway().executor, key, delays=(0.0,))
    assert (found.status, found.checks) == ("dead_lettered", 1)
    assert downstream.authorizations("GET") == []
    assert [e.code for e in events(store, key, "delegation.refused")] == ["delegation_expired"]


@pytest.mark.parametrize(
    ("delays", "expected"),
    [("0", "proposal"), ("100000,100000", "cap")],
)
def test_the_reconcile_seal_lasts_at_least_the_approval_and_at_most_the_cap(
    store: Store, downstream: Downstream, monkeypatch: pytest.MonkeyPatch, delays: str, expected: str
) -> None:
    monkeypatch.setenv("TOOLGATE_RECONCILE_DELAYS", delays)
    harness = harness_for(store, downstream, after_effect=lost_response)
    before = store.now()
    key, proposal_id = unknown(harness, f"t-rdeleg-window-{expected}")
    after = store.now()
    record, proposal = store.delegations.get(reconcile_key(key)), store.proposals.get(proposal_id)
    assert record is not None and proposal is not None
    if expected == "proposal":  # a short schedule never ends the seal before the approval's own
        assert record.expires_at == proposal.expires_at
    else:  # a schedule of days is cut at the hard cap, judged on the store's clock
        cap = timedelta(seconds=RECONCILE_CAP_S)
        assert before + cap <= parse_iso(record.expires_at) <= after + cap


def test_an_expired_approval_is_never_executed_again_though_its_check_runs(
    store: Store, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = harness_for(store, downstream, handler=lost_before_effect, retry_safe_when_absent=True)
    key, proposal_id = unknown(harness, "t-rdeleg-redeliver")
    proposal = store.proposals.get(proposal_id)
    assert proposal is not None
    past(store, proposal.expires_at, monkeypatch, timedelta(minutes=1))
    gateway = harness.gateway()
    found = reconcile(gateway.executor, key, delays=(0.0,))
    assert (found.status, found.found) == ("approved", False)  # checked as Ada: nothing happened
    assert downstream.authorizations("GET") == [f"Bearer {ADA_TOKEN}"]

    delivery = gateway.executor.deliver(key, worker_id="w2")  # a NEW execution of an expired approval
    assert delivery.status == "expired" and delivery.claim == "NOT_ATTEMPTED"
    assert downstream.authorizations("POST") == [] and downstream.effects == {}
    assert [e.event for e in store.audit.events(operation_key=key)].count("handler.started") == 1
    assert store.delegations.purge() == 2 and sealed_rows(store) == []  # terminal: both seals go


def test_a_fresh_delivery_of_an_expired_approval_is_refused_and_seals_nothing(
    store: Store, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = harness_for(store, downstream)
    key, proposal_id = approved(harness, "t-rdeleg-fresh")
    proposal = store.proposals.get(proposal_id)
    assert proposal is not None
    past(store, proposal.expires_at, monkeypatch, timedelta(seconds=1))
    delivery = harness.gateway().executor.deliver(key, worker_id="w1")
    assert delivery.status == "expired" and delivery.claim == "NOT_ATTEMPTED"
    assert downstream.requests == [] and downstream.effects == {}
    assert store.delegations.get(reconcile_key(key)) is None


def test_the_reconcile_seal_never_stands_in_for_the_proposals_seal(
    store: Store, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = harness_for(store, downstream, handler=lost_before_effect, retry_safe_when_absent=True)
    key, proposal_id = unknown(harness, "t-rdeleg-promote")
    proposal = store.proposals.get(proposal_id)
    assert proposal is not None
    shift_store_clock(monkeypatch, store, timedelta(minutes=2))  # the claim's lease lapsed; approval live
    gateway = harness.gateway()
    assert reconcile(gateway.executor, key, delays=(0.0,)).status == "approved"
    record = store.delegations.get(reconcile_key(key))
    assert record is not None
    store.delegations.put(key, record.sealed, proposal.expires_at)  # offered to the execution
    harness.registry = Registry.of(
        harness.registry.release,
        [
            refund_tool(s, downstream) if s.name == "issue_refund" else s
            for s in harness.registry.tools.values()
        ],
        harness.system,
    )
    delivery = harness.gateway().executor.deliver(key, worker_id="w2")
    assert delivery.status == "failed" and delivery.error is not None
    assert delivery.error["kind"] == "delegation_invalid"
    assert downstream.authorizations("POST") == []  # the handler never ran
    assert [e.code for e in events(store, key, "delegation.refused")] == ["delegation_invalid"]
    assert sealed_rows(store) == []


class Skewed:
    """A worker's own clock, ``by`` off the true time (never an authority on expiry)."""

    def __init__(self, by: timedelta) -> None:
        self.by = by

    def now(self) -> datetime:
        return datetime.now(UTC) + self.by


@pytest.mark.parametrize("skew", [timedelta(days=3), -timedelta(days=3)])
def test_a_workers_skewed_clock_neither_expires_nor_revives_the_reconcile_seal(
    store: Store, downstream: Downstream, monkeypatch: pytest.MonkeyPatch, skew: timedelta
) -> None:
    harness = harness_for(store, downstream, after_effect=lost_response)
    live, _ = unknown(harness, "t-rdeleg-skew-live")
    stale, _ = unknown(harness, "t-rdeleg-skew-stale")
    executor = dataclasses.replace(harness.gateway().executor, clock=Skewed(skew))
    assert reconcile(executor, live, delays=(0.0,)).status == "succeeded"  # judged on the store's clock
    assert downstream.authorizations("GET") == [f"Bearer {ADA_TOKEN}"]

    record = store.delegations.get(reconcile_key(stale))
    assert record is not None
    past(store, record.expires_at, monkeypatch, timedelta(seconds=1))
    assert reconcile(executor, stale, delays=(0.0,)).status == "dead_lettered"
    assert len(downstream.authorizations("GET")) == 1  # the stale seal's check never ran
    assert [e.code for e in events(store, stale, "delegation.refused")] == ["delegation_expired"]
