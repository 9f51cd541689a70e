"""Set up LangGraph's PostgreSQL checkpointer once, however many processes start together.

`PostgresSaver.setup` reads the last applied migration and then creates tables and inserts
migration rows with no lock: two processes starting on a fresh database (four workers launched
at once, a server and a worker) both apply migration 0 and one dies with a unique violation on
``checkpoint_migrations`` or on the catalog. Here a process that finds the migrations complete
does nothing, and the others take turns under a session advisory lock.

The lock is taken with ``pg_try_advisory_lock`` in a short poll, never a blocking
``pg_advisory_lock``: ``setup`` runs ``CREATE INDEX CONCURRENTLY``, which waits for every older
snapshot in the database, including a statement blocked waiting for the lock (a deadlock).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from psycopg import Connection, errors

from toolgate.errors import StoreError

_CHECKPOINT_LOCK = 0x7467_0004
"""Session advisory lock held while one process applies the checkpointer's migrations."""
SETUP_WAIT_S = 300.0
"""How long a process waits for another's setup (an index build on a large table is slow)."""


def migrated(conn: Connection[Any], migrations: int) -> bool:
    """True when all ``migrations`` of the checkpointer are recorded (its table may not exist yet)."""
    try:
        row = conn.execute("SELECT COUNT(DISTINCT v) AS n FROM checkpoint_migrations").fetchone()
    except errors.UndefinedTable:
        return False
    if row is None:
        return False
    count = row["n"] if isinstance(row, dict) else row[0]
    return int(count) >= migrations


def setup_checkpointer(
    conn: Connection[Any],
    saver: Any,
    *,
    wait_s: float = SETUP_WAIT_S,
    poll_s: float = 0.05,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Run ``saver.setup()`` unless its migrations are all applied, one process at a time.

    ``conn`` is the saver's autocommit connection (setup needs one). A process that waits past
    ``wait_s`` fails with a `StoreError` naming the lock, and changes nothing."""
    total = len(saver.MIGRATIONS)
    if migrated(conn, total):
        return
    deadline = time.monotonic() + wait_s
    while not _try_lock(conn):
        if time.monotonic() > deadline:
            raise StoreError(
                f"the checkpointer's setup waited {wait_s:.0f}s for another process's "
                f"(advisory lock {_CHECKPOINT_LOCK:#x}); is a setup stuck?"
            )
        sleep(poll_s)
    try:
        if not migrated(conn, total):  # another process may have finished while this one waited
            saver.setup()
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_CHECKPOINT_LOCK,))


def _try_lock(conn: Connection[Any]) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (_CHECKPOINT_LOCK,)).fetchone()
    assert row is not None
    return bool(row["got"] if isinstance(row, dict) else row[0])


__all__ = ["SETUP_WAIT_S", "migrated", "setup_checkpointer"]
