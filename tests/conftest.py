"""Shared pytest fixtures for the toolgate test suite."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import pytest

if TYPE_CHECKING:
    from toolgate.evals.dispatch_runner import RunReport

# =============================================================================
# BEGIN PostgreSQL harness  (build/CI infrastructure; keep this section self-contained)
#
# The server comes from scripts/with-postgres.sh (used by `make test` and .ci/run), which
# exports TOOLGATE_TEST_PG_URL=postgresql://postgres@127.0.0.1:PORT/postgres.
#
#   pg_admin_url  session  the admin URL; no variable -> skip, or fail when CI=true
#   pg_url        function a brand-new empty database per test (dropped afterwards)
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
    import psycopg
    from psycopg import sql

    dbname = f"tg_{secrets.token_hex(8)}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    try:
        yield _tg_pg_db_url(pg_admin_url, dbname)
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str | None:
    """None selects the embedded SQLite default; otherwise a fresh PostgreSQL database."""
    return None if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A fresh, set-up store on each backend: embedded SQLite and a real PostgreSQL database."""
    from support import TEST_KEY

    from toolgate.store import PostgresStore, SQLiteStore

    if request.param == "sqlite":
        backend: object = SQLiteStore(tmp_path_factory.mktemp("store") / "toolgate.sqlite", key=TEST_KEY)
    else:
        backend = PostgresStore(request.getfixturevalue("pg_url"), key=TEST_KEY, max_size=30)
    backend.setup()  # type: ignore[attr-defined]
    yield backend
    backend.close()  # type: ignore[attr-defined]


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
    from toolgate.evals.adversarial import CASES
    from toolgate.evals.dispatch_runner import run_adversarial

    return run_adversarial(CASES, directory=tmp_path_factory.mktemp("adversarial"))
