"""A worker backs off an operation it cannot deliver, ever further apart (`toolgate.graph.worker.backoff`).

Each consecutive refusal (or error) of one operation doubles the delay before this worker picks
it again, from ``retry_after_s`` up to ``retry_max_s``; a deferral for load keeps the short fixed
delay; a delivery, or the operation leaving the due set, forgets it. The loop is driven pass by
pass on an injected monotonic clock, so pick times are exact. The back-off is scheduling only:
two real concurrent workers that backed off the same operations still deliver each exactly once
(the claim decides). On SQLite and PostgreSQL, with the one-tool release of
`tests/test_worker_run.py`.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from test_delivery_refusals import handler_runs, refusals
from test_worker_admission import Holder, claims, limits, overloaded
from test_worker_run import approved, effects, gateway_on, propose, status
from worker_run_release import TOOL

from toolgate.graph.worker.backoff import Backoff
from toolgate.graph.worker.loop import LoopOptions, WorkerLoop
from toolgate.store import Store

WAIT_S = 120.0
"""Upper bound of any wait (a stuck thread fails the test, never hangs it)."""


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def loop_on(gw: Any, clock: Clock, lines: list[dict[str, Any]], **options: Any) -> WorkerLoop:
    opts = LoopOptions(worker_id=options.pop("worker_id", "w-backoff"), **options)
    return WorkerLoop(gw.executor, opts, monotonic=clock, report=lines.append)


def picks(loop: WorkerLoop, clock: Clock, lines: list[dict[str, Any]], times: list[float]) -> list[float]:
    """One pass at each of ``times``; the times at which a pass tried an operation."""
    seen: list[float] = []
    for now in times:
        clock.now = now
        before = len(lines)
        loop.deliver_due()
        seen += [now] * (len(lines) - before)
    return seen


def tampered(store: Store, gw: Any, label: str) -> str:
    """A proposal whose operation row was flipped to approved with no decision at all."""
    key, _ = propose(gw, label)
    store.operations.transition(key, "pending_approval", "approved")
    return key


def named(store: Store, key: str, event: str) -> int:
    return sum(e.event == event for e in store.audit.events(operation_key=key))


def test_the_delay_doubles_per_refusal_up_to_the_cap_and_a_load_deferral_never_grows_it() -> None:
    backoff = Backoff(base_s=2.0, cap_s=5.0)
    assert backoff.ready("op", 0.0) and backoff.streak("op") == 0
    assert [backoff.refused("op", 0.0) for _ in range(4)] == [2.0, 4.0, 5.0, 5.0]
    assert backoff.deferred("op", 10.0, 0.5) == 0.5 and backoff.streak("op") == 4
    assert not backoff.ready("op", 10.4) and backoff.ready("op", 10.5)
    assert backoff.refused("op", 11.0) == 5.0  # the streak goes on after a load deferral
    assert Backoff(base_s=3.0, cap_s=1.0).refused("op", 0.0) == 3.0  # a cap below the base is the base
    assert Backoff(base_s=0.0, cap_s=900.0).refused("op", 0.0) == 0.0  # no delay stays none
    backoff.keep_due({"other"})
    assert "op" not in backoff and backoff.streak("op") == 0 and backoff.refused("op", 0.0) == 2.0


def test_a_refused_operation_is_picked_ever_further_apart_and_audited_per_attempt(store: Store) -> None:
    gw = gateway_on(store)
    key = tampered(store, gw, "tampered")
    clock, lines = Clock(), []
    loop = loop_on(gw, clock, lines, retry_after_s=1.0, retry_max_s=8.0)

    passes = [tick / 2 for tick in range(81)]  # a pass every half second for 40 seconds
    assert picks(loop, clock, lines, passes) == [0.0, 1.0, 3.0, 7.0, 15.0, 23.0, 31.0, 39.0]
    assert [line["retry_in_s"] for line in lines] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0]
    assert {(line["operation_key"], line["claim"], line["status"]) for line in lines} == {
        (key, "NOT_ATTEMPTED", "refused")
    }
    # one refusal audited per attempt (8), not per pass (81); the handler never ran
    audited = [e for e in store.audit.events(operation_key=key) if e.event == "approval.refused_at_execution"]
    assert len(audited) == loop.summary.refused == 8
    assert {(e.result, e.code) for e in audited} == {("refused", "approval_invalid")}
    assert status(store, key) == "approved" and handler_runs(store, key) == 0
    assert named(store, key, "operation.claimed") == 0 and loop.summary.claimed == 0
    assert loop.backoff.streak(key) == 8 and loop.backoff.waiting(clock.now) == 1

    # a clock that jumps a day ahead only brings the next try forward: the checks refuse it again
    assert picks(loop, clock, lines, [86_400.0, 86_400.5]) == [86_400.0]
    assert named(store, key, "approval.refused_at_execution") == 9 and handler_runs(store, key) == 0
    assert status(store, key) == "approved" and lines[-1]["retry_in_s"] == 8.0


def test_a_deferral_for_load_is_retried_at_the_short_delay(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits(monkeypatch, process=2, tenant=1)
    gw = gateway_on(store)
    key = approved(gw, "busy")
    clock, lines = Clock(), []
    loop = loop_on(gw, clock, lines, retry_after_s=1.0, retry_max_s=8.0)

    with Holder(gw, "acme"):  # the tenant's one tool slot is taken: every try is deferred
        assert picks(loop, clock, lines, [tick / 2 for tick in range(9)]) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert {(line["status"], line["retry_in_s"]) for line in lines} == {("deferred", 1.0)}
    assert len(overloaded(store, key)) == loop.summary.deferred == 5
    assert loop.backoff.streak(key) == 0 and claims(store, key) == 0

    clock.now = 4.5
    assert loop.deliver_due() == 0 and effects(store, key) == 0  # its next pick is at 5.0
    clock.now = 5.0
    assert loop.deliver_due() == 1
    assert key not in loop.backoff and status(store, key) == "succeeded" and effects(store, key) == 1


def test_a_deferral_for_an_open_circuit_keeps_the_short_delay(store: Store) -> None:
    gw = gateway_on(store)
    key = approved(gw, "open-circuit")
    breaker = gw.executor.breakers.get(gw.executor.registry.breaker_key(TOOL, "acme"))
    for _ in range(breaker.failure_threshold):  # the tool's dependency failed: the breaker opens
        breaker.record_failure()
    assert breaker.state == "open"
    clock, lines = Clock(), []
    loop = loop_on(gw, clock, lines, retry_after_s=1.0, retry_max_s=8.0)

    assert picks(loop, clock, lines, [tick / 2 for tick in range(7)]) == [0.0, 1.0, 2.0, 3.0]
    assert {(line["status"], line["retry_in_s"]) for line in lines} == {("deferred", 1.0)}
    deferred = [e for e in store.audit.events(operation_key=key) if e.event == "operation.deferred"]
    assert [e.code for e in deferred] == ["circuit_open"] * 4 and loop.summary.deferred == 4
    assert loop.backoff.streak(key) == 0 and status(store, key) == "approved"
    assert handler_runs(store, key) == 0 and claims(store, key) == 0


def test_an_operation_fixed_after_a_refusal_is_delivered_at_its_next_pick_and_forgotten(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = gateway_on(store)
    key = approved(gw, "fixed-later")
    op = store.operations.get(key)
    assert op is not None and op.proposal_id
    with store.transaction() as tx:  # a tampered record: the operation row no longer names its proposal
        tx.execute("UPDATE operations SET proposal_id = NULL WHERE operation_key = ?", (key,))
    fresh = gateway_on(store)
    clock, lines = Clock(), []
    loop = loop_on(fresh, clock, lines, retry_after_s=1.0)

    def whole_trail(**_: Any) -> Any:
        raise AssertionError("a refusal read the operation's whole audit trail")

    with monkeypatch.context() as patched:  # the once-only refusal asks one narrow question
        patched.setattr(store.audit, "events", whole_trail)
        assert picks(loop, clock, lines, [0.0, 0.5, 1.0, 2.0]) == [0.0, 1.0]
    assert [(line["status"], line["retry_in_s"]) for line in lines] == [("refused", 1.0), ("refused", 2.0)]
    assert len(refusals(store, key)) == 1 and handler_runs(store, key) == 0

    with store.transaction() as tx:  # the row is restored
        tx.execute("UPDATE operations SET proposal_id = ? WHERE operation_key = ?", (op.proposal_id, key))
    clock.now = 2.5
    assert loop.deliver_due() == 0 and handler_runs(store, key) == 0  # still left alone until 3.0
    clock.now = 3.0
    assert loop.deliver_due() == 1
    assert lines[-1] == {"operation_key": key, "claim": "ACQUIRED", "status": "completed"}
    assert key not in loop.backoff and len(loop.backoff) == 0
    assert status(store, key) == "succeeded" and effects(store, key) == 1
    assert named(store, key, "handler.started") == 1


def test_an_operation_that_leaves_the_due_set_is_forgotten(store: Store) -> None:
    gw = gateway_on(store)
    keys = [tampered(store, gw, f"leaves-{n}") for n in range(3)]
    clock, lines = Clock(), []
    loop = loop_on(gw, clock, lines, retry_after_s=60.0)
    assert picks(loop, clock, lines, [0.0]) == [0.0] * 3 and len(loop.backoff) == 3

    for key in keys[:2]:
        store.operations.transition(key, "approved", "expired")
    assert picks(loop, clock, lines, [1.0]) == []  # still backing off the one left ...
    assert [k in loop.backoff for k in keys] == [False, False, True]  # ... and only that one
    assert loop.backoff.streak(keys[2]) == 1


def test_a_delivery_that_raises_backs_off_like_a_refusal(store: Store) -> None:
    gw = gateway_on(store)
    key = approved(gw, "broken")
    tried: list[str] = []

    def broken(operation_key: str) -> Any:
        tried.append(operation_key)
        raise RuntimeError("the operation's release failed to load")

    clock, lines = Clock(), []
    loop = loop_on(gw, clock, lines, retry_after_s=2.0, retry_max_s=5.0)
    loop.executor_for = broken
    assert picks(loop, clock, lines, [float(t) for t in range(13)]) == [0.0, 2.0, 6.0, 11.0]
    assert [(line["claim"], line["error"], line["retry_in_s"]) for line in lines] == [
        ("ERROR", "RuntimeError", 2.0),
        ("ERROR", "RuntimeError", 4.0),
        ("ERROR", "RuntimeError", 5.0),
        ("ERROR", "RuntimeError", 5.0),
    ]
    assert tried == [key] * 4 and loop.summary.errors == 4
    assert status(store, key) == "approved" and handler_runs(store, key) == 0

    drain = loop_on(gw, clock, [], once=True, retry_after_s=2.0)
    drain.executor_for = broken
    summary = drain.run()
    assert (summary.stopped, summary.errors, summary.backing_off) == ("drained", 1, 1)
    assert summary.facts()["backing_off"] == 1


def test_two_workers_backing_off_the_same_operations_deliver_each_once(store: Store) -> None:
    gw = gateway_on(store)
    keys = [approved(gw, f"pair-{n}") for n in range(4)]
    proposals = {k: store.operations.get(k).proposal_id for k in keys}  # type: ignore[union-attr]
    with store.transaction() as tx:
        for key in keys:
            tx.execute("UPDATE operations SET proposal_id = NULL WHERE operation_key = ?", (key,))
    clock = Clock()
    loops = [
        loop_on(gateway_on(store), clock, [], worker_id=f"w-pair-{n}", batch=len(keys), retry_after_s=1.0)
        for n in range(2)
    ]
    for loop in loops:  # both refused every operation: both pick them again at 1.0
        assert loop.deliver_due() == 0 and loop.summary.refused == len(keys)
    with store.transaction() as tx:
        for key, proposal_id in proposals.items():
            tx.execute("UPDATE operations SET proposal_id = ? WHERE operation_key = ?", (proposal_id, key))

    clock.now = 1.0
    barrier = threading.Barrier(len(loops))
    won: dict[int, int] = {}
    failed: list[BaseException] = []

    def work(n: int) -> None:
        try:
            barrier.wait(WAIT_S)
            won[n] = loops[n].deliver_due()
        except BaseException as exc:  # reported by the main thread
            failed.append(exc)

    threads = [threading.Thread(target=work, args=(n,), daemon=True) for n in range(len(loops))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert not any(thread.is_alive() for thread in threads) and failed == []

    assert sum(won.values()) == len(keys) == sum(loop.summary.claimed for loop in loops)
    assert [effects(store, k) for k in keys] == [1] * len(keys)  # one effect row each
    assert [claims(store, k) for k in keys] == [1] * len(keys)
    assert [status(store, k) for k in keys] == ["succeeded"] * len(keys)
    assert [len(loop.backoff) for loop in loops] == [0, 0]
    clock.now = 60.0
    assert [loop.deliver_due() for loop in loops] == [0, 0] and effects(store) == len(keys)
