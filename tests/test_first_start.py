"""Several processes opening the application at the same moment on a fresh store.

`make demo`, a server beside its workers, four ``toolgate worker run`` launched together: every
one of them may be the first to touch an empty data directory or database. Each round here starts
real child processes (`tests/first_start_child.py`), holds them at a file barrier until every one
is ready, then releases them together into `open_app` and the checkpointer. Every child must
start, the schema steps must be recorded once, the demo rows seeded once, and every child must
end with the same store secret (no ``TOOLGATE_AUDIT_KEY``: the first start generates
``audit.key``). Fresh store each round, a few rounds per backend, to make an interleaving likely.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from support import cli_env

from toolgate import key_file
from toolgate.config import Settings
from toolgate.errors import ConfigurationError
from toolgate.graph.rollout.loaded import record_release_loaded
from toolgate.store import Store
from toolgate.store.audit import Auditor
from toolgate.store.audit_records import AuditEvent
from toolgate.store.chain import verify_chain
from toolgate.store.factory import open_store
from toolgate.store.migrations import MIGRATIONS
from toolgate.store.rollout_records import COMPONENT as ROLLOUT_COMPONENT
from toolgate.store.rollout_records import MIGRATIONS as ROLLOUT_MIGRATIONS
from toolgate.tools.demo.crm_hub import HubCrmApi, HubCrmClient
from toolgate.tools.demo.identities import demo_principals
from toolgate.tools.demo.records import DemoSystem
from toolgate.tools.demo.service import DemoService
from toolgate.tools.demo.services import DemoServices

REPO = Path(__file__).resolve().parent.parent
CHILD = REPO / "tests" / "first_start_child.py"
WORKER_RELEASE = f"{REPO / 'tests' / 'worker_run_release.py'}:release"
CHILDREN = 5
ROUNDS = int(os.environ.get("FIRST_START_ROUNDS", "1"))
"""Fresh stores per backend: one in the suite (the races found have deterministic tests below);
``FIRST_START_ROUNDS=20`` for a longer hunt."""
WAIT_S = 240.0
"""Upper bound of any wait (a hung child fails the test, never hangs it)."""


def demo_services() -> list[DemoService]:
    """Every demo system of record the default release (``ops-tools/1.1.0``) sets up."""
    return [
        DemoSystem(None),
        *DemoServices.on(None, secret=b"specs-only-secret").all(),
        HubCrmClient(None, api=HubCrmApi(None)),
    ]


def fresh_env(tmp: Path, database_url: str | None, **extra: str) -> tuple[dict[str, str], Path]:
    """The children's environment and working directory: no store secret configured (the first
    start generates it), and for SQLite no data directory either (the default ``.toolgate`` of
    the working directory, as `make demo` and a plain ``toolgate`` command use)."""
    env = cli_env(tmp / ".toolgate", database_url, **extra)
    env.pop("TOOLGATE_AUDIT_KEY")
    if "TOOLGATE_DATA_DIR" not in extra:
        env.pop("TOOLGATE_DATA_DIR")
    return env, tmp


def start_together(envs: list[dict[str, str]], cwd: Path) -> list[str]:
    """Start one process per environment, release them together once all are at the gate; their
    outputs, in order."""
    ready, go = cwd / "ready", cwd / "go"
    ready.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), str(ready), str(go), f"c{i}"],
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, env in enumerate(envs)
    ]
    try:
        deadline = time.monotonic() + WAIT_S
        while len(list(ready.iterdir())) < len(envs):
            early = [p for p in procs if p.poll() is not None]
            assert not early, f"a child exited before the gate: {early[0].communicate()}"
            assert time.monotonic() < deadline, "the children never reached the gate"
            time.sleep(0.01)
        go.touch()  # every child is at the gate: open it for all at once
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=WAIT_S)
            assert proc.returncode == 0, f"a child failed to start (exit {proc.returncode}):\n{out}\n{err}"
            outputs.append(out.strip())
        return outputs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()  # reaps it and closes its pipes


def key_fingerprint(secret: bytes) -> str:
    return hmac.new(secret, b"toolgate/first-start", hashlib.sha256).hexdigest()[:16]


def assert_one_key(outputs: list[str], data_dir: Path) -> bytes:
    """Every child printed ok with the fingerprint of the one ``audit.key`` on disk."""
    secret = (data_dir / "audit.key").read_bytes().strip()
    keys = {line.split("key=")[1] for line in outputs if line.startswith("ok ")}
    assert len([line for line in outputs if line.startswith("ok ")]) == len(outputs), outputs
    assert keys == {key_fingerprint(secret)}, f"the children ended with different store secrets: {outputs}"
    assert (data_dir / "audit.key").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in data_dir.iterdir() if "audit.key" in p.name] == ["audit.key"]  # no temporary left
    return secret


def schema_rows(store: Store) -> Counter[tuple[str, int]]:
    with store.transaction(write=False) as tx:
        rows = tx.execute("SELECT component, version FROM toolgate_schema")
    return Counter((r["component"], int(r["version"])) for r in rows)


def assert_started_once(store: Store, expected: dict[str, int]) -> None:
    """Each component's steps recorded once, the release loaded once, the audit chain intact."""
    recorded = schema_rows(store)
    assert all(n == 1 for n in recorded.values()), recorded
    for component, steps in expected.items():
        assert sorted(v for c, v in recorded if c == component) == list(range(1, steps + 1)), component
    loaded = [e for e in store.audit.events() if e.event == "release.loaded"]
    assert len(loaded) == 1, f"the release was recorded as loaded {len(loaded)} times"
    assert verify_chain(store).ok


def assert_seeded_once(store: Store) -> None:
    """Every demo table holds its seed rows once (a duplicate would show as a larger count), and
    every demo person was added once."""
    people = set(demo_principals())
    assert {i.user_id for i in store.identities.list()} == people
    added = [e for e in store.audit.events() if e.event == "identity.added"]
    assert len(added) == len(people)
    expected: Counter[str] = Counter()
    for service in demo_services():
        for seed in service.seed_rows():
            expected[seed.table] += len(seed.rows)
    with store.transaction(write=False) as tx:
        found = {table: int(tx.one(f"SELECT COUNT(*) AS n FROM {table}")["n"]) for table in expected}  # type: ignore[index]
    assert found == dict(expected)


def core_steps(**more: int) -> dict[str, int]:
    return {"toolgate": len(MIGRATIONS), ROLLOUT_COMPONENT: len(ROLLOUT_MIGRATIONS), **more}


def demo_steps() -> dict[str, int]:
    return core_steps(**{s.component: len(s.migrations) for s in demo_services()})


def opened(secret: bytes, database_url: str | None, data_dir: Path) -> Store:
    return open_store(database_url, data_dir, key=secret)


@pytest.mark.exclusive
@pytest.mark.slow
def test_processes_starting_together_on_a_fresh_sqlite_data_dir_start_once(tmp_path: Path) -> None:
    for round_ in range(ROUNDS):
        cwd = tmp_path / f"round{round_}"
        cwd.mkdir()
        env, cwd = fresh_env(cwd, None)
        outputs = start_together([env] * CHILDREN, cwd)
        data_dir = cwd / ".toolgate"
        secret = assert_one_key(outputs, data_dir)
        store = opened(secret, None, data_dir)
        try:
            assert_started_once(store, demo_steps())
            assert_seeded_once(store)
        finally:
            store.close()
        assert (data_dir / "checkpoints.sqlite").exists()


def fresh_database(pg_admin_url: str, base_url: str, round_: int) -> str:
    """A new database beside the fixture's (dropped with the server's test cluster)."""
    name = f"{base_url.rsplit('/', 1)[1]}_r{round_}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return base_url.rsplit("/", 1)[0] + "/" + name


def drop_database(pg_admin_url: str, url: str) -> None:
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        name = url.rsplit("/", 1)[1]
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def checkpoint_versions(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT v FROM checkpoint_migrations ORDER BY v").fetchall()]


@pytest.mark.exclusive
@pytest.mark.postgres
@pytest.mark.slow
def test_processes_starting_together_on_a_fresh_postgres_database_start_once(
    tmp_path: Path, pg_url: str, pg_admin_url: str
) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    for round_ in range(ROUNDS):
        # two databases of one server, their starters interleaved: advisory locks are per database,
        # the service roles every demo store provisions are per server
        urls = [pg_url if round_ == 0 else fresh_database(pg_admin_url, pg_url, round_ * 2)]
        urls.append(fresh_database(pg_admin_url, pg_url, round_ * 2 + 1))
        try:
            cwd = tmp_path / f"round{round_}"
            cwd.mkdir()
            envs = [
                fresh_env(cwd, url, TOOLGATE_DATA_DIR=str(cwd / "data"))[0]
                for url in urls * ((CHILDREN + 1) // 2)
            ]
            outputs = start_together(envs, cwd)
            secret = assert_one_key(outputs, cwd / "data")
            for url in urls:
                store = opened(secret, url, cwd / "data")
                try:
                    assert_started_once(store, demo_steps())
                    assert_seeded_once(store)
                finally:
                    store.close()
                assert checkpoint_versions(url) == list(range(len(PostgresSaver.MIGRATIONS)))
        finally:
            for url in urls:
                if url != pg_url:
                    drop_database(pg_admin_url, url)


@pytest.mark.postgres
def test_workers_of_the_worker_run_release_starting_together_start_once(tmp_path: Path, pg_url: str) -> None:
    env, cwd = fresh_env(
        tmp_path, pg_url, TOOLGATE_DATA_DIR=str(tmp_path / "data"), TOOLGATE_RELEASE=WORKER_RELEASE
    )
    outputs = start_together([env] * 4, cwd)
    secret = assert_one_key(outputs, tmp_path / "data")
    store = opened(secret, pg_url, tmp_path / "data")
    try:
        assert_started_once(store, core_steps(**{"worker-run-release": 1}))
    finally:
        store.close()


def test_settings_read_in_the_child_match_the_test(tmp_path: Path) -> None:
    """The children resolve the default data directory of their working directory (a guard on
    the environment above: a stray TOOLGATE_DATA_DIR would hide the default path)."""
    env, _ = fresh_env(tmp_path, None)
    assert Settings.from_env(env).data_dir == Path(".toolgate")
    assert "TOOLGATE_AUDIT_KEY" not in env and "TOOLGATE_DATABASE_URL" not in env


# ---- the races found, each forced by events and barriers ------------------------------------


def test_two_starters_making_the_key_file_together_end_with_one_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first starter is held after deciding to create ``audit.key``; the second makes it and
    goes on. The file was created empty and filled afterwards: the second read the empty file and
    failed (or, with a longer secret half written, used another secret)."""
    path = tmp_path / "data" / "audit.key"
    first_making, second_done = threading.Event(), threading.Event()
    calls = itertools.count()
    real = key_file.new_secret

    def held_first() -> str:
        if next(calls) == 0:
            first_making.set()
            assert second_done.wait(WAIT_S)
        return real()

    monkeypatch.setattr(key_file, "new_secret", held_first)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(key_file.load_secret, path, create=True)
        assert first_making.wait(WAIT_S)
        second = key_file.load_secret(path, create=True)
        second_done.set()
        assert first.result(timeout=WAIT_S) == second == path.read_bytes().strip()
    assert len(second) == 64 and path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["audit.key"]  # the loser's temporary is gone
    assert Settings(data_dir=path.parent).audit_key() == second  # and every later start reads it


def test_eight_threads_making_the_key_file_together_end_with_one_secret(tmp_path: Path) -> None:
    path = tmp_path / "audit.key"
    barrier = threading.Barrier(8)

    def start(_: int) -> bytes:
        barrier.wait()
        return key_file.load_secret(path, create=True)

    with ThreadPoolExecutor(8) as pool:
        secrets_seen = set(pool.map(start, range(8)))
    assert secrets_seen == {path.read_bytes().strip()}


def test_an_empty_key_file_is_waited_for_then_refused(tmp_path: Path) -> None:
    path = tmp_path / "audit.key"
    path.write_bytes(b"")  # another writer (an older toolgate) created it and has not written yet

    def writer_finishes(_: float) -> None:
        path.write_text("ab" * 32)

    assert key_file.read_secret(path, sleep=writer_finishes) == b"ab" * 32
    path.write_bytes(b"")
    with pytest.raises(ConfigurationError, match=r"audit\.key is empty"):
        key_file.read_secret(path, wait_s=0.0, sleep=lambda _: None)
    missing = tmp_path / "none" / "audit.key"
    with pytest.raises(ConfigurationError, match="no store secret"):
        Settings(data_dir=missing.parent).audit_key(create=False)
    assert not missing.parent.exists()  # a read-only command creates nothing


def test_starters_recording_the_same_release_together_record_it_once(store: Store) -> None:
    """Eight processes' worth of ``release.loaded`` at one moment: one event; a different bundle
    afterwards is recorded with the previous one named."""
    auditor = Auditor(store, "ops-tools/1.1.0")
    detail = {
        "manifest_sha256": "a" * 64,
        "policy_version": "1",
        "policy_sha256": "b" * 64,
        "model": "offline",
    }
    barrier = threading.Barrier(8)

    def start(_: int) -> bool:
        barrier.wait()
        return record_release_loaded(store, auditor, detail) is not None

    with ThreadPoolExecutor(8) as pool:
        recorded = list(pool.map(start, range(8)))
    assert recorded.count(True) == 1
    loaded = [e for e in store.audit.events() if e.event == "release.loaded"]
    assert len(loaded) == 1 and loaded[0].detail == {**detail, "previous_release": None}
    upgrade = Auditor(store, "ops-tools/1.2.0")
    event = record_release_loaded(store, upgrade, {**detail, "manifest_sha256": "c" * 64})
    assert event is not None and event.detail["previous_release"] == "ops-tools/1.1.0"
    assert record_release_loaded(store, upgrade, {**detail, "manifest_sha256": "c" * 64}) is None
    assert [e.event for e in store.audit.events()] == ["release.loaded", "release.loaded"]
    assert verify_chain(store).ok


def test_append_audit_after_appends_nothing_when_build_declines(store: Store) -> None:
    assert isinstance(store, Store)
    seen: list[AuditEvent | None] = []

    def decline(last: AuditEvent | None) -> None:
        seen.append(last)

    assert store.audit.append_after("release.loaded", decline) is None
    assert seen == [None] and store.audit.events() == []
