"""A PostgreSQL write transaction sends nothing until its first answered statement (or its
chain-head script, or its COMMIT), and BEGIN travels in that first script (issue 31): opening a
transaction costs no round trip of its own. Its time is read once, by the server, in that
transaction (with the script that opens it when asked first, with the chain head when that reads
it first); it commits what its block did, and rolls back everything when the block raises,
leaving the connection ready for the next unit of work. Several reads a caller needs together
travel as one script (`Tx.many`). The store's clock for judgments no write transaction makes
again (`Store.calibrated_now`) costs no round trip while a recent reading stands."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from support import TEST_KEY, shift_store_clock, wire_round_trips
from test_store_contract import make_approval, make_proposal

from toolgate.clock import iso, parse_iso
from toolgate.errors import InvalidTransitionError, StoreError
from toolgate.store import AuditEventIn, PostgresStore
from toolgate.store.audit_records import KeyedEventIn
from toolgate.store.base import CLOCK_REUSE_S
from toolgate.store.chain import verify_chain
from toolgate.store.leases import ResourcesBusy
from toolgate.store.postgres import CONTENTION_PAUSE, NOW_SQL
from toolgate.store.records import Settlement
from toolgate.store.tx import Written

_TX_ID = "SELECT txid_current() AS id, pg_current_xact_id_if_assigned() IS NOT NULL AS wrote"


def test_a_write_reads_the_store_clock_once_with_its_begin_and_a_read_asks_for_it(
    pg_migrated_url: str,
) -> None:
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    sent: list[str] = []
    try:
        with store.transaction() as tx:
            inner = tx.execute

            def counted(sql: str, params: tuple[object, ...] = ()) -> list[dict[str, object]]:
                sent.append(sql)
                return inner(sql, params)

            tx.execute = counted  # type: ignore[method-assign]
            first = store._tx_now(tx)
            second = store._tx_now(tx)
            later = tx.one(f"SELECT {NOW_SQL} AS now")
            in_tx = tx.one(
                "SELECT transaction_timestamp() <= clock_timestamp() AS open, txid_current() > 0 AS tx"
            )
        assert first == second and len(sent) == 2  # the test's own two probes: _tx_now sent none
        assert later is not None and parse_iso(first) <= parse_iso(str(later["now"]))
        assert in_tx == {"open": True, "tx": True}
        with store.transaction(write=False) as tx:  # autocommit: the read asks for the time itself
            assert parse_iso(store._tx_now(tx)) >= parse_iso(first)
    finally:
        store.close()


def test_values_bound_on_the_client_arrive_exactly_and_a_wrong_count_fails_the_transaction(
    pg_migrated_url: str,
) -> None:
    # statements queued with `send` travel in a script, bound on the client (`_PgTx.bound`):
    # hostile text, a placeholder inside a value, NULL, numbers and a text with ``%`` arrive as sent
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    values: list[Any] = [
        "it's", "back\\slash'; DROP TABLE bound_probe; --", "a ? b", "$tg$ END$tg$", "ünï", "100%", None, "",
    ]
    try:
        with store.transaction() as tx:
            tx.execute("CREATE TABLE bound_probe (n INTEGER PRIMARY KEY, v TEXT, x BIGINT, f DOUBLE PRECISION)")
        with store.transaction() as tx:
            for n, value in enumerate(values):
                tx.send("INSERT INTO bound_probe (n, v, x, f) VALUES (?, ?, ?, ?)", (n, value, -(2**40), -0.5))
            tx.send("UPDATE bound_probe SET v = v || '%%' WHERE n = ?", (5,))  # psycopg's own binding
            rows = tx.execute("SELECT n, v, x, f FROM bound_probe ORDER BY n")
        assert [r["v"] for r in rows] == [*values[:5], "100%%", *values[6:]]
        assert {(r["x"], r["f"]) for r in rows} == {(-(2**40), -0.5)}
        with pytest.raises(StoreError, match="2 placeholders but 1"), store.transaction() as tx:
            tx.send("INSERT INTO bound_probe (n, v) VALUES (?, ?)", (99,))
        with store.transaction(write=False) as tx:  # nothing of the failed transaction stayed
            assert tx.one("SELECT COUNT(*) AS n FROM bound_probe") == {"n": len(values)}
    finally:
        store.close()


def test_a_write_commits_its_block_and_rolls_all_of_it_back_when_the_block_raises(
    pg_migrated_url: str,
) -> None:
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        with store.transaction() as tx:
            tx.execute("CREATE TABLE tx_probe (n INTEGER PRIMARY KEY)")
            tx.execute("INSERT INTO tx_probe (n) VALUES (?)", (1,))
        with pytest.raises(RuntimeError, match="the block failed"), store.transaction() as tx:
            tx.execute("INSERT INTO tx_probe (n) VALUES (?)", (2,))
            raise RuntimeError("the block failed")
        with pytest.raises(Exception, match="duplicate key"), store.transaction() as tx:
            tx.execute("INSERT INTO tx_probe (n) VALUES (?)", (3,))
            tx.execute("INSERT INTO tx_probe (n) VALUES (?)", (1,))  # refused: 3 goes with it
        with store.transaction(write=False) as tx:  # the one connection is idle and usable again
            assert [r["n"] for r in tx.execute("SELECT n FROM tx_probe ORDER BY n")] == [1]
            assert tx.one("SELECT 1 AS one") == {"one": 1}
    finally:
        store.close()


def test_begin_travels_with_the_first_script_and_a_write_that_sent_nothing_costs_nothing(
    pg_migrated_url: str,
) -> None:
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        store.now()  # the pool's one connection is open
        with wire_round_trips() as wire:
            with store.transaction():
                pass
            assert wire["round_trips"] == 0  # nothing to open, nothing to commit
            with pytest.raises(RuntimeError, match="before any statement"), store.transaction():
                raise RuntimeError("before any statement")
            assert wire["round_trips"] == 0  # and nothing to roll back
            with store.transaction() as tx:
                tx.send(
                    "INSERT INTO rate_counters (bucket, window_start, count) VALUES (?, ?, ?)", ("s", "w", 1)
                )
            assert wire["round_trips"] == 1  # BEGIN, the sent statement and COMMIT: one script
            wire["round_trips"] = 0
            with store.transaction() as tx:
                first = tx.one(_TX_ID)  # BEGIN goes with it
                tx.execute("UPDATE rate_counters SET count = count + 1 WHERE bucket = ?", ("s",))
                second = tx.one(_TX_ID)
            assert wire["round_trips"] == 4  # three statements and COMMIT, no BEGIN of its own
        assert first is not None and second is not None
        assert first["id"] == second["id"] and second["wrote"]  # one transaction block for all
        with store.transaction(write=False) as tx:
            assert tx.one("SELECT count FROM rate_counters WHERE bucket = ?", ("s",)) == {"count": 2}
    finally:
        store.close()


def test_the_transactions_one_time_is_read_by_the_script_that_needs_it_first(pg_migrated_url: str) -> None:
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        store.now()
        with wire_round_trips() as wire:
            with store.transaction() as tx:  # asked before any statement: read with the BEGIN
                asked = store._tx_now(tx)
                assert wire["round_trips"] == 1
                row = tx.one(f"SELECT {NOW_SQL} AS now, " + _TX_ID.removeprefix("SELECT "))
                assert store._tx_now(tx) == asked and wire["round_trips"] == 2  # no second reading
            assert row is not None and parse_iso(asked) <= parse_iso(str(row["now"]))
            wire["round_trips"] = 0
            with store.transaction() as tx:  # the chain head reads it first: that is the time
                tx.send(
                    "INSERT INTO rate_counters (bucket, window_start, count) VALUES (?, ?, ?)", ("t", "w", 1)
                )
                linked = store.audit.link(tx, [AuditEventIn(event="lazy.linked", result="recorded")])
                assert wire["round_trips"] == 1  # BEGIN, the INSERT, lock and head: one script
                assert store._tx_now(tx) == linked[0].occurred_at and wire["round_trips"] == 1
            assert wire["round_trips"] == 2  # and the events' INSERT with the COMMIT
            wire["round_trips"] = 0
            with store.transaction() as tx:  # asked after a statement: one reading, kept
                tx.execute("UPDATE rate_counters SET count = count + 1 WHERE bucket = ?", ("t",))
                later = store._tx_now(tx)
                assert store._tx_now(tx) == later and wire["round_trips"] == 2
        assert parse_iso(linked[0].occurred_at) <= parse_iso(later)
        assert [e.occurred_at for e in store.audit.events() if e.event == "lazy.linked"] == [
            linked[0].occurred_at
        ]
    finally:
        store.close()


def test_many_reads_travel_as_one_script_in_order_on_a_read_and_in_a_write(pg_migrated_url: str) -> None:
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        with store.transaction() as tx:
            tx.execute("INSERT INTO rate_counters (bucket, window_start, count) VALUES ('m', 'w', 3)")
        reads: list[tuple[str, tuple[Any, ...]]] = [
            ("SELECT count FROM rate_counters WHERE bucket = ?", ("m",)),
            ("SELECT count FROM rate_counters WHERE bucket = ?", ("missing",)),
            ("SELECT 1 AS one UNION ALL SELECT 2 ORDER BY 1", ()),
        ]
        with wire_round_trips() as wire:
            with store.transaction(write=False) as tx:
                found = tx.many(reads)
            assert wire["round_trips"] == 1
            wire["round_trips"] = 0
            with store.transaction() as tx:
                tx.send("UPDATE rate_counters SET count = count + 1 WHERE bucket = ?", ("m",))
                inside = tx.many(reads[:1])  # BEGIN and the sent UPDATE go in front of it
            assert wire["round_trips"] == 2  # and COMMIT
        assert found == [[{"count": 3}], [], [{"one": 1}, {"one": 2}]]
        assert inside == [[{"count": 4}]]
        with pytest.raises(StoreError, match="division by zero"), store.transaction() as tx:
            tx.many(
                [("UPDATE rate_counters SET count = 100 WHERE bucket = ?", ("m",)), ("SELECT 1 / 0 AS x", ())]
            )
        with pytest.raises(StoreError, match="division by zero"), store.transaction(write=False) as tx:
            tx.many(
                [("UPDATE rate_counters SET count = 200 WHERE bucket = ?", ("m",)), ("SELECT 1 / 0 AS x", ())]
            )
        with store.transaction(write=False) as tx:  # neither UPDATE stayed, and the session is usable
            assert tx.many(reads[:1]) == [[{"count": 4}]]
    finally:
        store.close()


def test_the_calibrated_clock_reuses_a_recent_reading_of_the_servers_and_reads_anew_when_old(
    pg_migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        with store.transaction(write=False) as tx:  # the pool's one connection is open
            assert tx.one("SELECT 1 AS one") == {"one": 1}
        assert store._clock_mark is None  # and no reading of the clock was made
        with wire_round_trips() as wire:
            first = store.calibrated_now()  # no reading yet: one of its own
            assert wire["round_trips"] == 1
            wire["round_trips"] = 0
            second = store.calibrated_now()
            with store.transaction() as tx:  # a transaction's reading serves it as well
                stamped = parse_iso(store._tx_now(tx))
            wire["round_trips"] = 0
            third = store.calibrated_now()
            exact = store.now()
            assert wire["round_trips"] == 1  # the exact reading alone
            assert first <= second <= stamped <= third <= exact
            assert exact - third < timedelta(seconds=1)  # the monotonic time since, not a stale value
            at, _ = store._clock_mark or (0.0, None)
            store._clock_mark = (at - CLOCK_REUSE_S - 1, exact)  # the last reading is older than allowed
            wire["round_trips"] = 0
            fourth = store.calibrated_now()
            assert wire["round_trips"] == 1 and fourth >= exact  # read anew
            assert store._clock_mark is not None and store._clock_mark[1] == fourth
            # a clock put in front of the server's `now` alone is not this clock's: it counts from
            # the server's own readings (no check in the store for replaced methods); whoever moves
            # the store's clock moves this one too (`support.shift_store_clock`, `set_store_now`)
            moved = exact + timedelta(hours=3)
            monkeypatch.setattr(store, "now", lambda: moved)
            assert fourth <= store.calibrated_now() < moved
            shift_store_clock(monkeypatch, store, timedelta(hours=3))
            assert store.calibrated_now() - timedelta(hours=3) >= fourth
    finally:
        store.close()


_ADVISORY_LOCKS = "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"


def test_a_step_links_its_events_behind_its_statements_and_locks_the_chain_only_when_it_wrote(
    pg_migrated_url: str,
) -> None:
    # `AuditLog.link_behind`: the step's statements and its chain head read travel as one script,
    # without the chain's lock (taken by the COMMIT's script, in front of the events: see the
    # tests below); a step that wrote nothing to link (a claim that lost) reads no head
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        store.proposals.create(make_proposal(1))
        store.operations.transition("op_test1", "pending_approval", "approved")
        claimed = [AuditEventIn(event="operation.claimed", result="claimed", operation_key="op_test1")]
        with wire_round_trips() as wire:
            won = store.operations.claim("op_test1", "w1", 30, audit=claimed)
        # BEGIN with the clock, the chain head and the tenant (`AuditLog.head_first`); the claim,
        # the events behind the chain's lock and the COMMIT (`AuditLog.link_ahead`)
        assert won is not None and wire["round_trips"] == 2
        with wire_round_trips() as wire:
            assert store.operations.claim("op_test1", "w2", 30, audit=claimed) is None
        assert wire["round_trips"] == 2  # the same two scripts: nothing linked, no lock taken
        assert [e.event for e in store.audit.events(operation_key="op_test1")] == ["operation.claimed"]
        claim = "UPDATE operations SET owner = ? WHERE operation_key = ? AND owner = ? RETURNING owner"
        for owner, wrote in (("w9", 0), ("w1", 1)):  # w9 owns nothing: no row written, nothing linked
            with store.transaction() as tx:
                answers = store.audit.link_behind(
                    tx,
                    [(claim, ("w1", "op_test1", owner))],
                    [(claimed, Written(0, "operations", "operation_key", "op_test1"))],
                )
                assert len(answers[0]) == wrote
                assert tx.one(_ADVISORY_LOCKS) == {"n": 0}  # no lock before the COMMIT's script
        assert len(store.audit.events(operation_key="op_test1")) == 2
        assert verify_chain(store).ok and store.relinked == 0
    finally:
        store.close()


_LEASE = (
    "INSERT INTO resource_leases (resource_key, holder, acquired_at, expires_at)"
    " VALUES (?, 'w', '2026-12-07T00:00:00.000000Z', '2026-12-07T01:00:00.000000Z') RETURNING resource_key"
)


def _link_lease(store: PostgresStore, tx: Any, key: str, events: list[AuditEventIn]) -> None:
    """A step of its own: a lease row written, ``events`` linked behind it (`AuditLog.link_behind`)."""
    answers = store.audit.link_behind(
        tx, [(_LEASE, (key,))], [(events, Written(0, "resource_leases", "resource_key", key))]
    )
    assert answers == [[{"resource_key": key}]]


def _chain_lock_waiters(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s",
            (0x7467_0001,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_steps_commit_takes_the_chain_lock_behind_its_statements_and_its_client_turn(
    pg_migrated_url: str,
) -> None:
    # the step's transaction holds row locks and has hashed its events before it asks for the
    # chain's lock: while another session holds that lock, the step's COMMIT script waits for it
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=2)
    holder = psycopg.connect(pg_migrated_url)
    try:
        store.audit.append(AuditEventIn(event="first", result="recorded"))
        linked, failures = threading.Event(), []

        def step() -> None:
            try:
                with store.transaction() as tx:
                    _link_lease(store, tx, "r-1", [AuditEventIn(event="leased", result="recorded")])
                    assert tx.one(_ADVISORY_LOCKS) == {"n": 0}
                    linked.set()
            except BaseException as exc:  # reported to the test's thread
                failures.append(exc)
                linked.set()

        holder.execute("SELECT pg_advisory_xact_lock(%s)", (0x7467_0001,))  # not the store's: no event
        worker = threading.Thread(target=step)
        worker.start()
        assert linked.wait(60) and not failures
        deadline = time.monotonic() + 60
        while _chain_lock_waiters(pg_migrated_url) == 0:  # a condition with a deadline
            assert time.monotonic() < deadline and worker.is_alive(), "the COMMIT never waited for the lock"
            time.sleep(0.01)
        assert [e.event for e in store.audit.events()] == ["first"]  # nothing linked while it waits
        holder.rollback()  # the lock goes; the step's COMMIT script takes it and commits
        worker.join(60)
        assert not worker.is_alive() and not failures, failures
        assert [e.event for e in store.audit.events()] == ["first", "leased"]
        assert verify_chain(store).ok and store.relinked == 0  # the head had not moved
    finally:
        holder.close()
        store.close()


def _race(store: PostgresStore, first: list[AuditEventIn], second: list[AuditEventIn]) -> int:
    """Two steps read the same chain head behind their statements (a lease each); the first
    commits while the second's transaction is open; then the second commits. The second's round
    trips from its COMMIT on."""
    first_read, first_go, failures = threading.Event(), threading.Event(), []

    def run_first() -> None:
        try:
            with store.transaction() as tx:
                _link_lease(store, tx, "r-1", first)
                first_read.set()
                assert first_go.wait(60)
        except BaseException as exc:  # reported to the test's thread
            failures.append(exc)
            first_read.set()

    worker = threading.Thread(target=run_first)
    worker.start()
    assert first_read.wait(60) and not failures
    with wire_round_trips() as wire, store.transaction() as tx:
        _link_lease(store, tx, "r-2", second)
        first_go.set()  # the first commits, behind the head both read
        worker.join(60)
        assert not worker.is_alive() and not failures, failures
        wire["round_trips"] = 0
    return wire["round_trips"]


def test_a_head_that_moved_before_the_commit_is_read_again_under_the_lock_and_linked_once(
    pg_migrated_url: str,
) -> None:
    # two steps read the same chain head; the first commits; the second's COMMIT script finds the
    # head moved: its savepoint is rolled back, its events linked again under the lock (a keyed
    # event the first linked meanwhile is left out) and its own statements committed with them
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=2)
    try:
        store.audit.append(AuditEventIn(event="first", result="recorded"))
        shared = KeyedEventIn(event_id="evt-shared", event="model.response", result="recorded")
        trips = _race(
            store,
            [shared, AuditEventIn(event="one", result="recorded")],
            [shared, AuditEventIn(event="two", result="recorded")],
        )
        # the tail and COMMIT (refused: the head moved); the rollback to the savepoint with the
        # head read again (the keyed event's presence with it); the events with the COMMIT
        assert trips == 3 and store.relinked == 1
        events = store.audit.events()
        assert [e.event for e in events] == ["first", "model.response", "one", "two"]
        assert [e.event_id for e in events].count("evt-shared") == 1
        assert _leases_held(store) == ["r-1", "r-2"]  # the second step's own statement committed
        assert verify_chain(store).ok
    finally:
        store.close()


def test_a_head_that_moved_is_named_by_the_refused_check_and_the_events_follow_it_in_one_round_trip(
    pg_migrated_url: str,
) -> None:
    # without a keyed event nothing needs reading again: the check that finds the head moved names
    # it (and the store's time) under the lock the transaction keeps, and the next script rolls
    # back to the savepoint and commits the events linked after it
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=2)
    try:
        store.audit.append(AuditEventIn(event="first", result="recorded"))
        trips = _race(
            store,
            [AuditEventIn(event="one", result="recorded"), AuditEventIn(event="one.more", result="recorded")],
            [AuditEventIn(event="two", result="recorded"), AuditEventIn(event="two.more", result="recorded")],
        )
        assert trips == 2 and store.relinked == 1  # the refused tail; the rollback, events, COMMIT
        events = store.audit.events()
        assert [e.event for e in events] == ["first", "one", "one.more", "two", "two.more"]
        assert events[3].prev_hash == events[2].hash and events[3].occurred_at >= events[2].occurred_at
        assert _leases_held(store) == ["r-1", "r-2"]
        assert verify_chain(store).ok
    finally:
        store.close()


def test_a_step_linked_behind_its_statements_and_linked_again_in_its_transaction_keeps_the_order(
    pg_migrated_url: str,
) -> None:
    # a link after a tail in the same transaction must chain after the tail's events: the tail is
    # linked under the lock first (`_PgTx.settle`)
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        with store.transaction() as tx:
            _link_lease(store, tx, "r-1", [AuditEventIn(event="behind", result="recorded")])
            store.audit.link(tx, [AuditEventIn(event="after", result="recorded")])
        assert [e.event for e in store.audit.events()] == ["behind", "after"]
        assert verify_chain(store).ok
    finally:
        store.close()


def _leases_held(store: PostgresStore) -> list[str]:
    with store.transaction(write=False) as tx:
        return [
            str(r["resource_key"]) for r in tx.execute("SELECT resource_key FROM resource_leases ORDER BY 1")
        ]


def _created(proposal: Any, *extra: AuditEventIn) -> Any:
    """A `Proposals.create_at` maker: ``proposal`` and its events (``extra`` first)."""
    return lambda now: (
        proposal,
        [
            *extra,
            AuditEventIn(
                event="proposal.created",
                result="pending_approval",
                proposal_id=proposal.proposal_id,
                operation_key=proposal.operation_key,
            ),
        ],
    )


def test_a_proposal_reads_the_chain_head_first_and_commits_with_its_events_in_one_more_round_trip(
    pg_migrated_url: str,
) -> None:
    # its rows are new: BEGIN with the time and the chain head (unlocked), then the INSERTs, the
    # rows as stored, the events behind the chain's lock and the COMMIT as one script; a proposal
    # already stored under the key reads the same two scripts and links nothing
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        store.now()  # the pool's connection is open
        proposal = make_proposal(1)
        with wire_round_trips() as wire:
            stored, operation, created = store.proposals.create_at(_created(proposal))
        assert wire["round_trips"] == 2 and created
        assert (stored.proposal_id, stored.authentic, operation.status) == (
            "prop_test1",
            True,
            "pending_approval",
        )
        with wire_round_trips() as wire:
            again, operation_again, created_again = store.proposals.create_at(_created(make_proposal(1)))
        assert wire["round_trips"] == 2 and not created_again
        assert again.proposal_id == "prop_test1" and operation_again.operation_key == "op_test1"
        events = store.audit.events()
        assert [(e.event, e.tenant_id) for e in events] == [("proposal.created", "acme")]
        assert verify_chain(store).ok and store.relinked == 0
    finally:
        store.close()


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_a_proposal_whose_chain_head_moved_before_its_script_links_its_events_after_the_new_head(
    pg_migrated_url: str, keyed: bool
) -> None:
    # another step links between the proposal's head read and its script (inside `make`, which
    # runs between the two): the script's check refuses, the proposal's INSERTs stay (they ran
    # before the savepoint), its rows are read again and its events follow the head found under
    # the lock; a keyed event the other step linked meanwhile is left out
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=2)
    try:
        store.audit.append(AuditEventIn(event="first", result="recorded"))
        shared = KeyedEventIn(event_id="evt-turn", event="model.response", result="recorded")
        proposal = make_proposal(2)
        made = _created(proposal, *([shared] if keyed else []))

        def make(now: str) -> Any:
            store.audit.append_many([shared] if keyed else [AuditEventIn(event="between", result="recorded")])
            return made(now)

        with wire_round_trips() as wire:
            stored, operation, created = store.proposals.create_at(make)
        # the head first; the other step's append (2); the refused script; then the rollback with
        # the rows read again and the events with the COMMIT (the keyed event's presence read
        # with the head under the lock first: one more)
        assert wire["round_trips"] == (6 if keyed else 5) and store.relinked == 1
        assert created and stored.proposal_id == "prop_test2" and operation.status == "pending_approval"
        names = [e.event for e in store.audit.events()]
        assert names == ["first", "model.response" if keyed else "between", "proposal.created"]
        assert [e.tenant_id for e in store.audit.events()][-1] == "acme"
        assert verify_chain(store).ok
    finally:
        store.close()


def test_an_outcome_links_its_events_ahead_of_its_change_in_two_round_trips_and_after_a_moved_head(
    pg_migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an operation's change records events that need only its tenant: BEGIN with the time, the
    # chain head and that tenant; then the change, the events behind the chain's lock and the
    # COMMIT as one script. A change that does not apply links nothing and reads the status
    # after; a head another step moved in between is found by the script's check and the
    # events follow it, the change kept
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=2)
    try:
        store.proposals.create(make_proposal(1, tenant_id="globex"))
        approved = [AuditEventIn(event="outcome.approved", result="recorded", operation_key="op_test1")]
        with wire_round_trips() as wire:
            op = store.operations.transition("op_test1", "pending_approval", "approved", audit=approved)
        assert wire["round_trips"] == 2 and op.status == "approved"
        before = len(store.audit.events())
        with wire_round_trips() as wire, pytest.raises(InvalidTransitionError) as refused:
            store.operations.transition("op_test1", "pending_approval", "rejected", audit=approved)
        assert wire["round_trips"] == 3 and refused.value.actual == "approved"  # the status read after
        assert len(store.audit.events()) == before
        read = store._tx_now

        def between(tx: Any) -> str:  # another step links after the outcome read the head
            monkeypatch.setattr(store, "_tx_now", read)
            store.audit.append(AuditEventIn(event="between", result="recorded"))
            return read(tx)

        monkeypatch.setattr(store, "_tx_now", between)
        expired = [AuditEventIn(event="outcome.expired", result="recorded", operation_key="op_test1")]
        with wire_round_trips() as wire:
            op = store.operations.transition("op_test1", "approved", "expired", audit=expired)
        # the head first; the other step's append (2); the refused script; the rollback to the
        # savepoint with the change's row read again, the events and the COMMIT
        assert wire["round_trips"] == 5 and store.relinked == 1
        assert op.status == "expired" and store.operations.get("op_test1").status == "expired"  # type: ignore[union-attr]
        events = [e for e in store.audit.events() if e.event != "proposal.created"]
        assert [(e.event, e.tenant_id) for e in events] == [
            ("outcome.approved", "globex"),
            ("between", None),
            ("outcome.expired", "globex"),
        ]
        assert verify_chain(store).ok
    finally:
        store.close()


def test_a_decision_and_its_settlement_link_ahead_in_two_round_trips_and_after_a_moved_head(
    pg_migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a decision that settles its operation: BEGIN with the time, the chain head and the tenants
    # its events name; then the decision, the settlement, both groups of events behind the
    # chain's lock and the COMMIT as one script. Behind a moved head both groups follow the head
    # found under the lock, the settlement's only because its row was written; a decision that
    # does not settle (one recorded by another reviewer first) links its own events only
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=2)
    try:
        proposal, _, _ = store.proposals.create(make_proposal(1, tenant_id="globex"))
        proposal_two, _, _ = store.proposals.create(make_proposal(2, tenant_id="globex"))

        def settle(key: str) -> Settlement:
            return Settlement(
                operation_key=key,
                from_status="pending_approval",
                to_status="approved",
                audit=[AuditEventIn(event="decided.settled", result="approved", operation_key=key)],
            )

        def recorded(key: str) -> list[AuditEventIn]:
            return [AuditEventIn(event="decided.recorded", result="approve", operation_key=key)]

        with wire_round_trips() as wire:
            done, settled = store.approvals.record_and_settle(
                make_approval(proposal), audit=recorded("op_test1"), settle=settle("op_test1")
            )
        assert wire["round_trips"] == 2 and done and settled is not None and settled.status == "approved"
        with wire_round_trips() as wire:  # settled already: the decision's own events only
            done, settled = store.approvals.record_and_settle(
                make_approval(proposal, reviewer="gina"), audit=recorded("op_test1"), settle=settle("op_test1")
            )
        assert wire["round_trips"] == 2 and done and settled is None
        read = store._tx_now

        def between(tx: Any) -> str:  # another step links after the decision read the head
            monkeypatch.setattr(store, "_tx_now", read)
            store.audit.append(AuditEventIn(event="between", result="recorded"))
            return read(tx)

        monkeypatch.setattr(store, "_tx_now", between)
        with wire_round_trips() as wire:
            done, settled = store.approvals.record_and_settle(
                make_approval(proposal_two), audit=recorded("op_test2"), settle=settle("op_test2")
            )
        # the head first; the other step's append (2); the refused script; the rollback to the
        # savepoint with the rows read again, both groups' events and the COMMIT
        assert wire["round_trips"] == 5 and store.relinked == 1
        assert done and settled is not None and settled.status == "approved"
        assert store.operations.get("op_test2").status == "approved"  # type: ignore[union-attr]
        events = [e for e in store.audit.events() if e.event != "proposal.created"]
        assert [(e.event, e.operation_key, e.tenant_id) for e in events] == [
            ("decided.recorded", "op_test1", "globex"),
            ("decided.settled", "op_test1", "globex"),
            ("decided.recorded", "op_test1", "globex"),
            ("between", None, None),
            ("decided.recorded", "op_test2", "globex"),
            ("decided.settled", "op_test2", "globex"),
        ]
        assert verify_chain(store).ok
    finally:
        store.close()


def test_a_claim_with_leases_links_ahead_fails_whole_when_one_is_busy_and_follows_a_moved_head(
    pg_migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the claim, its leases behind it, a check that it took every one and its events go in one
    # script with the COMMIT: a lease another holder keeps fails that script (nothing of it
    # stays, `ResourcesBusy` names the key); behind a head another step moved the claim and its
    # leases stay and its events follow the head found under the lock
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=2)
    try:
        store.proposals.create(make_proposal(1))
        store.operations.transition("op_test1", "pending_approval", "approved")
        assert store.leases.acquire(["k2"], "other", 30)
        claimed = [AuditEventIn(event="operation.claimed", result="claimed", operation_key="op_test1")]
        events = len(store.audit.events())
        with wire_round_trips() as wire, pytest.raises(ResourcesBusy) as busy:
            store.operations.claim("op_test1", "w1", 30, audit=claimed, resources=(["k2", "k1"], "h1"))
        assert busy.value.args == ("k2",) and wire["round_trips"] == 3  # head first; the script; ROLLBACK
        assert store.operations.get("op_test1").status == "approved"  # type: ignore[union-attr]
        assert _leases_held(store) == ["k2"] and len(store.audit.events()) == events
        store.leases.release(["k2"], "other")
        read = store._tx_now

        def between(tx: Any) -> str:  # another step links after the claim read the head
            monkeypatch.setattr(store, "_tx_now", read)
            store.audit.append(AuditEventIn(event="between", result="recorded"))
            return read(tx)

        monkeypatch.setattr(store, "_tx_now", between)
        with wire_round_trips() as wire:
            won = store.operations.claim("op_test1", "w1", 30, audit=claimed, resources=(["k2", "k1"], "h1"))
        # the head first; the other step's append (2); the refused script; the rollback to the
        # savepoint with the claim and its leases read again, the events and the COMMIT
        assert wire["round_trips"] == 5 and store.relinked == 1
        assert won is not None and (won.status, won.owner) == ("executing", "w1")
        assert _leases_held(store) == ["k1", "k2"]
        assert [e.event for e in store.audit.events()][-2:] == ["between", "operation.claimed"]
        assert verify_chain(store).ok
    finally:
        store.close()


def test_a_lone_append_links_after_the_head_last_seen_in_one_round_trip_and_its_time_is_checked(
    pg_migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a COMMIT that linked reads the chain's head right after it, in its own script; the next
    # lone append links after that head at the store's calibrated time and sends the lock, the
    # check and its events with BEGIN and the COMMIT: one round trip. Another process's append
    # in between, or a calibrated time the server's clock or the head's own time contradicts
    # (a process whose calibration went wrong), is found by the check: linked again after the
    # head found under the lock at the server's time, one round trip more
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    other = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        store.audit.append(AuditEventIn(event="first", result="recorded"))
        for name in ("one", "two"):
            with wire_round_trips() as wire:
                store.audit.append_ahead([AuditEventIn(event=name, result="recorded")])
            assert wire["round_trips"] == 1 and store.relinked == 0
        other.audit.append(AuditEventIn(event="between", result="recorded"))
        with wire_round_trips() as wire:
            store.audit.append_ahead([AuditEventIn(event="three", result="recorded")])
        assert wire["round_trips"] == 2 and store.relinked == 1
        # a guess that missed: the next steps guess nothing (others link into this chain too),
        # they read the head under the lock as `append_many` does, and none is linked again
        for _ in range(CONTENTION_PAUSE):
            with wire_round_trips() as wire:
                store.audit.append_ahead([AuditEventIn(event="paused", result="recorded")])
            assert wire["round_trips"] == 2 and store.relinked == 1
        with wire_round_trips() as wire:  # then it guesses again
            store.audit.append_ahead([AuditEventIn(event="four", result="recorded")])
        assert wire["round_trips"] == 1 and store.relinked == 1
        server = store.now()
        for skew, name in ((timedelta(hours=1), "ahead"), (timedelta(hours=-1), "behind")):
            monkeypatch.setattr(store, "_contended", 0)  # each time judged as a guess
            monkeypatch.setattr(store, "_clock_mark", (time.monotonic(), server + skew))
            with wire_round_trips() as wire:
                store.audit.append_ahead([AuditEventIn(event=name, result="recorded")])
            assert wire["round_trips"] == 2
            stamped = parse_iso(store.audit.events()[-1].occurred_at)
            assert server <= stamped < server + timedelta(minutes=5)  # the server's time, not the guess
        assert store.relinked == 3
        events = store.audit.events()
        assert [e.event for e in events] == [
            "first",
            "one",
            "two",
            "between",
            "three",
            *["paused"] * CONTENTION_PAUSE,
            "four",
            "ahead",
            "behind",
        ]
        assert all(a.occurred_at <= b.occurred_at for a, b in itertools.pairwise(events))
        assert verify_chain(store).ok
    finally:
        other.close()
        store.close()


def test_after_a_relink_the_next_steps_read_the_head_behind_their_statements_then_early_again(
    pg_migrated_url: str,
) -> None:
    # processes linking into one chain together: a head read with BEGIN, or guessed, is stale by
    # the COMMIT more often than one read behind the statements, and each stale head is a relink
    # (the chain's lock held across a client turn). After a relink, guessed or not, the next
    # CONTENTION_PAUSE linking steps read the head behind their statements; then the early
    # heads come back. A proposal shows which: 2 round trips with its head first, 3 behind
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    other = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)

    def propose(n: int) -> int:
        with wire_round_trips() as wire:
            _, _, created = store.proposals.create_at(_created(make_proposal(n)))
        assert created
        return int(wire["round_trips"])

    try:
        store.audit.append(AuditEventIn(event="first", result="recorded"))
        assert propose(1) == 2
        other.audit.append(AuditEventIn(event="between", result="recorded"))
        store.audit.append_ahead([AuditEventIn(event="guess", result="recorded")])  # misses
        assert store.relinked == 1
        assert propose(2) == 3  # behind its statements; the head has not moved: no relink
        for _ in range(CONTENTION_PAUSE - 2):
            with wire_round_trips() as wire:
                store.audit.append_ahead([AuditEventIn(event="paused", result="recorded")])
            assert wire["round_trips"] == 2  # no guess: the head read under the lock
        assert propose(3) == 3  # the pause's last step
        assert propose(4) == 2 and store.relinked == 1  # the head first again
        # a relink of a step whose head was read with BEGIN starts the pause too
        head_first = store._head_first

        def moved_after_reading(tx: Any, values: Any = ()) -> Any:
            head = head_first(tx, values)
            other.audit.append(AuditEventIn(event="moved", result="recorded"))
            return head

        store._head_first = moved_after_reading  # type: ignore[method-assign]
        try:
            propose(5)
        finally:
            del store._head_first
        assert store.relinked == 2
        assert propose(6) == 3
        assert [e.event for e in store.audit.events() if e.event != "proposal.created"][-2:] == ["paused", "moved"]
        assert verify_chain(store).ok
    finally:
        other.close()
        store.close()


def test_an_outcome_given_its_tenants_links_after_the_head_last_seen_in_one_round_trip(
    pg_migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an outcome whose caller read its rows' tenants (the claim returned the operation) needs
    # nothing read first: the server's clock in the change's own SQL, the events linked after
    # the head this process saw after its last linking COMMIT, all in one script. A change
    # that does not apply links nothing; with a test's clock in front of the server's
    # (`_clock_sql` None) the time is read first, as before, and the change stamped with it
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        store.proposals.create(make_proposal(1, tenant_id="globex"))
        store.operations.transition("op_test1", "pending_approval", "approved")
        claimed = [AuditEventIn(event="operation.claimed", result="claimed", operation_key="op_test1")]
        assert store.operations.claim("op_test1", "w1", 30, audit=claimed) is not None
        tenants: dict[tuple[str, str], str | None] = {("operations", "op_test1"): "globex"}
        done = [AuditEventIn(event="operation.completed", result="completed", operation_key="op_test1")]
        before = store.now()
        with wire_round_trips() as wire:
            op = store.operations.transition(
                "op_test1", "executing", "succeeded", owner="w1", result={"ok": 1}, audit=done, tenants=tenants
            )
        assert wire["round_trips"] == 1 and store.relinked == 0
        assert op.status == "succeeded" and parse_iso(op.updated_at) >= before  # the server's time
        with wire_round_trips() as wire, pytest.raises(InvalidTransitionError):
            store.operations.transition("op_test1", "executing", "failed", audit=done, tenants=tenants)
        assert wire["round_trips"] == 2  # the one script, committing nothing; the status read after
        events = [(e.event, e.tenant_id) for e in store.audit.events() if e.event != "proposal.created"]
        assert events == [("operation.claimed", "globex"), ("operation.completed", "globex")]
        store.proposals.create(make_proposal(2, tenant_id="globex"))
        store.operations.transition("op_test2", "pending_approval", "approved")
        monkeypatch.setattr(store, "_clock_sql", lambda: None)  # a test's clock: the time is read
        shift = timedelta(hours=2)
        read = store._tx_now
        monkeypatch.setattr(store, "_tx_now", lambda tx: iso(parse_iso(read(tx)) + shift))
        with wire_round_trips() as wire:
            op = store.operations.transition(
                "op_test2", "approved", "expired", audit=done, tenants={("operations", "op_test2"): "globex"}
            )
        assert wire["round_trips"] == 2 and parse_iso(op.updated_at) >= before + shift
        assert verify_chain(store).ok
    finally:
        store.close()


def test_a_claim_given_its_tenants_judges_and_stamps_by_the_scripts_clock_in_one_round_trip(
    pg_migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a claim whose caller read its rows' tenants needs nothing read first: the expiry, the
    # claim's lease and its resource leases judged and stamped by the server's clock in the one
    # script (the same instant for all of them), the events linked after the head this process
    # last saw. A lease another holder keeps still fails the script whole; an expired approval
    # is not claimed; with a test's clock in front of the server's the time is read first
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        expired = iso(store.now() - timedelta(seconds=1))
        for n in (1, 2, 3):  # the second approval expired a second ago
            late = {"expires_at": expired} if n == 2 else {}
            store.proposals.create(make_proposal(n, tenant_id="globex", **late))
            store.operations.transition(f"op_test{n}", "pending_approval", "approved")
        store.audit.append(AuditEventIn(event="warm", result="recorded"))  # a linking COMMIT: a head seen

        def claim(n: int, keys: list[str]) -> Any:
            events = [AuditEventIn(event="operation.claimed", result="claimed", operation_key=f"op_test{n}")]
            tenants: dict[tuple[str, str], str | None] = {("operations", f"op_test{n}"): "globex"}
            return store.operations.claim(
                f"op_test{n}", "w1", 30, audit=events, resources=(keys, "h1"), tenants=tenants
            )

        assert store.leases.acquire(["k2"], "other", 30)
        with wire_round_trips() as wire, pytest.raises(ResourcesBusy) as busy:
            claim(1, ["k1", "k2"])
        assert busy.value.args == ("k2",) and wire["round_trips"] == 2  # the script; ROLLBACK
        assert store.operations.get("op_test1").status == "approved"  # type: ignore[union-attr]
        store.leases.release(["k2"], "other")
        before = store.now()
        with wire_round_trips() as wire:
            won = claim(1, ["k1", "k2"])
        assert wire["round_trips"] == 1 and store.relinked == 0
        assert won is not None and won.status == "executing" and parse_iso(won.updated_at) >= before
        assert won.lease_expires_at is not None
        assert parse_iso(won.lease_expires_at) - parse_iso(won.updated_at) == timedelta(seconds=30)
        with store.transaction(write=False) as tx:
            leases = tx.execute("SELECT * FROM resource_leases ORDER BY resource_key")
        assert [(r["holder"], r["acquired_at"], r["expires_at"]) for r in leases] == [
            ("h1", won.updated_at, won.lease_expires_at)
        ] * 2
        assert claim(2, []) is None and store.operations.get("op_test2").status == "approved"  # type: ignore[union-attr]
        monkeypatch.setattr(store, "_clock_sql", lambda: None)  # a test's clock: the time is read
        with wire_round_trips() as wire:
            assert claim(3, []) is not None
        assert wire["round_trips"] == 2
        claimed = [e for e in store.audit.events() if e.event == "operation.claimed"]
        assert [(e.operation_key, e.tenant_id) for e in claimed] == [
            ("op_test1", "globex"),
            ("op_test3", "globex"),
        ]
        assert verify_chain(store).ok
    finally:
        store.close()
