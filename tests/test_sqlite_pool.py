"""The SQLite store reuses its connections: one open per idle slot, not one per unit of work.

A connection goes back to the pool only after its transaction committed; a failed one is closed.
A forked child never uses its parent's connections. Threads share the pool safely.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from toolgate.errors import StoreError
from toolgate.store import SQLiteStore
from toolgate.store import sqlite as sqlite_module

KEY = b"k" * 32


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    opened: list[int] = []
    real = sqlite3.connect

    def counting(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        opened.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sqlite_module.sqlite3, "connect", counting)
    return opened


def test_sequential_units_of_work_reuse_one_connection(tmp_path: Path, connects: list[int]) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite", key=KEY)
    store.setup()
    before = len(connects)
    for _ in range(50):
        store.counters.increment("b", 10**9)
    assert len(connects) - before <= 1
    assert store.counters.value("b", 10**9) == 50
    store.close()


def test_a_failed_transaction_closes_its_connection(tmp_path: Path, connects: list[int]) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite", key=KEY)
    store.setup()
    with store.transaction() as tx:
        tx.execute("SELECT 1")
    before = len(connects)
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.execute("INSERT INTO rate_counters (bucket, window_start, count) VALUES ('x', 'w', 1)")
        raise RuntimeError("boom")
    with store.transaction(write=False) as tx:
        assert tx.one("SELECT count(*) AS n FROM rate_counters WHERE bucket = 'x'") == {"n": 0}
    assert len(connects) - before == 1  # the failed one was not given back
    store.close()


def _child(path: str, queue: Any) -> None:
    store = SQLiteStore(path, key=KEY)
    queue.put(store.counters.increment("forked", 10**9))


def test_a_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite", key=KEY)
    store.setup()
    store.counters.increment("forked", 10**9)  # the parent now holds an idle connection
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(str(store.path), queue))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and queue.get(timeout=10) == 2
    assert store.counters.increment("forked", 10**9) == 3  # the parent's connection still works
    store.close()


def test_threads_share_the_pool_without_losing_a_write(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite", key=KEY)
    store.setup()
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            start.wait(30)
            for _ in range(25):
                store.counters.increment("shared", 10**9)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert store.counters.value("shared", 10**9) == 200
    assert len(store._idle) <= SQLiteStore.MAX_IDLE
    store.close()


def test_a_store_opened_while_another_process_writes_in_rollback_mode_waits_for_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file still in rollback-journal mode whose write lock another connection holds (a process
    starting beside this one and writing first): SQLite refuses the change to WAL at once, without
    the busy timeout a statement gets ("database is locked": CI's first-start flake). The store
    asks again after a pause, here the moment the other connection commits."""
    path = tmp_path / "s.sqlite"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE elsewhere (x)")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO elsewhere VALUES (1)")
    pauses: list[float] = []

    def committed_meanwhile(seconds: float) -> None:
        pauses.append(seconds)
        if other.in_transaction:
            other.execute("COMMIT")

    monkeypatch.setattr(sqlite_module, "_pause", committed_meanwhile)
    store = SQLiteStore(path, key=KEY)
    store.setup()
    assert len(pauses) == 1  # refused once while the other held its lock, then set
    with store.transaction(write=False) as tx:
        assert tx.one("PRAGMA journal_mode") == {"journal_mode": "wal"}
    other.close()


def test_a_store_gives_up_on_wal_after_its_busy_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.sqlite"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("CREATE TABLE elsewhere (x)")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO elsewhere VALUES (1)")
    monkeypatch.setattr(sqlite_module, "_pause", lambda seconds: None)
    with pytest.raises(StoreError, match="database is locked"):
        SQLiteStore(path, key=KEY, busy_timeout_ms=50).setup()
    other.execute("ROLLBACK")
    other.close()
