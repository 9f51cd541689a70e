"""A handler's records unit of work stays open no longer than its call's timeout.

A handler hung inside a unit of work held its transaction for as long as it hung: on PostgreSQL
every later write of its rows waited with no end; on SQLite the write lock of the file the
gateway's store shares, so the delivering worker itself could not store the ``unknown`` outcome
until the handler let go, nor any other call anything. Now the unit of work is ended (rolled
back) once open for its bound, whatever the handler does: idle, hung in its own code, or in a
statement that never ends (stopped). What it tries in it afterwards is refused, and audited when
its thread finally ends. Units of work that ended on their own are never touched.

The protocol's interleavings (`OpenUnit`) are forced directly, without a database or a clock; the
database cases wait for the reaper's end, which comes on its own (bounded waits detect a failure,
they never decide an outcome).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from support import Harness, principal, start

from toolgate.errors import CapabilityDenied
from toolgate.graph.review.decisions import decide
from toolgate.store import PostgresStore, Store, records_expiry
from toolgate.store.handler_access import HANDLER_ACCESS, HandlerAccess, handler_access
from toolgate.store.records_expiry import EXPIRED, OpenUnit
from toolgate.store.records_scope import RecordsScope
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools import loaded_code

SCOPE = RecordsScope("svc", frozenset({"t"}))
ROW = "SELECT refunded_cents FROM sor_orders WHERE order_id = 'O-5512'"
REFUND = {"order_id": "O-5512", "amount_cents": 100, "reason": "damaged"}


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Wait for a state the code under test reaches on its own (the reaper, a late thread)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


@pytest.fixture
def short_units(monkeypatch: pytest.MonkeyPatch) -> None:
    """Units of work bounded by their call's own (short) timeout, with no floor."""
    monkeypatch.setattr(records_expiry, "MIN_UNIT_S", 0.0)


# ---- the protocol, interleavings forced ------------------------------------------------------


class _Connection:
    """What a unit of work's end does to its connection, counted."""

    def __init__(self) -> None:
        self.stopped = 0
        self.closed = 0

    def unit(self, bound_s: float = 3600.0) -> OpenUnit:
        def stop() -> None:
            self.stopped += 1

        def close() -> None:
            self.closed += 1

        return OpenUnit(SCOPE, bound_s, stop=stop, close=close)


def test_an_idle_unit_of_work_is_closed_by_its_end_and_refuses_everything_after() -> None:
    access = HandlerAccess("t", writes=True)
    conn = _Connection()
    with handler_access(access):
        unit = conn.unit()
        with unit.statement():
            pass
        unit.end()  # between two statements: closed at once, from the ender's thread
        assert (conn.stopped, conn.closed) == (0, 1)
        for _ in range(2):
            with pytest.raises(CapabilityDenied) as refused, unit.statement():
                raise AssertionError("a statement ran in an ended unit of work")
            assert (refused.value.capability, refused.value.target) == ("records", "statement")
            assert EXPIRED in str(refused.value)
        assert unit.finish() is False  # never back to its pool
    assert access.denials == [refused.value]  # remembered by the call, once
    unit.end()
    assert (conn.stopped, conn.closed) == (0, 1)


def test_a_unit_of_work_ended_during_a_statement_is_stopped_and_closed_by_its_own_thread() -> None:
    conn = _Connection()
    unit = conn.unit()
    running, ended = threading.Event(), threading.Event()
    raised: list[BaseException] = []

    def handler() -> None:
        with handler_access(HandlerAccess("t", writes=True)):
            try:
                with unit.statement():
                    running.set()
                    assert ended.wait(30)
                    raise RuntimeError("the driver: statement interrupted")  # what the stop causes
            except BaseException as exc:
                raised.append(exc)

    thread = threading.Thread(target=handler)
    thread.start()
    assert running.wait(30)
    unit.end()  # the statement runs: stopped, the connection left to the handler's thread
    assert (conn.stopped, conn.closed) == (1, 0)
    ended.set()
    thread.join(30)
    assert (conn.stopped, conn.closed) == (1, 1)
    assert len(raised) == 1 and isinstance(raised[0], CapabilityDenied)  # never the driver's error
    assert raised[0].__cause__ is None and raised[0].__suppress_context__


def test_a_statement_that_returns_as_its_unit_of_work_ends_still_fails() -> None:
    # the statement finished, but its transaction is gone: what it did is not committed
    conn = _Connection()
    unit = conn.unit()
    with pytest.raises(CapabilityDenied), unit.statement():
        unit.end()
    assert (conn.stopped, conn.closed) == (1, 1)


def test_a_finished_unit_of_work_is_never_touched_by_its_end() -> None:
    conn = _Connection()
    unit = conn.unit()
    with unit.statement():
        pass
    assert unit.finish() is True
    unit.end()
    assert (conn.stopped, conn.closed) == (0, 0) and not unit.ended


def test_the_reaper_ends_a_unit_of_work_at_its_bound_and_only_it() -> None:
    conn, kept = _Connection(), _Connection()
    due, later = conn.unit(bound_s=0.0), kept.unit(bound_s=3600.0)
    _wait_for(lambda: due.ended, "the reaper's end of a unit of work past its bound")
    assert (conn.stopped, conn.closed) == (0, 1)
    assert not later.ended and (kept.stopped, kept.closed) == (0, 0)
    assert later.finish()


def test_trusted_code_outside_a_handler_call_has_no_bound() -> None:
    assert HANDLER_ACCESS.get() is None
    assert OpenUnit.of_call(SCOPE, stop=lambda: None, close=lambda: None) is None


def test_each_door_bounds_its_units_of_work_by_its_own_timeout(store: Store) -> None:
    # a read's handler and its ownership lookup: the tool's timeout and the lookup deadline
    harness = Harness(store)
    spec = harness.registry.tools["lookup_order"]
    seen: dict[str, float | None] = {}

    def handler(args: Any, ctx: Any) -> Any:
        access = HANDLER_ACCESS.get()
        seen["handler"] = access.timeout_s if access is not None else -1.0
        return spec.handler(args, ctx)

    harness.registry = replace(
        harness.registry, tools={**harness.registry.tools, spec.name: replace(spec, handler=handler, timeout_s=7.5)}
    )
    model = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")), ai("ok")]
    )
    start(harness.graph(model), "where is my order", "cust-ada", "t-bounds")
    assert seen == {"handler": 7.5}

    def lookup() -> float | None:
        access = HANDLER_ACCESS.get()
        return access.timeout_s if access is not None else -1.0

    assert loaded_code.lookup(lookup) == loaded_code.LOOKUP_TIMEOUT_S
    checked, future = loaded_code.start_checked([lookup], lambda _i, _a: True, lambda: None)
    loaded_code.wait_checked(checked, future, 30.0, 30.0)
    assert checked.answers[0].result() == loaded_code.LOOKUP_TIMEOUT_S


# ---- on the databases ------------------------------------------------------------------------


def _other_write(store: Store, harness: Harness, cents: int) -> threading.Thread:
    """Another unit of work (trusted code) writing the handler's row, in a thread of its own."""

    def write() -> None:
        with harness.system.records.transaction() as tx:
            tx.execute("UPDATE sor_orders SET refunded_cents = ? WHERE order_id = 'O-5512'", (cents,))

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def _refunded(harness: Harness) -> int:
    with harness.system.records.transaction(write=False) as tx:
        row = tx.one(ROW)
    assert row is not None
    return int(row["refunded_cents"])


def test_a_write_handler_hung_in_its_unit_of_work_holds_no_lock_past_its_timeout(
    store: Store, short_units: None
) -> None:
    harness = Harness(store)
    records = harness.system.records
    release = threading.Event()
    reached: list[str] = []

    def hung(args: Any, ctx: Any) -> Any:
        with records.transaction() as tx:
            tx.execute("UPDATE sor_orders SET refunded_cents = 777 WHERE order_id = 'O-5512'")
            reached.append("wrote")
            assert release.wait(120), "the test never released the handler"
            reached.append("released")
            tx.execute("UPDATE sor_orders SET refunded_cents = 778 WHERE order_id = 'O-5512'")
        reached.append("committed")  # never: its unit of work was ended
        return None

    spec = harness.registry.tools["issue_refund"]
    harness.registry = replace(
        harness.registry, tools={**harness.registry.tools, spec.name: replace(spec, handler=hung, timeout_s=2.0)}
    )
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1"))])
    facts = start(harness.graph(model), "refund O-5512", "cust-ada", "t-hung-unit")["__interrupt__"][0].value
    proposal = facts["toolgate"]["proposals"][0]
    key = proposal["operation_key"]
    decide(harness.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    executor = harness.gateway().executor

    delivery = executor.deliver(key, worker_id="w1")
    # answered while the handler still hangs (on SQLite the outcome could not be stored before)
    assert delivery.status == "unknown" and delivery.error is not None and delivery.error["kind"] == "timeout"
    assert not release.is_set() and executor.overruns.running(key)

    other = _other_write(store, harness, 1)  # its row, its file: free once the unit of work ended
    other.join(60)
    assert not other.is_alive(), "the hung handler's unit of work still holds its lock"
    assert _refunded(harness) == 1

    def denied() -> list[Any]:
        return [e for e in store.audit.events(operation_key=key) if e.event == "handler.capability_denied"]

    release.set()  # its thread ends; its overrun's keeper audits why its late call failed
    _wait_for(lambda: bool(denied()), "the late refusal to be audited")
    assert reached == ["wrote", "released"]  # the statement after its end was refused
    assert _refunded(harness) == 1  # neither 777 nor 778 was ever committed
    op = store.operations.get(key)
    assert op is not None and op.status == "unknown"  # reconciliation asks what happened
    assert [(e.result, e.code, e.detail) for e in denied()] == [
        ("refused", "capability_denied", {"capability": "records", "target": "statement", "tool": "issue_refund"})
    ]
    assert harness.payments() == 0


@pytest.mark.parametrize("write", [True, False], ids=["write", "read"])
def test_a_statement_that_never_ends_is_stopped_at_its_bound(store: Store, short_units: None, write: bool) -> None:
    harness = Harness(store)
    records = harness.system.records
    endless = (  # SQLite: the count of a 16-fold join of the orders with themselves (6^16 rows)
        "SELECT pg_sleep(600)"
        if isinstance(store, PostgresStore)
        else "SELECT count(*) FROM " + ", ".join(f"sor_orders o{i}" for i in range(16))
    )
    access = HandlerAccess("issue_refund" if write else "lookup_order", writes=write, timeout_s=0.5)
    raised: list[BaseException] = []

    def handler() -> None:
        with handler_access(access):
            try:
                with records.transaction(write=write) as tx:
                    if write:
                        tx.execute("UPDATE sor_orders SET refunded_cents = 555 WHERE order_id = 'O-5512'")
                    tx.execute(endless)
            except BaseException as exc:
                raised.append(exc)

    thread = threading.Thread(target=handler, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the endless statement was never stopped"
    assert len(raised) == 1 and isinstance(raised[0], CapabilityDenied), raised
    assert (raised[0].capability, raised[0].target) == ("records", "statement")
    assert access.denials == raised
    assert _refunded(harness) != 555
    other = _other_write(store, harness, 2)
    other.join(60)
    assert not other.is_alive() and _refunded(harness) == 2


def test_a_unit_of_work_that_ends_on_its_own_commits_and_its_connection_goes_back_to_its_pool(
    store: Store,
) -> None:
    harness = Harness(store)
    records = harness.system.records
    access = HandlerAccess("issue_refund", writes=True, timeout_s=5.0)
    with handler_access(access), records.transaction() as tx:
        tx.execute("UPDATE sor_orders SET refunded_cents = 321 WHERE order_id = 'O-5512'")
    assert _refunded(harness) == 321 and access.denials == []
    idle = records._login._idle if isinstance(store, PostgresStore) else records._idle  # type: ignore[attr-defined]
    assert len(idle) == 1  # the handler's connection, then the read's: one, reused
