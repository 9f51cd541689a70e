"""A read call's handler cannot talk its PostgreSQL unit of work out of being read-only.

On PostgreSQL a service's login role may write its own tables; inside a read call only the
transaction's READ ONLY stops it, and the server lets a transaction's first statement change
that, a COMMIT end it (the connection is autocommit: what follows runs outside it), a text of
several statements carry both, and session state outlive it on a pooled connection. Each way
out is refused as `CapabilityDenied` (``statement``), remembered by the call, with the row it
aimed at unchanged, and the next unit of work on the same login still reads and is still
read-only. (SQLite's authorizer denies transaction control and PRAGMA: tests/test_handler_capabilities.py.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import pytest
from support import TEST_KEY, Harness

from toolgate.errors import CapabilityDenied, StoreError
from toolgate.store import PostgresStore, _records_postgres
from toolgate.store._records_postgres import PostgresRecords, store_schema
from toolgate.store.handler_access import HandlerAccess, handler_access
from toolgate.store.postgres import _AUDIT_LOCK as AUDIT_LOCK
from toolgate.tools.demo.services import DemoServices

pytestmark = pytest.mark.postgres

ON_HAND = "SELECT on_hand FROM sor_inventory WHERE tenant_id = 'acme' AND sku = 'SKU-7'"
BUMP = "UPDATE sor_inventory SET on_hand = on_hand + 100 WHERE tenant_id = 'acme' AND sku = 'SKU-7'"
PID = "SELECT pg_backend_pid() AS pid"


@pytest.fixture
def pg(pg_migrated_url: str) -> Iterator[tuple[PostgresStore, PostgresRecords]]:
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, max_size=10)
    store.setup()
    Harness(store)  # the wide release's tables, roles and demo rows
    try:
        records = DemoServices.on(store, secret=b"test-secret-0123456789").inventory.records
        assert isinstance(records, PostgresRecords)
        yield store, records
    finally:
        store.close()


def _on_hand(records: PostgresRecords) -> int:
    with records.transaction(write=False) as tx:
        row = tx.one(ON_HAND)
    assert row is not None
    return int(row["on_hand"])


def _pid(records: PostgresRecords) -> int:
    with records.transaction(write=False) as tx:
        row = tx.one(PID)
    assert row is not None
    return int(row["pid"])


def _still_confined(store: PostgresStore, records: PostgresRecords, on_hand: int) -> None:
    """The next units of work on the same login: they read, on the store's schema as the
    service's role, and inside a read call are still read-only (a write is refused)."""
    access = HandlerAccess(tool="check_stock")
    with handler_access(access):
        assert _on_hand(records) == on_hand
        with records.transaction() as tx:
            settings = tx.one(
                "SELECT current_setting('transaction_read_only') AS ro, current_user AS who,"
                " current_schema() AS schema"
            )
        assert settings == {"ro": "on", "who": records.role, "schema": store_schema(store)}
        with pytest.raises(CapabilityDenied) as caught, records.transaction() as tx:
            tx.execute(BUMP)
    assert caught.value.target == "sor_inventory"
    assert [d.target for d in access.denials] == ["sor_inventory"]
    assert _on_hand(records) == on_hand


WAYS_OUT = [
    # the transaction made READ WRITE: the server refuses once the snapshot is taken, or the
    # statement is refused before it is sent (a session-level SET)
    ["SET TRANSACTION READ WRITE", BUMP],
    ["SET LOCAL transaction_read_only = off", BUMP],
    ["SELECT set_config('transaction_read_only', 'off', true)", BUMP],
    ["SET transaction_read_only = off", BUMP],
    # transaction control: what follows would run outside the READ ONLY transaction
    ["COMMIT", BUMP],
    ["ROLLBACK", BUMP],
    ["END", BUMP],
    ["ABORT", BUMP],
    ["PREPARE TRANSACTION 'tg-out'", BUMP],
    ["/* a /* nested */ comment */ COMMIT", BUMP],
    # several statements in one text (the simple protocol would run them all)
    [f"COMMIT; {BUMP}; BEGIN READ ONLY"],
    [f"SELECT 1 AS one; COMMIT; {BUMP}; BEGIN READ ONLY"],
    [f"SELECT 1 AS one; {BUMP}"],
    # session state a pooled connection would carry into the next unit of work
    ["SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE", "COMMIT", BUMP],
    ["SET default_transaction_read_only = off", "COMMIT", BUMP],
    ["SET search_path TO pg_catalog"],
    ["SET ROLE postgres", BUMP],
    ["SET SESSION AUTHORIZATION postgres", BUMP],
    ["RESET ALL"],
    ["DISCARD ALL"],
    ["DO $$ BEGIN PERFORM set_config('search_path', 'pg_catalog', false); END $$"],
    ["PREPARE tg_out AS SELECT 1"],
]


@pytest.mark.parametrize("statements", WAYS_OUT, ids=[" | ".join(w)[:60] for w in WAYS_OUT])
@pytest.mark.parametrize("asked", ["write", "read"])
def test_a_read_call_cannot_leave_its_read_only_unit_of_work(
    pg: tuple[PostgresStore, PostgresRecords], statements: list[str], asked: str
) -> None:
    store, records = pg
    on_hand = _on_hand(records)
    access = HandlerAccess(tool="check_stock")  # a read tool's call: may not write
    with (
        handler_access(access),
        pytest.raises(CapabilityDenied) as caught,
        records.transaction(write=asked == "write") as tx,
    ):
        for statement in statements:
            tx.execute(statement)
    assert (caught.value.capability, caught.value.target) == ("records", "statement")
    denied = caught.value  # never the driver's error
    assert denied.__cause__ is None and (denied.__context__ is None or denied.__suppress_context__)
    assert [d.target for d in access.denials] == ["statement"]
    _still_confined(store, records, on_hand)  # the row unchanged, and the login still confined


def test_a_handler_that_swallows_the_refusal_still_writes_nothing(
    pg: tuple[PostgresStore, PostgresRecords],
) -> None:
    store, records = pg
    on_hand = _on_hand(records)
    access = HandlerAccess(tool="check_stock")
    with handler_access(access), pytest.raises((CapabilityDenied, StoreError)), records.transaction() as tx:
        for statement in ("SET TRANSACTION READ WRITE", "COMMIT", BUMP):
            with contextlib.suppress(CapabilityDenied):
                tx.execute(statement)
    assert [d.target for d in access.denials] == ["statement", "statement"]
    _still_confined(store, records, on_hand)  # the row unchanged, and the login still confined


def test_a_unit_of_work_the_handler_ended_is_refused_and_its_connection_closed(
    pg: tuple[PostgresStore, PostgresRecords], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the second line behind the statement kinds: a statement that ended the transaction anyway
    # (here COMMIT, let through on purpose) fails the unit of work, and nothing runs after it
    store, records = pg
    on_hand, pid = _on_hand(records), _pid(records)
    monkeypatch.setattr(_records_postgres, "_KINDS", _records_postgres._KINDS | {"commit"})
    access = HandlerAccess(tool="check_stock")
    with handler_access(access), pytest.raises(CapabilityDenied) as caught, records.transaction() as tx:
        tx.execute("COMMIT")
        tx.execute(BUMP)
    assert caught.value.target == "statement" and "transaction control" in str(caught.value)
    assert [d.target for d in access.denials] == ["statement"]
    monkeypatch.undo()
    assert _pid(records) != pid  # closed, never reused
    _still_confined(store, records, on_hand)  # the row unchanged, and the login still confined


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT set_config('search_path', 'pg_catalog', false) AS path",
        'SELECT "set_config"(\'search_path\', \'pg_catalog\', false) AS path',
    ],
)
def test_a_statement_that_may_change_session_state_closes_its_connection(
    pg: tuple[PostgresStore, PostgresRecords], statement: str
) -> None:
    store, records = pg
    on_hand, pid = _on_hand(records), _pid(records)
    with handler_access(HandlerAccess(tool="check_stock")), records.transaction() as tx:
        assert tx.one(PID) == {"pid": pid}  # the same pooled connection
        tx.execute(statement)
    assert _pid(records) != pid
    _still_confined(store, records, on_hand)
    (row,) = records.read("SELECT current_setting('search_path') AS path, " + PID[7:])
    records.read(statement)  # the single read too: its connection is closed
    assert records.read(PID) != [{"pid": row["pid"]}]


def test_a_single_read_is_one_statement_and_leaves_no_session_state(
    pg: tuple[PostgresStore, PostgresRecords],
) -> None:
    store, records = pg
    on_hand = _on_hand(records)
    for text in (
        "COMMIT",
        f"SELECT 1 AS one; COMMIT; {BUMP}; BEGIN READ ONLY",
        "SET search_path TO pg_catalog",
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
        "DISCARD ALL",
    ):
        access = HandlerAccess(tool="check_stock")
        with handler_access(access), pytest.raises(CapabilityDenied) as caught:
            records.read(text)
        assert caught.value.target == "statement" and [d.target for d in access.denials] == ["statement"]
    # one statement: made READ WRITE, it is committed with nothing written
    assert records.read("SET TRANSACTION READ WRITE") == []
    with pytest.raises(CapabilityDenied) as refused:
        records.read(BUMP)
    assert refused.value.target == "sor_inventory"
    _still_confined(store, records, on_hand)  # the row unchanged, and the login still confined


def test_a_write_unit_of_work_still_writes_and_commits_and_refuses_transaction_control(
    pg: tuple[PostgresStore, PostgresRecords],
) -> None:
    store, records = pg
    on_hand = _on_hand(records)
    with handler_access(HandlerAccess(tool="adjust_stock", writes=True)):
        with records.transaction() as tx:
            tx.execute(BUMP)
            tx.execute(
                "UPDATE sor_inventory SET on_hand = on_hand - ? WHERE tenant_id = ? AND sku = ?", (1, "acme", "SKU-7")
            )
            assert tx.one(ON_HAND) == {"on_hand": on_hand + 99}
        assert _on_hand(records) == on_hand + 99
        # a COMMIT of its own would commit what came before it and let what follows run alone
        with pytest.raises(CapabilityDenied), records.transaction() as tx:
            tx.execute(BUMP)
            tx.execute("COMMIT")
        with pytest.raises(CapabilityDenied), records.transaction() as tx:
            tx.execute(f"{BUMP}; COMMIT")
    assert _on_hand(records) == on_hand + 99
    _still_confined(store, records, on_hand + 99)


def test_a_temporary_table_never_shadows_the_services_own_for_a_later_unit_of_work(
    pg: tuple[PostgresStore, PostgresRecords],
) -> None:
    # a write's handler copies the table into a temporary one of the same name (which the
    # session's later statements would read first) and changes the copy: the next unit of work,
    # a read call's, reads the service's own table (the connection was closed, its temporary
    # tables with it)
    store, records = pg
    on_hand = _on_hand(records)
    with handler_access(HandlerAccess(tool="adjust_stock", writes=True)), records.transaction() as tx:
        tx.execute("SELECT * INTO TEMP sor_inventory FROM sor_inventory")
        tx.execute(BUMP)
        assert tx.one(ON_HAND) == {"on_hand": on_hand + 100}  # the copy
    _still_confined(store, records, on_hand)  # the row unchanged, and the login still confined


OUTSIDE_TABLES = [
    "SELECT lo_from_bytea(0, 'kept by a read call') AS oid",
    "SELECT pg_catalog . lo_create (0) AS oid",
    'SELECT "lo_creat"(-1) AS oid',
    "SELECT LOWRITE(0, 'x') AS n",
    "SELECT pg_notify('toolgate_changes', 'breaker:forged') AS n",
    "SELECT pg_logical_emit_message(false, 'toolgate', 'forged') AS lsn",
    f"SELECT pg_advisory_xact_lock({AUDIT_LOCK}) AS held",
    f"SELECT pg_try_advisory_lock({AUDIT_LOCK}) AS held",
    "SELECT pg_terminate_backend(pg_backend_pid()) AS gone",
    "SELECT query_to_xml('SELECT lo_' || 'create(0)', true, true, '') AS x",
    'SELECT U&"lo\\005fcreate"(0) AS oid',
    "SELECT U&\"set\\005fconfig\"('search_path', 'pg_catalog', false) AS path",
]
"""Calls PUBLIC may make that act outside the role's tables, where READ ONLY stops none of them
(on PostgreSQL 15 each of the first six ran inside a read call's unit of work), and ways to hide
one from a look at the statement's text."""


@pytest.mark.parametrize("unit", ["read call", "write call", "single read"])
def test_a_call_acting_outside_the_services_tables_is_refused_before_it_is_sent(
    pg: tuple[PostgresStore, PostgresRecords], pg_migrated_url: str, unit: str
) -> None:
    """No large object is stored, no notice or WAL message sent, no advisory lock of the gateway's
    taken (a handler holding the audit chain's stalled every process's appends while it ran)."""
    store, records = pg
    on_hand = _on_hand(records)
    with psycopg.connect(pg_migrated_url, autocommit=True) as listener:
        listener.execute("LISTEN toolgate_changes")
        for statement in OUTSIDE_TABLES:
            writes = unit == "write call"
            access = HandlerAccess(tool="adjust_stock" if writes else "check_stock", writes=writes)
            with handler_access(access), pytest.raises(CapabilityDenied) as caught:
                if unit == "single read":
                    records.read(statement)
                else:
                    with records.transaction() as tx:
                        tx.execute(statement)
            assert caught.value.target == "statement", statement
            assert [d.target for d in access.denials] == ["statement"], statement
        assert _scalar(store, "SELECT count(*) AS v FROM pg_largeobject_metadata") == 0
        held = (
            "SELECT count(*) AS v FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            f" WHERE l.locktype = 'advisory' AND a.usename = '{records.role}'"
        )
        assert _scalar(store, held) == 0
        with store.transaction() as tx:
            tx.execute("SELECT pg_notify('toolgate_changes', 'sentinel')")
        notice = next(listener.notifies(timeout=60, stop_after=1))
        assert notice.payload == "sentinel"  # in commit order: a forged notice would have come first
    _still_confined(store, records, on_hand)


def _scalar(store: PostgresStore, sql: str) -> object:
    with store.transaction() as tx:
        row = tx.one(sql)
    assert row is not None
    return row["v"]
