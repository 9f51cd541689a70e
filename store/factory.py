"""Open the store and the checkpointer named by configuration.

``TOOLGATE_DATABASE_URL`` selects the backend: a ``postgresql://`` URL means PostgreSQL for both
the operation store and the LangGraph checkpointer; anything else (or nothing) means the
embedded SQLite files under the data directory.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from toolgate.errors import ConfigurationError
from toolgate.store.base import Store
from toolgate.store.sqlite import SQLiteStore

if TYPE_CHECKING:  # the checkpointers (LangGraph) are imported when one is opened
    from langgraph.checkpoint.base import BaseCheckpointSaver


def is_postgres_url(url: str | None) -> bool:
    """True for ``postgres://`` and ``postgresql://`` URLs."""
    return bool(url) and str(url).split(":", 1)[0] in {"postgres", "postgresql"}


def open_store(database_url: str | None, data_dir: Path, *, key: bytes, read_only: bool = False) -> Store:
    """The store for ``database_url`` (PostgreSQL) or ``data_dir/toolgate.sqlite`` (default).

    ``key`` is the store's secret (MACs, token hashes, the audit chain); every process sharing
    one store must use the same one. ``read_only`` opens it for verification: nothing is written.
    """
    if is_postgres_url(database_url):
        from toolgate.store.postgres import PostgresStore  # psycopg only when PostgreSQL is asked for

        return PostgresStore(str(database_url), key=key, read_only=read_only)
    if database_url and not database_url.startswith("sqlite:///"):
        raise ConfigurationError(
            "TOOLGATE_DATABASE_URL must be a postgresql:// URL or sqlite:///PATH, got a "
            f"{database_url.split(':', 1)[0]!r} URL"
        )
    path = Path(database_url[len("sqlite:///") :]) if database_url else data_dir / "toolgate.sqlite"
    if read_only and not path.exists():
        raise ConfigurationError(f"no toolgate store at {path} (nothing to read)")
    return SQLiteStore(path, key=key, read_only=read_only)


@contextmanager
def open_checkpointer(database_url: str | None, data_dir: Path) -> Iterator[BaseCheckpointSaver[str]]:
    """A ready (set-up) checkpointer for the same database choice as `open_store`."""
    if is_postgres_url(database_url):
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection
        from psycopg.rows import dict_row

        from toolgate.store.checkpoint_setup import setup_checkpointer

        # setup() runs CREATE INDEX CONCURRENTLY, which needs an autocommit connection.
        with Connection.connect(
            str(database_url), autocommit=True, prepare_threshold=0, row_factory=dict_row
        ) as pg_conn:
            pg_saver = PostgresSaver(pg_conn)
            setup_checkpointer(pg_conn, pg_saver)  # once, however many processes start together
            yield pg_saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    data_dir.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(data_dir / "checkpoints.sqlite", check_same_thread=False, timeout=30)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        yield saver
    finally:
        conn.close()


__all__ = ["is_postgres_url", "open_checkpointer", "open_store"]
