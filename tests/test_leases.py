"""A handler that overruns its timeout is reconciled, never delivered a second time while it may still act.

The handler blocks on an event (no timing window decides anything): its delivery reports
``unknown``; its owner keeps renewing the claim's lease from the store's clock, so another
worker's recovery, tried again and again past the original lease, finds nothing abandoned; the
in-process reconciliation keeps checking and reports ``in_flight`` instead of redelivering or
dead-lettering. Released, the handler's late success is recorded once, and only one request ever
reached the payment system.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from support import REFUND_REQUEST, Harness, principal, start

from toolgate.graph.delivery.recovery import reconcile, recover, recover_abandoned
from toolgate.graph.review.decisions import decide
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
LEASE_S = 2.0
"""Short enough to outlive a few times in a test, long enough that a loaded machine renews in time
(renewals come every third of it; a lease is by nature a promise to renew before it lapses)."""


def approved_refund(harness: Harness, thread: str) -> str:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    facts = start(harness.graph(model), REFUND_REQUEST, "cust-ada", thread)["__interrupt__"][0].value
    proposal = facts["toolgate"]["proposals"][0]
    decide(harness.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    return str(proposal["operation_key"])


def blocking_refund(harness: Harness) -> tuple[threading.Event, threading.Event]:
    """issue_refund with a 0.2 s timeout whose handler waits for ``release`` before its effect."""
    started, release = threading.Event(), threading.Event()
    spec = harness.registry.tools["issue_refund"]

    def handler(args: Any, ctx: Any) -> Any:
        started.set()
        assert release.wait(60), "the test never released the handler"
        return spec.handler(args, ctx)

    blocking = replace(spec, handler=handler, timeout_s=0.2)
    harness.registry = replace(harness.registry, tools={**harness.registry.tools, spec.name: blocking})
    return started, release


def test_an_overrunning_handler_is_never_redelivered_while_it_runs(harness: Harness) -> None:
    key = approved_refund(harness, "t-overrun")
    started, release = blocking_refund(harness)
    owner = harness.gateway().executor
    delivery = owner.deliver(key, worker_id="owner", lease_s=LEASE_S)
    assert started.is_set() and delivery.status == "unknown" and delivery.claim == "ACQUIRED"

    # the owner's in-process reconciliation: the effect is not there yet, and its handler still runs
    settled = reconcile(owner, key, delays=(0.0, 0.0))
    assert settled.status == "in_flight"
    # another worker (its own executor: it knows only the store) recovers again and again, past the
    # original lease: the owner keeps the lease alive while its handler thread lives
    other = harness.gateway().executor
    deadline = time.monotonic() + 1.5 * LEASE_S
    attempts = 0
    while time.monotonic() < deadline:
        report = recover(other, worker_id="other", grace_s=0, delays=(0.0,))
        attempts += 1
        assert report.recovered == [] and report.redelivered == [], report
        assert [r.status for r in report.reconciled] in ([], ["in_flight"])
    assert attempts >= 2
    op = harness.store.operations.get(key)
    assert op is not None and op.status == "unknown" and op.owner == "owner"
    assert harness.payments() == 0 and harness.store.operations.dead_letters() == []

    release.set()

    def finished() -> list[str]:
        return [
            e.result for e in harness.store.audit.events(operation_key=key) if e.event == "handler.finished"
        ]

    _wait_for(lambda: len(finished()) == 2)
    assert finished() == ["unknown", "completed_late"]
    final = harness.store.operations.get(key)
    assert final is not None and final.status == "succeeded"
    assert harness.payments() == 1 and harness.refunds() == 1
    again = recover(other, worker_id="other", grace_s=0, delays=(0.0,))
    assert again.redelivered == [] and harness.payments() == 1


def test_a_handler_longer_than_its_lease_keeps_its_claim(harness: Harness) -> None:
    key = approved_refund(harness, "t-long")
    spec = harness.registry.tools["issue_refund"]
    entered, release = threading.Event(), threading.Event()

    def slow(args: Any, ctx: Any) -> Any:
        entered.set()
        assert release.wait(60)
        return spec.handler(args, ctx)

    harness.registry = replace(
        harness.registry,
        tools={**harness.registry.tools, spec.name: replace(spec, handler=slow, timeout_s=30)},
    )
    owner = harness.gateway().executor
    result: list[Any] = []
    worker = threading.Thread(
        target=lambda: result.append(owner.deliver(key, worker_id="owner", lease_s=LEASE_S))
    )
    worker.start()
    assert entered.wait(30)
    other = harness.gateway().executor
    deadline = time.monotonic() + 1.5 * LEASE_S
    while time.monotonic() < deadline:  # past the first lease: renewed while the handler runs
        assert recover(other, worker_id="other", grace_s=0, delays=(0.0,)).recovered == []
    release.set()
    worker.join(30)
    assert result and result[0].status == "succeeded" and harness.payments() == 1


def _wait_for(condition: Any, timeout_s: float = 30.0) -> None:
    """Wait for a state the code under test reaches on its own (the late-completion thread)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_a_claim_whose_worker_vanished_is_marked_worker_lost(harness: Harness) -> None:
    """A claim nobody renews (its worker died between the claim and the effect) lapses: recovery
    marks the operation ``unknown`` with the error kind ``worker_lost``, never retryable, and no
    handler ran."""
    key = approved_refund(harness, "t-vanished")
    assert harness.store.operations.claim(key, "gone", 0.05) is not None
    time.sleep(0.2)
    assert recover_abandoned(harness.gateway().executor, grace_s=0) == [key]
    op = harness.store.operations.get(key)
    assert op is not None and op.status == "unknown" and op.error is not None
    assert (op.error["kind"], op.error["retryable"]) == ("worker_lost", False)
    assert harness.payments() == 0


def test_a_claim_renewed_after_recovery_read_it_stale_is_not_marked_lost(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery lists the lapsed claims, then marks each ``unknown``; a worker that was only
    slow renews its lease between the two (its heartbeat lands after the listing). The change
    is conditional on the lease still being lapsed by the store's clock, so the live worker keeps
    its claim and stores its own outcome (on the base it was marked ``worker_lost`` regardless,
    and its real outcome could no longer be stored)."""
    key = approved_refund(harness, "t-renewed")
    store = harness.store
    assert store.operations.claim(key, "slow", 0.05) is not None
    _wait_for(lambda: bool(store.operations.stale_executing(0)))
    listed = store.operations.stale_executing

    def heartbeat_after_listing(grace_s: float) -> Any:
        stale = listed(grace_s)
        assert store.operations.renew_lease(key, "slow", 60) is True  # the slow worker's heartbeat
        return stale

    monkeypatch.setattr(store.operations, "stale_executing", heartbeat_after_listing)
    assert recover_abandoned(harness.gateway().executor, grace_s=0) == []
    op = store.operations.get(key)
    assert op is not None and (op.status, op.owner, op.error) == ("executing", "slow", None)
    assert not [e for e in store.audit.events(operation_key=key) if e.event == "operation.recovered"]
    done = store.operations.transition(key, "executing", "succeeded", result={"ok": True}, owner="slow")
    assert done.status == "succeeded"
