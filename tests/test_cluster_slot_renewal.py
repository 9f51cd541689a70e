"""A held cluster admission slot is renewed while its call runs, so its TTL can be short.

`admitted` starts a `SlotHeartbeat` thread that renews its slot every third of the TTL. Here the
test decides when each renewal happens: `Pacer` replaces `SlotHeartbeat.renew` for the heartbeats
of one store connection with one that waits for the test's go-ahead and hands the store's answer
back, and the store's clock (every connection the test opens, as other processes would) is moved
by `StoreClock`. So every step waits on an event, a semaphore or a queue, never on a sleep; a
store-clock minute passes in no time. A second `Store` on the same database plays the other
process. Each test runs on embedded SQLite and on a real PostgreSQL server.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support import TEST_KEY, audit_events

import toolgate.clock
from toolgate.clock import iso, parse_iso
from toolgate.errors import StoreError
from toolgate.policy import cluster_slots
from toolgate.policy.admission import Overloaded, admitted, process_admission
from toolgate.policy.cluster_slots import THREAD_PREFIX, ClusterSlot, SlotHeartbeat
from toolgate.store import PostgresStore, SQLiteStore, Store
from toolgate.store.audit import Auditor

RELEASE = "ops-tools/1.0.0"
WAIT = 60.0
"""Upper bound of every wait (a failure, not a pace: each wait ends when its event fires)."""
TTL = 30
SCOPE = "model:acme"


@pytest.fixture(autouse=True)
def _cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster cap of one model request for each tenant, a 30 s TTL, and beats 30 ms apart."""
    monkeypatch.setenv("TOOLGATE_CLUSTER_MODEL_REQUESTS_PER_TENANT", "1")
    monkeypatch.setenv("TOOLGATE_CLUSTER_TOOL_EXECUTIONS_PER_TENANT", "0")
    monkeypatch.setenv("TOOLGATE_CLUSTER_SLOT_TTL_S", str(TTL))
    monkeypatch.setenv("TOOLGATE_MAX_CONCURRENT_MODEL_REQUESTS_PER_TENANT", "16")
    monkeypatch.setenv("TOOLGATE_ADMISSION_WAIT_S", "0.05")
    monkeypatch.setattr(cluster_slots, "RENEW_EVERY", 0.001)


@pytest.fixture
def other(store: Store, request: pytest.FixtureRequest) -> Iterator[Store]:
    """Another process's connection to ``store``'s database."""
    if isinstance(store, PostgresStore):
        opened: Store = PostgresStore(request.getfixturevalue("pg_migrated_url"), key=TEST_KEY)
    else:
        assert isinstance(store, SQLiteStore)
        opened = SQLiteStore(store.path, key=TEST_KEY)
    yield opened
    opened.close()


class StoreClock:
    """Moves the store's clock, as seen through every given connection, by ``offset``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *stores: Store) -> None:
        self.offset = timedelta(0)
        for store in stores:
            read = store._tx_now  # type: ignore[attr-defined]
            monkeypatch.setattr(
                store, "_tx_now", lambda tx, read=read: iso(parse_iso(read(tx)) + self.offset)
            )
            if isinstance(store, SQLiteStore):  # `calibrated_now` is `now` there: it follows
                now = store.now
                monkeypatch.setattr(store, "now", lambda now=now: now() + self.offset)
            else:  # the calibrated clock counts from the server's own readings
                calibrated = store.calibrated_now
                monkeypatch.setattr(
                    store, "calibrated_now", lambda calibrated=calibrated: calibrated() + self.offset
                )
                monkeypatch.setattr(store, "_clock_sql", lambda: None)  # a read's time: `now`

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


class Pacer:
    """Renewals of the heartbeats on ``paced`` happen only when the test calls `beat`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, paced: Store) -> None:
        self._gate = threading.Semaphore(0)
        self._failing = False
        self._answers: queue.Queue[bool | str] = queue.Queue()
        self._closing = threading.Event()
        self.asked = 0
        real = SlotHeartbeat.renew

        def renew(beat: SlotHeartbeat) -> bool:
            if beat.auditor.store is not paced:
                return real(beat)
            self.asked += 1
            assert self._gate.acquire(timeout=WAIT), "the test never let this renewal through"
            if self._closing.is_set():  # the test is done: no more renewals, just the block's exit
                assert beat._stop.wait(WAIT)
                return True
            if self._failing:
                self._answers.put("StoreError")
                raise StoreError("the store cannot be reached (simulated)")
            answer = real(beat)
            self._answers.put(answer)
            return answer

        monkeypatch.setattr(SlotHeartbeat, "renew", renew)

    def beat(self, *, fail: bool = False) -> bool | str:
        """Let one renewal through (failing with a `StoreError` when ``fail``); the store's answer."""
        self._failing = fail
        self._gate.release()
        return self._answers.get(timeout=WAIT)

    def close(self) -> None:
        """Let a heartbeat still renewing wait for its stop instead."""
        self._closing.set()
        self._gate.release()


class Call:
    """``admitted(store, "model", tenant)`` in a thread of its own, held until `finish`."""

    def __init__(self, store: Store, tenant: str = "acme", **fields: Any) -> None:
        self.entered, self._leave = threading.Event(), threading.Event()
        self.ran: list[str] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(store, tenant, fields), daemon=True)
        self._thread.start()
        assert self.entered.wait(WAIT), f"the call was never admitted: {self.error!r}"

    def _run(self, store: Store, tenant: str, fields: dict[str, Any]) -> None:
        try:
            with admitted(Auditor(store=store, release=RELEASE), "model", tenant, **fields):
                self.ran.append("started")
                self.entered.set()
                assert self._leave.wait(WAIT)
                self.ran.append("finished")
        except BaseException as exc:  # reported to the test by finish()
            self.error = exc
            self.entered.set()

    def finish(self) -> None:
        self._leave.set()
        self._thread.join(WAIT)
        assert not self._thread.is_alive() and self.error is None, self.error


def heartbeats() -> list[threading.Thread]:
    """Heartbeat threads alive now."""
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t.is_alive()]


def holders(store: Store) -> list[str]:
    return [row.holder for row in store.slots.held(SCOPE)]


def refused_elsewhere(other: Store) -> bool:
    """Whether another process asking for the tenant's model slot is refused with scope cluster."""
    try:
        with admitted(Auditor(store=other, release=RELEASE), "model", "acme"):
            return False
    except Overloaded as exc:
        assert (exc.code, exc.scope, exc.limit) == ("overloaded", "cluster", 1)
        return True


def lost_events(store: Store) -> list[tuple[Any, ...]]:
    return [
        (e.result, e.code, e.tenant_id, e.call_id, e.detail)
        for e in audit_events(store, "admission.slot_lost")
    ]


def lost_detail(why: str, slot: int = 0) -> dict[str, Any]:
    return {"kind": "model", "scope": SCOPE, "slot": slot, "tenant_id": "acme", "ttl_s": TTL, "why": why}


def test_a_call_held_for_several_ttls_keeps_its_slot_and_the_cap_holds_throughout(
    store: Store, other: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = StoreClock(monkeypatch, store, other)
    pacer = Pacer(monkeypatch, store)
    call = Call(store, call_id="c-long")
    try:
        [mine] = holders(store)
        for _ in range(6):  # 120 s of the store's clock: four TTLs
            clock.advance(TTL - 10)  # still within the TTL since the last renewal
            assert holders(store) == [mine] and refused_elsewhere(other)
            assert pacer.beat() is True
            [row] = store.slots.held(SCOPE)
            assert row.holder == mine and parse_iso(row.expires_at) >= store.now() + timedelta(
                seconds=TTL - 1
            )
            assert holders(other) == [mine] and refused_elsewhere(other)  # between two beats too
        assert call.ran == ["started"] and len(heartbeats()) == 1
    finally:
        pacer.close()
        call.finish()
    assert call.ran == ["started", "finished"]
    assert holders(store) == [] and heartbeats() == []  # given back at the end, the heartbeat gone
    assert lost_events(store) == []
    assert [e.detail["scope"] for e in audit_events(store, "admission.overloaded")] == ["cluster"] * 12
    assert refused_elsewhere(other) is False  # free again
    assert process_admission().in_flight("model", "acme") == 0


def test_a_holder_that_stops_renewing_loses_its_slot_one_ttl_after_its_last_renewal(
    store: Store, other: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=cluster_slots.__name__)
    clock = StoreClock(monkeypatch, store, other)
    pacer = Pacer(monkeypatch, store)
    call = Call(store, call_id="c-hung")
    [mine] = holders(store)
    try:
        clock.advance(20)
        assert pacer.beat() is True  # the last renewal: live until +50 on the store's clock
        # from here on the holder renews nothing more (a crashed or hung process)
        clock.advance(TTL - 1)  # +49: within one TTL of that renewal
        assert holders(other) == [mine] and refused_elsewhere(other)
        clock.advance(2)  # +51: lapsed
        assert holders(other) == []
        entered, leave = threading.Event(), threading.Event()

        def take_over() -> None:
            with admitted(Auditor(store=other, release=RELEASE), "model", "acme"):
                entered.set()
                assert leave.wait(WAIT)

        newcomer = threading.Thread(target=take_over, daemon=True)
        newcomer.start()
        assert entered.wait(WAIT)
        [theirs] = holders(other)
        assert theirs != mine
        assert pacer.beat() is False  # the old holder wakes up: its slot is not revived
        assert holders(store) == [theirs]
        call.finish()  # the running call was not stopped, and its give-back frees nothing of theirs
        assert call.ran == ["started", "finished"]
        assert holders(store) == [theirs]
        assert lost_events(store) == [("lost", "slot_lost", "acme", "c-hung", lost_detail("lapsed"))]
        assert "slot model:acme/0 lost (lapsed)" in caplog.text
        leave.set()
        newcomer.join(WAIT)
        assert not newcomer.is_alive()
    finally:
        pacer.close()
        call.finish()
    assert holders(store) == [] and heartbeats() == []
    assert len(lost_events(store)) == 1  # once


def test_renewing_a_tampered_or_foreign_slot_loses_it_and_changes_nothing(
    store: Store, other: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = StoreClock(monkeypatch, store, other)
    assert other.slots.take(SCOPE, "someone-else", 1, TTL) == 0
    rows = store.slots.held(SCOPE)
    auditor = Auditor(store=store, release=RELEASE)
    forged = [
        (ClusterSlot(SCOPE, 0, "not-the-holder"), "a holder id that is not the row's"),
        (ClusterSlot(SCOPE, 7, "someone-else"), "a slot number nobody holds"),
        (ClusterSlot("model:beta", 0, "someone-else"), "another scope"),
    ]
    for held, _why in forged:
        beat = SlotHeartbeat(auditor, held, TTL, tenant_id="acme")
        assert beat.renew() is False
    assert store.slots.held(SCOPE) == rows  # nothing changed
    clock.advance(TTL + 1)  # lapsed: even its own holder cannot revive it
    assert store.slots.renew(SCOPE, 0, "someone-else", TTL) is False and store.slots.held(SCOPE) == []

    pacer = Pacer(monkeypatch, store)  # a heartbeat on a slot that is not (any more) its own stops
    beat = SlotHeartbeat.start(auditor, ClusterSlot(SCOPE, 0, "someone-else"), TTL, tenant_id="acme")
    try:
        assert pacer.beat() is False
    finally:
        beat.stop()
    assert (beat.lost, beat.renewals) == ("lapsed", 0) and heartbeats() == []
    assert lost_events(store) == [("lost", "slot_lost", "acme", None, lost_detail("lapsed"))]


def test_a_store_error_while_renewing_is_retried_until_the_slot_would_have_lapsed(
    store: Store, other: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=cluster_slots.__name__)
    StoreClock(monkeypatch, store, other)
    elapsed = [0.0]  # the heartbeat's monotonic clock, moved by the test
    real = cluster_slots.monotonic
    monkeypatch.setattr(cluster_slots, "monotonic", lambda: real() + elapsed[0])
    pacer = Pacer(monkeypatch, store)
    call = Call(store, call_id="c-flaky")
    try:
        [mine] = holders(store)
        assert pacer.beat(fail=True) == "StoreError"  # logged, retried
        assert pacer.beat() is True  # renewed: the TTL runs again from here
        elapsed[0] += TTL / 2
        assert pacer.beat(fail=True) == "StoreError"  # still within the TTL of that renewal
        assert holders(other) == [mine] and refused_elsewhere(other)
        elapsed[0] += TTL / 2 + 1
        assert pacer.beat(fail=True) == "StoreError"  # past it: counted as lost, no more tries
        call.finish()
        assert call.ran == ["started", "finished"]
    finally:
        pacer.close()
        call.finish()
    assert lost_events(store) == [("lost", "slot_lost", "acme", "c-flaky", lost_detail("store_unreachable"))]
    assert caplog.text.count("not renewed") == 2 and "lost (store_unreachable)" in caplog.text
    assert pacer.asked == 4 and holders(store) == [] and heartbeats() == []


def test_a_skewed_process_clock_does_not_change_when_a_slot_lapses(
    store: Store, other: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    if isinstance(store, SQLiteStore):
        pytest.skip("SQLite's store clock is the host clock: there is no process clock apart from it")
    clock = StoreClock(monkeypatch, store, other)
    pacer = Pacer(monkeypatch, store)
    call = Call(store)

    def skew(hours: int) -> None:
        moment = datetime.now(UTC) + timedelta(hours=hours)
        monkeypatch.setattr(
            toolgate.clock, "SYSTEM_CLOCK", type("Skewed", (), {"now": lambda self: moment})()
        )
        assert abs(toolgate.clock.utcnow() - datetime.now(UTC) - timedelta(hours=hours)) < timedelta(
            minutes=1
        )

    try:
        [mine] = holders(store)
        skew(-1)  # an hour behind: the renewal still runs from the server's clock
        start = store.now()
        assert pacer.beat() is True
        [row] = store.slots.held(SCOPE)
        assert (
            start + timedelta(seconds=TTL)
            <= parse_iso(row.expires_at)
            <= store.now() + timedelta(seconds=TTL)
        )
        skew(+1)  # an hour ahead frees nothing
        assert holders(other) == [mine] and refused_elsewhere(other)
        skew(-1)
        clock.advance(TTL + 1)  # the server's clock passes the TTL: an hour behind keeps nothing
        assert holders(other) == [] and not refused_elsewhere(other)
        assert pacer.beat() is False
    finally:
        pacer.close()
        call.finish()
    assert [e.detail["why"] for e in audit_events(store, "admission.slot_lost")] == ["lapsed"]
    assert holders(store) == [] and heartbeats() == []


def test_the_heartbeat_thread_is_gone_after_the_block_even_when_it_raises(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    renewed = threading.Event()
    real: Callable[[SlotHeartbeat], bool] = SlotHeartbeat.renew

    def renew(beat: SlotHeartbeat) -> bool:
        answer = real(beat)
        renewed.set()
        return answer

    monkeypatch.setattr(SlotHeartbeat, "renew", renew)  # unpaced: every 30 ms, as configured
    auditor = Auditor(store=store, release=RELEASE)
    assert heartbeats() == []

    class Boom(Exception):
        pass

    with pytest.raises(Boom), admitted(auditor, "model", "acme"):
        assert renewed.wait(WAIT)  # it really renews while the block runs
        [beating] = heartbeats()
        assert beating.daemon and beating.name == f"{THREAD_PREFIX}:{SCOPE}:0"
        raise Boom
    assert heartbeats() == [] and not beating.is_alive()
    assert holders(store) == [] and process_admission().in_flight("model", "acme") == 0

    renewed.clear()
    with admitted(auditor, "model", "acme"):
        assert renewed.wait(WAIT)
        assert len(heartbeats()) == 1
    assert heartbeats() == [] and holders(store) == []

    assert store.slots.take(SCOPE, "someone-else", 1, TTL) == 0  # refused: no heartbeat is started
    with pytest.raises(Overloaded), admitted(auditor, "model", "acme"):
        pass
    assert heartbeats() == [] and lost_events(store) == []
