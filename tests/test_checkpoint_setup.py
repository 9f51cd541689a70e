"""LangGraph's PostgreSQL checkpointer is set up once when several processes start together.

The CI failure this guards: four ``toolgate worker run`` processes started at once on a fresh
database each ran ``PostgresSaver.setup()``; one died with a unique violation on
``checkpoint_migrations`` and the drain never finished. Each case here forces its interleaving
with a barrier or an event (never a sleep) on a real PostgreSQL database.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from toolgate.errors import StoreError
from toolgate.store.checkpoint_setup import _CHECKPOINT_LOCK, migrated, setup_checkpointer
from toolgate.store.factory import open_checkpointer

pytestmark = pytest.mark.postgres


def connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)


def versions(url: str) -> list[int]:
    with connect(url) as conn:
        return [r["v"] for r in conn.execute("SELECT v FROM checkpoint_migrations ORDER BY v").fetchall()]


class CountingSaver(PostgresSaver):
    """The real saver, counting how often its migrations run."""

    runs = 0

    def setup(self) -> None:
        type(self).runs += 1
        super().setup()


def test_eight_starters_on_a_fresh_database_set_up_once_and_all_succeed(pg_url: str) -> None:
    starters = 8
    barrier = threading.Barrier(starters)
    CountingSaver.runs = 0

    def start(_: int) -> str:
        with connect(pg_url) as conn:
            saver = CountingSaver(conn)
            barrier.wait()  # every starter reaches setup at the same moment
            setup_checkpointer(conn, saver, wait_s=120)
            return "ok"

    with ThreadPoolExecutor(starters) as pool:
        results = list(pool.map(start, range(starters)))

    assert results == ["ok"] * starters
    assert versions(pg_url) == list(range(len(PostgresSaver.MIGRATIONS)))  # each migration once
    assert 1 <= CountingSaver.runs <= starters  # whoever ran it found the lock free, the rest skipped
    with connect(pg_url) as conn:
        assert migrated(conn, len(PostgresSaver.MIGRATIONS))
        # the lock is given back: nobody holds it afterwards
        held = conn.execute(
            "SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = %s",
            (_CHECKPOINT_LOCK & 0xFFFFFFFF,),
        ).fetchone()
        assert held is not None and held["n"] == 0


def test_a_starter_waits_for_the_one_setting_up_then_finds_it_done(pg_url: str) -> None:
    waiting = threading.Event()
    with connect(pg_url) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (_CHECKPOINT_LOCK,))  # another process's setup
        CountingSaver.runs = 0

        def polled(_: float) -> None:
            waiting.set()

        with ThreadPoolExecutor(1) as pool, connect(pg_url) as conn:
            late = pool.submit(setup_checkpointer, conn, CountingSaver(conn), wait_s=120, sleep=polled)
            assert waiting.wait(60), "the starter never found the lock taken"
            assert not late.done()
            PostgresSaver(holder).setup()  # the holder finishes its setup ...
            holder.execute("SELECT pg_advisory_unlock(%s)", (_CHECKPOINT_LOCK,))  # ... and lets go
            late.result(timeout=60)
    assert CountingSaver.runs == 0  # it found the migrations applied and ran none of its own
    assert versions(pg_url) == list(range(len(PostgresSaver.MIGRATIONS)))


def test_a_setup_that_never_frees_the_lock_fails_clearly_and_creates_nothing(pg_url: str) -> None:
    with connect(pg_url) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (_CHECKPOINT_LOCK,))
        with connect(pg_url) as conn, pytest.raises(StoreError, match="advisory lock 0x74670004"):
            setup_checkpointer(conn, PostgresSaver(conn), wait_s=0.0, sleep=lambda _: None)
        with connect(pg_url) as conn:
            assert not migrated(conn, len(PostgresSaver.MIGRATIONS))
            table = conn.execute("SELECT to_regclass('checkpoint_migrations') AS t").fetchone()
            assert table is not None and table["t"] is None


def test_an_applied_setup_is_not_run_again_and_takes_no_lock(pg_url: str, tmp_path: Any) -> None:
    with open_checkpointer(pg_url, tmp_path):
        pass
    with connect(pg_url) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (_CHECKPOINT_LOCK,))  # would block a setup
        CountingSaver.runs = 0
        with connect(pg_url) as conn:
            setup_checkpointer(conn, CountingSaver(conn), wait_s=0.0, sleep=lambda _: None)
    assert CountingSaver.runs == 0
    assert versions(pg_url) == list(range(len(PostgresSaver.MIGRATIONS)))
