"""Shared pytest fixtures for the toolgate test suite."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import pytest

if TYPE_CHECKING:
    from toolgate.evals.adversarial.runner import RunReport

# =============================================================================
# BEGIN PostgreSQL harness  (build/CI infrastructure; keep this section self-contained)
#
# The server comes from scripts/with-postgres.sh (used by `make test` and .ci/run), which
# exports TOOLGATE_TEST_PG_URL=postgresql://postgres@127.0.0.1:PORT/postgres.
#
#   pg_admin_url  session  the admin URL; no variable -> skip, or fail when CI=true
#   pg_url        function a brand-new empty database per test (dropped afterwards)
#   _tg_pg_create / _tg_pg_drop  make (optionally as a copy of a template) and drop one
#
# Every test marked @pytest.mark.postgres gets the pg_admin_url check automatically, so
# under CI=true a missing server is a failure, never a silent skip.
# Names private to this section start with _tg_pg_.
# =============================================================================

_TG_PG_ENV = "TOOLGATE_TEST_PG_URL"


def _tg_pg_missing(reason: str) -> None:
    """Skip locally, fail under CI=true (pytest.skip/fail raise)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: PostgreSQL tests must not be skipped)", pytrace=False)
    pytest.skip(f"{reason}; run the tests via `make test` or scripts/with-postgres.sh")


def _tg_pg_db_url(admin_url: str, dbname: str) -> str:
    """The admin URL with its database replaced by ``dbname`` (same host/port/user/options)."""
    parts = urlsplit(admin_url)
    if parts.scheme in ("postgresql", "postgres"):
        return urlunsplit(parts._replace(path="/" + dbname))
    # key=value conninfo string
    from psycopg.conninfo import make_conninfo

    return make_conninfo(admin_url, dbname=dbname)


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """URL of the throwaway server's maintenance database (superuser, trust auth)."""
    url = os.environ.get(_TG_PG_ENV, "").strip()
    if not url:
        _tg_pg_missing(f"{_TG_PG_ENV} is not set")
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        # the variable is set, so a server was promised: never skip here
        pytest.fail(f"{_TG_PG_ENV}={url} is set but the server is unreachable: {exc}", pytrace=False)
    return url


@pytest.fixture
def pg_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh, empty database for this test only; yields its URL and drops it afterwards."""
    dbname = _tg_pg_create(pg_admin_url)
    try:
        yield _tg_pg_db_url(pg_admin_url, dbname)
    finally:
        _tg_pg_drop(pg_admin_url, dbname)


def _tg_pg_create(admin_url: str, template: str | None = None) -> str:
    """A new database (a copy of ``template`` when given); returns its name."""
    import psycopg
    from psycopg import sql

    dbname = f"tg_{secrets.token_hex(8)}"
    query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname))
    if template is not None:
        query = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(dbname), sql.Identifier(template)
        )
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(query)
    return dbname


def _tg_pg_drop(admin_url: str, dbname: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True) as conn:
        # FORCE terminates connections the test (or a pool) may have left open
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))


@pytest.fixture(autouse=True)
def _tg_pg_marker_guard(request: pytest.FixtureRequest) -> None:
    """@pytest.mark.postgres tests require the server (skip locally / fail under CI=true)."""
    if request.node.get_closest_marker("postgres") is not None:
        request.getfixturevalue("pg_admin_url")


# =============================================================================
# END PostgreSQL harness
# =============================================================================


# =============================================================================
# Application fixtures
# =============================================================================

# =============================================================================
# Suite durations  (scripts/run-tests.sh; grouped by cause with scripts/suite_profile.py)
# =============================================================================

_TG_DURATIONS_ENV = "TOOLGATE_TEST_DURATIONS"
"""A file every step's duration is appended to, one ``--durations`` line per setup, call and
teardown of each test: the suite's time is part of the product, and only a measured cause can be
worked on (issue 24). Written by the controlling process only (under xdist, the workers' reports
reach it), so two phases of one run append to one file."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get(_TG_DURATIONS_ENV)
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(path, "a", encoding="utf-8") as sink:
            sink.write(f"{report.duration:.2f}s {report.when:<8} {report.nodeid}\n")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files start first (tests/suite_order.py), so none runs alone at the end."""
    import suite_order

    suite_order.slowest_first(items)


os.environ["TOOLGATE_ALLOW_MODEL_REQUESTS"] = "0"  # no test constructs a real provider model by accident
# their checks fail with detailed messages
pytest.register_assert_rewrite("provider_flows", "support", "hidden_writes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test during which a harness read changed its system of record fails (tests/hidden_writes.py)."""
    import hidden_writes

    hidden_writes.outstanding()  # what an earlier test left is not this test's
    outcome = yield
    try:
        hidden_writes.fail_on_hidden_writes()
    except AssertionError as exc:
        if outcome.excinfo is None:  # type: ignore[attr-defined]
            outcome.force_exception(exc)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def pg_template_url(pg_admin_url: str) -> Iterator[str]:
    """A database migrated to the toolgate schema once per session (per xdist worker), never
    used directly: `pg_migrated_url` copies it. ``CREATE DATABASE ... TEMPLATE`` copies files,
    cheaper than running every migration again in each test; nothing may stay connected to it."""
    from support import TEST_KEY

    from toolgate.store import PostgresStore

    dbname = _tg_pg_create(pg_admin_url)
    template = PostgresStore(_tg_pg_db_url(pg_admin_url, dbname), key=TEST_KEY, max_size=2)
    try:
        template.setup()
    finally:
        template.close()
    try:
        yield _tg_pg_db_url(pg_admin_url, dbname)
    finally:
        _tg_pg_drop(pg_admin_url, dbname)


@pytest.fixture
def pg_migrated_url(pg_admin_url: str, pg_template_url: str) -> Iterator[str]:
    """A database of this test only, already at the toolgate schema (a copy of the template)."""
    dbname = _tg_pg_create(pg_admin_url, template=urlsplit(pg_template_url).path.lstrip("/"))
    try:
        yield _tg_pg_db_url(pg_admin_url, dbname)
    finally:
        _tg_pg_drop(pg_admin_url, dbname)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str | None:
    """None selects the embedded SQLite default; otherwise a fresh PostgreSQL database."""
    return None if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedded store file migrated to the toolgate schema once per session (per worker);
    `store` copies it, as `pg_template_url` is copied on PostgreSQL. Closed before it is
    copied, so the file holds everything (no write-ahead log beside it)."""
    from support import TEST_KEY

    from toolgate.store import SQLiteStore

    path = tmp_path_factory.mktemp("sqlite-template") / "toolgate.sqlite"
    template = SQLiteStore(path, key=TEST_KEY)
    try:
        template.setup()
    finally:
        template.close()
    leftovers = sorted(p.name for p in path.parent.iterdir() if p != path)
    assert not leftovers, f"the closed template left {leftovers} beside it"
    return path


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A fresh, set-up store on each backend: embedded SQLite and a real PostgreSQL database,
    each a copy of a template migrated once per session (`setup` then only checks the version).
    Another connection to the same database, as another process holds: ``SQLiteStore(store.path)``
    or ``PostgresStore(request.getfixturevalue("pg_migrated_url"))``."""
    import shutil

    from support import TEST_KEY

    from toolgate.store import PostgresStore, SQLiteStore

    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("store") / "toolgate.sqlite"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        backend: object = SQLiteStore(path, key=TEST_KEY)
    else:
        backend = PostgresStore(request.getfixturevalue("pg_migrated_url"), key=TEST_KEY, max_size=30)
    backend.setup()  # type: ignore[attr-defined]
    yield backend
    backend.close()  # type: ignore[attr-defined]


@pytest.fixture
def two(store: object, request: pytest.FixtureRequest) -> Iterator[tuple[object, object]]:
    """``store`` and a second store on the same database, as another process holds it (shared
    state across processes: rate-limit shares, circuit breakers)."""
    from support import TEST_KEY

    from toolgate.store import PostgresStore, SQLiteStore

    if isinstance(store, SQLiteStore):
        other: object = SQLiteStore(store.path, key=TEST_KEY)
    else:
        other = PostgresStore(request.getfixturevalue("pg_migrated_url"), key=TEST_KEY)
    try:
        yield store, other
    finally:
        other.close()  # type: ignore[attr-defined]


@pytest.fixture
def harness(store: object) -> object:
    """A gateway on ``store`` whose handler calls are counted."""
    from support import Harness

    return Harness(store)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def adversarial_report(tmp_path_factory: pytest.TempPathFactory) -> RunReport:
    """Every adversarial dispatch case, run once per test session, exactly as `toolgate verify` runs
    them (`run_adversarial` on a fresh embedded store).

    The whole set takes seconds and proves the same thing wherever it runs, so the tests that need
    it share this one run: tests/test_adversarial.py asserts each case and the totals from it, and
    tests/test_verify.py checks that the verify command reports it. Selecting a single case still
    runs the whole set (the report is the set's)."""
    from toolgate.evals.adversarial.cases import CASES
    from toolgate.evals.adversarial.runner import run_adversarial

    return run_adversarial(CASES, directory=tmp_path_factory.mktemp("adversarial"))
