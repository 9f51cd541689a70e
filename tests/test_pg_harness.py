"""Self-tests of the PostgreSQL harness (tests/conftest.py + scripts/with-postgres.sh)."""

from __future__ import annotations

import psycopg
import pytest

pytestmark = pytest.mark.postgres

# database names seen by the tests of this module, to prove each test got its own
_SEEN_DATABASES: set[str] = set()


def _claim_fresh_database(url: str) -> str:
    """Assert the database is new and empty, then leave a table behind in it."""
    with psycopg.connect(url) as conn:
        dbname = conn.execute("SELECT current_database()").fetchone()[0]
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchone()[0]
        assert tables == 0, f"{dbname} is not empty"
        assert conn.execute("SELECT to_regclass('public.harness_probe')").fetchone()[0] is None
        conn.execute("CREATE TABLE harness_probe (id int PRIMARY KEY)")
        conn.execute("INSERT INTO harness_probe VALUES (1)")
    assert dbname.startswith("tg_")
    assert dbname not in _SEEN_DATABASES, "two tests were given the same database"
    _SEEN_DATABASES.add(dbname)
    return dbname


def test_pg_url_connects_and_selects(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    _claim_fresh_database(pg_url)


def test_pg_url_is_a_distinct_empty_database(pg_url: str, pg_admin_url: str) -> None:
    # whichever test runs second finds no harness_probe table left by the other one
    dbname = _claim_fresh_database(pg_url)
    with psycopg.connect(pg_admin_url) as admin:
        assert admin.execute("SELECT current_database()").fetchone()[0] != dbname
        assert admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone() == (1,)
