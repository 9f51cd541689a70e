"""Two toolgate stores in one PostgreSQL database, each in its own schema and with its own secret,
provision service roles that never collide: each store's role has its own name (database, schema
and service), its own password, and sessions pinned to its store's schema. Before schemas counted,
the second store's setup re-passworded the first store's role, whose capability could then no
longer log in."""

from __future__ import annotations

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from toolgate.errors import CapabilityDenied
from toolgate.store import PostgresStore
from toolgate.store._records_postgres import PostgresRecords, database_name, role_name, store_schema
from toolgate.store.records_scope import RecordsScope
from toolgate.store.service_records import open_service_records, provision_service_records

pytestmark = pytest.mark.postgres

SCOPE = RecordsScope("demo_schemas", frozenset({"sor_notes"}))


def schema_store(pg_url: str, schema: str, key: bytes) -> PostgresStore:
    """A set-up store whose tables live in ``schema`` (created here), with one service table."""
    admin = PostgresStore(pg_url, key=key, max_size=2)
    try:
        with admin.transaction() as tx:
            tx.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)).as_string())
    finally:
        admin.close()
    store = PostgresStore(make_conninfo(pg_url, options=f"-c search_path={schema}"), key=key, max_size=4)
    store.setup()
    with store.transaction() as tx:
        tx.execute("CREATE TABLE IF NOT EXISTS sor_notes (note TEXT NOT NULL)")
        tx.execute("INSERT INTO sor_notes VALUES (?)", (f"note of {schema}",))
    return store


def test_stores_in_two_schemas_of_one_database_keep_their_own_roles(pg_url: str) -> None:
    first = schema_store(pg_url, "tg_first", b"f" * 32)
    second = schema_store(pg_url, "tg_second", b"s" * 32)
    try:
        assert (store_schema(first), store_schema(second)) == ("tg_first", "tg_second")
        provision_service_records(first, SCOPE)
        provision_service_records(second, SCOPE)  # after the first: must not take over its role
        with first.transaction(write=False) as tx:
            database = tx.one("SELECT current_database() AS d")
            assert database is not None
            roles = {
                r["rolname"]
                for r in tx.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'tg_sor_demo_schemas_%'")
            }
        names = {role_name(database["d"], "demo_schemas", s) for s in ("tg_first", "tg_second")}
        assert len(names) == 2 and roles == names

        for store, schema in ((first, "tg_first"), (second, "tg_second")):
            records = open_service_records(store, SCOPE)
            with records.transaction(write=False) as tx:  # logs in, and finds its own store's table
                assert [r["note"] for r in tx.execute("SELECT note FROM sor_notes")] == [f"note of {schema}"]
            other = "tg_second" if schema == "tg_first" else "tg_first"
            with pytest.raises(CapabilityDenied), records.transaction(write=False) as tx:
                tx.execute(f"SELECT note FROM {other}.sor_notes")  # the other store's table: refused
        assert role_name("db", "svc") == role_name("db", "svc", "public")  # unchanged in public
    finally:
        first.close()
        second.close()


def test_a_stores_schema_is_asked_once_however_many_capabilities_it_opens(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = schema_store(pg_url, "tg_once", b"o" * 32)
    try:
        provision_service_records(store, SCOPE)
        asked: list[str] = []
        real = store.transaction

        def counted(*, write: bool = True):  # type: ignore[no-untyped-def]
            asked.append("write" if write else "read")
            return real(write=write)

        assert store_schema(store) == "tg_once"
        monkeypatch.setattr(store, "transaction", counted)
        for _ in range(3):  # each capability opened names its role by the store's schema
            records = PostgresRecords.of(store, SCOPE)
            assert records.role == role_name(database_name(pg_url), "demo_schemas", "tg_once")
            records.close()
        assert asked == []  # the store's own sessions were never asked again
    finally:
        store.close()
