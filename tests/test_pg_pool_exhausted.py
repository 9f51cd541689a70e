"""When no PostgreSQL connection is free, a unit of work fails fast with a message that says so
(issue 29): a worker waited psycopg's 30 s twice and then printed a driver error. Forced with a
pool of one connection held by another thread (an event, no sleep), on a real server."""

from __future__ import annotations

import threading

import pytest
from support import TEST_KEY

from toolgate.errors import StoreError
from toolgate.store import PostgresStore


def test_a_unit_of_work_without_a_free_connection_says_so(pg_url: str) -> None:
    store = PostgresStore(pg_url, key=TEST_KEY, min_size=1, max_size=1, wait_s=0.5)
    try:
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with store.transaction(write=False) as tx:
                tx.one("SELECT 1 AS one")
                holding.set()
                release.wait(60)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert holding.wait(60)
            busy = pytest.raises(StoreError, match=r"no PostgreSQL connection free after 0.5 s: all 1 of")
            with busy, store.transaction(write=False) as tx:
                tx.one("SELECT 1 AS one")
        finally:
            release.set()
            holder.join(60)
        with store.transaction(write=False) as tx:  # free again: served at once
            assert tx.one("SELECT 1 AS one") == {"one": 1}
    finally:
        store.close()
