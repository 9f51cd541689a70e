"""A PostgreSQL write transaction opens with the store's time in the same round trip as its BEGIN
(issue 31: the clock is read once per transaction, not once per step that asks for it), commits
what its block did, and rolls back everything when the block raises, leaving the connection
ready for the next unit of work."""

from __future__ import annotations

import pytest
from support import TEST_KEY

from toolgate.clock import parse_iso
from toolgate.store import PostgresStore
from toolgate.store.postgres import NOW_SQL


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
