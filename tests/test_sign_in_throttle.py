"""Failed sign-ins are throttled per source and per claimed identity, and audited as counted
events, not one row each (issue 29): the directory every door uses, the real CLI, and the HTTP
API. The real ``langgraph dev`` is in tests/test_server_sign_in_throttle.py. SQLite and PostgreSQL.

Proven: past the limit a source (or an identity) is refused ``sign_in_throttled`` before its
token is checked, a correct token included, and every such attempt still counts; another source
or person is untouched; failures from many threads at once are each counted exactly once; the
audit log holds a row for each failure up to the limit, then only at every tenfold, each with the
running count; the window ends on the store's clock (a process clock that says otherwise changes nothing).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from support import Harness, cli_env, kv_lines, open_test_store, shift_store_clock, toolgate

from toolgate.clock import iso
from toolgate.errors import IdentityError
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.sign_in_throttle import DEFAULT_LIMITS, SignInThrottled, _bucket, forget_suspects
from toolgate.store import PostgresStore, SQLiteStore
from toolgate.store.base import Store
from toolgate.tools.demo.identities import demo_token

PER_SOURCE = DEFAULT_LIMITS.per_source
PER_IDENTITY = DEFAULT_LIMITS.per_identity


@pytest.fixture(autouse=True)
def _fresh_suspects_and_one_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """No suspects from another test, and every store's clock held still at the start of a
    window: a test that counts hundreds of failures must not see its window end halfway, however
    slowly a loaded machine runs it (the window's end is tested by moving this clock)."""
    forget_suspects()
    now = datetime.now(UTC).replace(second=1, microsecond=0)
    for backend in (SQLiteStore, PostgresStore):
        monkeypatch.setattr(backend, "_tx_now", lambda self, tx: iso(now))


def refusals(store: Store) -> list[tuple[str | None, dict[str, int]]]:
    """(code, running counts per source and identity) of every sign-in refusal row, oldest first
    (``all``, the store's total, is left out: `test_a_botnet_writes_rows_until_the_total_caps_them`)."""
    return [
        (e.code, {k: v for k, v in dict(e.detail.get("failures", {})).items() if k != "all"})
        for e in store.audit.events()
        if e.event == "identity.refused"
    ]


def directory(store: Store) -> IdentityDirectory:
    return Harness(store).gateway().directory


def test_a_guessing_source_is_throttled_even_with_a_right_token_and_counted_not_logged_per_guess(
    store: Store,
) -> None:
    people = directory(store)
    for guess in range(PER_SOURCE):
        with pytest.raises(IdentityError) as refused:
            people.authenticate_bearer(f"tg_guess_{guess}", source="203.0.113.9")
        assert refused.value.code == "authentication_failed"
    # the guess that hits is refused too: the source is over its limit
    with pytest.raises(SignInThrottled) as throttled:
        people.authenticate_bearer(demo_token("fiona"), source="203.0.113.9")
    assert throttled.value.code == "sign_in_throttled" and throttled.value.retry_after_s > 0
    # another address, and the CLI's own door (no source), are not
    assert people.authenticate_bearer(demo_token("fiona"), source="198.51.100.4").user_id == "fiona"
    assert people.authenticate_bearer(demo_token("fiona")).user_id == "fiona"
    # keep guessing to ten times the limit: every attempt counts; a row for each failure up to
    # the limit, then none until the tenfold
    for guess in range(PER_SOURCE * 10 - PER_SOURCE - 1):
        with pytest.raises(SignInThrottled):
            people.authenticate_bearer(f"tg_more_{guess}", source="203.0.113.9")
    assert refusals(store) == [
        *[("authentication_failed", {"source": n}) for n in range(1, PER_SOURCE + 1)],
        ("sign_in_throttled", {"source": PER_SOURCE * 10}),
    ]


def test_one_person_guessed_at_from_many_places_is_throttled_and_nobody_else(store: Store) -> None:
    people = directory(store)
    wrong = [None, "", demo_token("rita"), "tg_not_a_token"]  # missing, empty, someone else's, wrong
    for attempt in range(PER_IDENTITY):
        with pytest.raises(IdentityError) as refused:
            people.authenticate("fiona", wrong[attempt % len(wrong)], source=f"192.0.2.{attempt}")
        assert refused.value.code in ("missing_token", "authentication_failed")
    with pytest.raises(SignInThrottled):
        people.authenticate("fiona", demo_token("fiona"), source="192.0.2.200")
    with pytest.raises(SignInThrottled):  # the CLI (no source) too: the identity is over its limit
        people.authenticate("fiona", demo_token("fiona"))
    assert people.authenticate("rita", demo_token("rita"), source="192.0.2.200").user_id == "rita"
    # each new address wrote its first failure; the identity's count runs on; the throttled
    # attempts counted without a row
    rows = refusals(store)
    assert [counts for _, counts in rows] == [
        {"source": 1, "identity": n} for n in range(1, PER_IDENTITY + 1)
    ]
    assert rows[0][0] == "missing_token" and rows[2][0] == "authentication_failed"


def test_the_window_ends_on_the_stores_clock_not_the_processes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    people = directory(store)
    for guess in range(PER_SOURCE):
        with pytest.raises(IdentityError):
            people.authenticate_bearer(f"tg_guess_{guess}", source="203.0.113.9")
    with pytest.raises(SignInThrottled):
        people.authenticate_bearer(demo_token("fiona"), source="203.0.113.9")
    # process clocks skewed a day ahead change nothing: the store's window still holds
    skewed = time.time() + 86_400
    monkeypatch.setattr(time, "time", lambda: skewed)
    monkeypatch.setattr(time, "monotonic", lambda: skewed)
    with pytest.raises(SignInThrottled):
        people.authenticate_bearer(demo_token("fiona"), source="203.0.113.9")
    monkeypatch.undo()
    shift_store_clock(monkeypatch, store, timedelta(seconds=DEFAULT_LIMITS.window_s))
    assert people.authenticate_bearer(demo_token("fiona"), source="203.0.113.9").user_id == "fiona"
    # the new window starts counting afresh: its first failure is a row of its own, and the ended
    # window's counts are deleted (the counters stay as small as one window's failures)
    with pytest.raises(IdentityError):
        people.authenticate_bearer("tg_after", source="203.0.113.9")
    assert refusals(store)[-1] == ("authentication_failed", {"source": 1})
    with store.transaction() as tx:
        kept = tx.execute("SELECT bucket, count FROM rate_counters WHERE substr(bucket, 1, 7) = 'signin:'")
    assert sorted(row["count"] for row in kept) == [1, 1], kept  # this source's and the total


def test_failures_from_many_threads_at_once_are_each_counted_once(store: Store) -> None:
    people = directory(store)
    attempts = PER_SOURCE + 10
    barrier = threading.Barrier(attempts)

    def guess(n: int) -> str:
        barrier.wait()
        try:
            people.authenticate_bearer(f"tg_parallel_{n}", source="203.0.113.77")
        except IdentityError as exc:
            return exc.code
        return "accepted"

    with ThreadPoolExecutor(max_workers=attempts) as pool:
        codes = list(pool.map(guess, range(attempts)))
    assert "accepted" not in codes and set(codes) <= {"authentication_failed", "sign_in_throttled"}
    # every attempt counted once (throttled ones too): one row for each count up to the limit
    assert store.counters.value(_bucket("source", "203.0.113.77"), DEFAULT_LIMITS.window_s) == attempts
    assert sorted(counts["source"] for _, counts in refusals(store)) == list(range(1, PER_SOURCE + 1))


def test_a_botnet_writes_rows_until_the_total_caps_them_and_ipv6_counts_per_network(store: Store) -> None:
    people = directory(store)
    cap = DEFAULT_LIMITS.detailed_rows
    # one host rotating through its /64: one source, throttled at the limit
    for n in range(PER_SOURCE):
        with pytest.raises(IdentityError):
            people.authenticate_bearer("tg_v6", source=f"2001:db8:1:2::{n + 1:x}")
    with pytest.raises(SignInThrottled):
        people.authenticate_bearer(demo_token("fiona"), source="2001:db8:1:2:ffff::1")
    assert people.authenticate_bearer(demo_token("fiona"), source="2001:db8:1:3::1").user_id == "fiona"
    # a thousand addresses, one guess each: rows stop at the cap, then one per tenfold of the total
    for n in range(1000):
        with pytest.raises(IdentityError):
            people.authenticate_bearer("tg_bot", source=f"10.{n // 250}.{n % 250}.1")
    rows = [e.detail["failures"]["all"] for e in store.audit.events() if e.event == "identity.refused"]
    assert max(rows) == 1000 and rows[-1] == 1000
    assert len([total for total in rows if total <= cap]) <= cap
    assert [total for total in rows if total > cap] == [1000]


def test_the_real_cli_refuses_a_throttled_person_with_a_stable_error(
    tmp_path: Path, database_url: str | None
) -> None:
    store = open_test_store(tmp_path, database_url)
    people = directory(store)
    for _ in range(PER_IDENTITY):
        with pytest.raises(IdentityError):
            people.authenticate("audrey", "tg_wrong")
    before = len(store.audit.events())
    run = toolgate(
        ["audit", "verify", "--as", "audrey"],
        cli_env(tmp_path, database_url, TOOLGATE_TOKEN=demo_token("audrey")),
        check=False,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    (line,) = [fields for fields in kv_lines(run.stderr) if "error" in fields]
    assert line["error"] == "sign_in_throttled", run.stderr
    # nothing was read: no audit.read row, and the throttled attempt wrote no row of its own
    written = [e.event for e in store.audit.events()[before:]]
    assert "audit.read" not in written and "identity.refused" not in written, written
    store.close()


def test_the_http_api_answers_429_with_retry_after_and_writes_no_row_past_the_limit(
    store: Store,
) -> None:
    from toolgate.graph.server import http

    gw = Harness(store).gateway()
    with TestClient(http.create_app(lambda: gw, waker_interval_s=None)) as client:
        for guess in range(PER_SOURCE + 10):
            client.get("/toolgate/me", headers={"Authorization": f"Bearer tg_guess_{guess}"})
        right = client.get("/toolgate/me", headers={"Authorization": f"Bearer {demo_token('fiona')}"})
    assert right.status_code == 429, right.text
    assert right.json()["error"] == "sign_in_throttled"
    assert int(right.headers["retry-after"]) > 0
    assert [counts for _, counts in refusals(store)] == [{"source": n} for n in range(1, PER_SOURCE + 1)]
