"""An approved write runs on its requester's authority as it stands at the claim, judged with
their identity as it is now and the store's time: a scope or role taken away since the proposal,
a business rule the write now breaks (a rule of hours it is now outside of, the limit of the
roles they still hold). Before, visibility and business policy were judged only when the model
proposed the call: a refund ran after its requester lost the scope to ask for refunds, and a
restart approved after its allowed hours ran out of hours. Each refusal happens before any claim,
is audited ``operation.refused`` with its code, and leaves the operation approved: a rule of hours
lets it run later (until the approval expires)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from support import Harness, audit_events, principal, shift_store_clock

from toolgate.clock import utcnow
from toolgate.policy.rules import AllowedHoursRule

REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}


def _refusals(harness: Harness, operation_key: str) -> list[str | None]:
    return [
        e.code for e in audit_events(harness.store, "operation.refused") if e.operation_key == operation_key
    ]


@pytest.mark.parametrize(
    ("roles", "scopes", "code"),
    [
        ({"customer"}, {"orders:read"}, "unauthorized"),  # the scope to ask for refunds taken away
        ({"guest"}, {"orders:read", "refunds:request"}, "policy_violation"),  # no role with a refund limit
    ],
)
def test_a_requester_who_could_no_longer_propose_the_write_does_not_run_it(
    harness: Harness, roles: set[str], scopes: set[str], code: str
) -> None:
    proposal, gw = harness.approved_refund(harness.registry, f"t-lost-{code}")
    assert harness.store.operations.get(proposal["operation_key"]).status == "approved"  # type: ignore[union-attr]
    gw.directory.change_roles(
        "cust-ada", roles=frozenset(roles), scopes=frozenset(scopes), by=principal("ivy")
    )
    delivery = gw.executor.deliver(proposal["operation_key"], worker_id="w")
    assert delivery.claim == "NOT_ATTEMPTED" and delivery.reason.startswith(f"{code}: ")
    assert harness.handler_calls["issue_refund"] == 0 and harness.payments() == 0
    assert harness.store.operations.get(proposal["operation_key"]).status == "approved"  # type: ignore[union-attr]
    assert _refusals(harness, proposal["operation_key"]) == [code]
    # given back what they lost, the same approval runs, once
    gw.directory.change_roles(
        "cust-ada",
        roles=frozenset({"customer"}),
        scopes=frozenset({"orders:read", "refunds:request"}),
        by=principal("ivy"),
    )
    assert gw.executor.deliver(proposal["operation_key"], worker_id="w").claim == "ACQUIRED"
    assert harness.handler_calls["issue_refund"] == 1 and harness.payments() == 1


def test_a_write_approved_inside_its_hours_waits_outside_them_and_runs_inside_again(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hours are judged by the store's clock at the claim, whatever the worker's clock says
    (the store's clock is moved here, the process's is not)."""
    now = harness.store.now()
    hours = AllowedHoursRule(
        id="refund.office_hours",
        tool="issue_refund",
        timezone="UTC",
        start=(now - timedelta(hours=1)).time().replace(second=0, microsecond=0),
        end=(now + timedelta(hours=1)).time().replace(second=0, microsecond=0),
        exempt_roles=frozenset(),
        reason="Refunds are only paid out in office hours.",
    )
    harness.policy = dataclasses.replace(
        harness.policy, rules=(hours, *harness.policy.rules), approval_minutes=24 * 60
    )
    proposal, gw = harness.approved_refund(harness.registry, "t-hours")
    key = proposal["operation_key"]
    with monkeypatch.context() as night:
        shift_store_clock(night, harness.store, timedelta(hours=3))  # the store's clock: out of hours
        delivery = gw.executor.deliver(key, worker_id="w")
        assert delivery.claim == "NOT_ATTEMPTED" and delivery.reason.startswith("policy_violation: ")
        assert "office hours" in delivery.reason
    assert harness.handler_calls["issue_refund"] == 0 and harness.payments() == 0
    assert harness.store.operations.get(key).status == "approved"  # type: ignore[union-attr]
    assert _refusals(harness, key) == ["policy_violation"]
    assert abs(utcnow() - harness.store.now()) < timedelta(minutes=5)  # back inside the hours
    delivered = gw.executor.deliver(key, worker_id="w")
    assert delivered.claim == "ACQUIRED" and delivered.status == "succeeded"
    assert harness.handler_calls["issue_refund"] == 1 and harness.payments() == 1
    assert gw.executor.deliver(key, worker_id="w").duplicate  # and never again
    assert harness.handler_calls["issue_refund"] == 1
