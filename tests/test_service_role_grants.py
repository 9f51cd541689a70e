"""Provisioning a service's PostgreSQL role touches the catalog rows of its own tables only.

It used to run ``REVOKE ALL ON ALL TABLES IN SCHEMA``, which rewrites the catalog row of every
relation in the store's schema. Processes starting together on a fresh database (`make demo`, a
server beside its workers) provision while another one's checkpointer setup alters its tables:
both update one ``pg_class`` row and one fails with ``tuple concurrently updated`` (a fresh-clone
CI run died so in ``PostgresSaver.setup``). Here the other process's schema change is held open
in a transaction while provisioning runs, so the interleaving is forced, not hoped for; and the
role still ends with exactly its scope's privileges whatever it held before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from toolgate.store import PostgresStore
from toolgate.store._records_postgres import database_name, role_name, store_schema
from toolgate.store.records_scope import RecordsScope
from toolgate.store.service_records import open_service_records, provision_service_records

pytestmark = pytest.mark.postgres

KEY = b"g" * 32
SCOPE = RecordsScope("grants", frozenset({"sor_owned"}), reads=frozenset({"sor_shared"}))
WAIT_S = 60.0
"""Bound of every wait here (a failing run fails, never hangs)."""


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStore]:
    """A set-up store with the scope's two tables and one outside it (the checkpointer's, say)."""
    store = PostgresStore(pg_url, key=KEY, max_size=4)
    store.setup()
    with store.transaction() as tx:
        for table in ("sor_owned", "sor_shared", "outside"):
            tx.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, note TEXT)")
        tx.execute("CREATE SEQUENCE outside_seq")
    try:
        yield store
    finally:
        store.close()


def role_of(store: PostgresStore) -> str:
    return role_name(database_name(store._conninfo), SCOPE.name, store_schema(store))


def held(conn: psycopg.Connection[Any], role: str) -> set[tuple[str, str]]:
    """Every privilege ``role`` holds on a relation or a column, as (relation or relation.column,
    privilege, with grant option or not)."""
    rows = conn.execute(
        "SELECT c.relname || '' AS on, a.privilege_type, a.is_grantable FROM pg_class c,"
        " aclexplode(c.relacl) a WHERE a.grantee = %(role)s::regrole"
        " UNION ALL SELECT c.relname || '.' || t.attname, a.privilege_type, a.is_grantable"
        " FROM pg_class c JOIN pg_attribute t ON t.attrelid = c.oid, aclexplode(t.attacl) a"
        " WHERE a.grantee = %(role)s::regrole",
        {"role": f'"{role}"'},
    ).fetchall()
    return {(on, privilege + (" grantable" if grantable else "")) for on, privilege, grantable in rows}


SCOPED = {
    *(("sor_owned", p) for p in ("SELECT", "INSERT", "UPDATE", "DELETE")),
    ("sor_shared", "SELECT"),
}


def provision_beside_an_open_alter(store: PostgresStore, pg_url: str) -> list[str]:
    """Provision while another session holds ``ALTER TABLE outside`` uncommitted (the row of
    ``outside`` in ``pg_class`` updated and locked); what went wrong, if anything."""
    problems: list[str] = []
    errors: list[BaseException] = []
    with psycopg.connect(pg_url) as other, psycopg.connect(pg_url, autocommit=True) as watch:
        other.execute("ALTER TABLE outside ADD COLUMN added INTEGER")  # held open: not committed
        holder = other.info.backend_pid

        def provision() -> None:
            try:
                provision_service_records(store, SCOPE)
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=provision)
        worker.start()
        while worker.is_alive():
            # provisioning that touches the altered row waits for the open transaction: a
            # condition seen in pg_locks, not a timing window
            blocked = watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (holder,)
            ).fetchone()
            if blocked is not None and blocked[0]:
                problems.append("provisioning waited for another session's change to a table outside its scope")
                break
            worker.join(0.01)
        other.commit()  # the other process's change lands whatever provisioning did
        worker.join(WAIT_S)
        assert not worker.is_alive(), "provisioning never finished"
    problems.extend(f"{type(e).__name__}: {e}" for e in errors)
    return problems


@pytest.mark.parametrize("first", [True, False], ids=["role-created", "role-exists"])
def test_provisioning_never_waits_on_a_table_outside_its_scope(
    store: PostgresStore, pg_url: str, first: bool
) -> None:
    if not first:
        provision_service_records(store, SCOPE)
    assert provision_beside_an_open_alter(store, pg_url) == []
    with psycopg.connect(pg_url) as conn:
        assert held(conn, role_of(store)) == SCOPED
        columns = conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'outside' AND column_name = 'added'"
        ).fetchone()
    assert columns == (1,)  # the other session's change committed
    with open_service_records(store, SCOPE).transaction() as tx:
        tx.execute("INSERT INTO sor_owned VALUES (1, 'ok')")


def test_provisioning_takes_away_whatever_else_the_role_was_given(store: PostgresStore, pg_url: str) -> None:
    provision_service_records(store, SCOPE)
    role = role_of(store)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for grant in (
            "SELECT ON outside",  # a table outside the scope
            "UPDATE (note) ON outside",  # a column of one
            "USAGE ON SEQUENCE outside_seq",  # a sequence
            "INSERT ON sor_shared",  # more than a read on a table it only reads
            "TRUNCATE ON sor_owned",  # a privilege its own table does not get
        ):
            conn.execute(f'GRANT {grant} TO "{role}"')
        conn.execute(f'GRANT SELECT ON sor_shared TO "{role}" WITH GRANT OPTION')  # the right one, passable on
        conn.execute(f'REVOKE DELETE ON sor_owned FROM "{role}"')  # and one taken away
        assert held(conn, role) != SCOPED
        provision_service_records(store, SCOPE)
        assert held(conn, role) == SCOPED


def test_an_unchanged_role_is_provisioned_without_rewriting_a_relations_catalog_row(
    store: PostgresStore, pg_url: str
) -> None:
    provision_service_records(store, SCOPE)

    def versions(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
        return conn.execute(
            "SELECT relname, xmin::text FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
            " UNION ALL SELECT nspname, xmin::text FROM pg_namespace WHERE nspname = current_schema()"
            " ORDER BY 1"
        ).fetchall()

    with psycopg.connect(pg_url, autocommit=True) as conn:
        before = versions(conn)
        provision_service_records(store, SCOPE)
        assert versions(conn) == before
        assert held(conn, role_of(store)) == SCOPED
