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
from toolgate.policy.sign_in_throttle import (
    DEFAULT_LIMITS,
    SignInLimits,
    SignInThrottled,
    _bucket,
    forget_suspects,
)
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
    monkeypatch.setattr(PostgresStore, "calibrated_now", lambda self: now)  # SQLite's is its `now`


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


def test_behind_a_trusted_proxy_each_client_is_counted_apart_and_nobody_else_can_name_an_address(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a reverse proxy every connection comes from the proxy: counted per connection, one
    guesser would throttle every user. With the proxy named (``TOOLGATE_TRUSTED_PROXIES``) a
    guesser is counted per the address the proxy appended to ``X-Forwarded-For``, whatever they
    wrote into the header themselves, and another client behind the same proxy still signs in.
    A connection from anywhere else is counted per its own address, its header ignored."""
    from toolgate.graph.server import http

    gw = Harness(store).gateway()
    proxy = ("10.0.0.7", 41000)
    monkeypatch.setenv("TOOLGATE_TRUSTED_PROXIES", "10.0.0.0/24")
    with TestClient(http.create_app(lambda: gw, waker_interval_s=None), client=proxy) as client:
        for guess in range(PER_SOURCE):  # the guesser rotates what it claims; the proxy appends the truth
            spoofed = f"198.51.100.{guess}, 203.0.113.9"
            client.get(
                "/toolgate/me",
                headers={"Authorization": f"Bearer tg_guess_{guess}", "X-Forwarded-For": spoofed},
            )
        guesser = client.get(
            "/toolgate/me",
            headers={"Authorization": f"Bearer {demo_token('fiona')}", "X-Forwarded-For": "203.0.113.9"},
        )
        other = client.get(
            "/toolgate/me",
            headers={"Authorization": f"Bearer {demo_token('fiona')}", "X-Forwarded-For": "203.0.113.50"},
        )
    assert guesser.status_code == 429 and guesser.json()["error"] == "sign_in_throttled"
    assert other.status_code == 200, other.text
    sources = {e.detail.get("source") for e in store.audit.events() if e.event == "identity.refused"}
    assert sources == {"203.0.113.9"}

    with TestClient(http.create_app(lambda: gw, waker_interval_s=None), client=("192.0.2.1", 5)) as direct:
        for guess in range(PER_SOURCE):  # not a proxy: its header names nobody
            direct.get(
                "/toolgate/me",
                headers={"Authorization": f"Bearer tg_x_{guess}", "X-Forwarded-For": f"198.51.100.{guess}"},
            )
        still = direct.get(
            "/toolgate/me",
            headers={"Authorization": f"Bearer {demo_token('fiona')}", "X-Forwarded-For": "203.0.113.77"},
        )
    assert still.status_code == 429


def test_the_forwarded_source_is_the_right_most_untrusted_hop() -> None:
    from ipaddress import ip_network

    from toolgate.graph.server.client_address import client_address, forwarded_source

    proxies = (ip_network("10.0.0.0/8"), ip_network("fd00::/8"))
    assert forwarded_source("10.1.1.1", ["1.1.1.1, 2.2.2.2"], proxies) == "2.2.2.2"
    assert forwarded_source("10.1.1.1", ["1.1.1.1", "2.2.2.2, 10.9.9.9"], proxies) == "2.2.2.2"  # two proxies
    assert forwarded_source("10.1.1.1", ["10.2.2.2, 10.3.3.3"], proxies) == "10.2.2.2"  # all trusted
    assert forwarded_source("10.1.1.1", ["1.1.1.1, not-an-address"], proxies) == "10.1.1.1"
    assert forwarded_source("10.1.1.1", [], proxies) == "10.1.1.1"
    assert forwarded_source("[fd00::1]", ["2001:db8::5"], proxies) == "2001:db8::5"
    assert forwarded_source("192.0.2.1", ["2.2.2.2"], proxies) == "192.0.2.1"  # not a proxy
    assert forwarded_source("10.1.1.1", ["2.2.2.2"], ()) == "10.1.1.1"  # no proxies named
    assert forwarded_source(None, ["2.2.2.2"], proxies) is None
    scope = {"client": ("10.0.0.1", 1), "headers": [(b"x-forwarded-for", b"2.2.2.2")]}
    assert client_address(scope) == "10.0.0.1"  # the setting is unset in this test


def test_a_trusted_proxy_setting_that_is_not_an_address_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolgate.settings import InvalidSetting, setting

    monkeypatch.setenv("TOOLGATE_TRUSTED_PROXIES", "10.0.0.7,proxy.internal")
    with pytest.raises(InvalidSetting, match="TOOLGATE_TRUSTED_PROXIES"):
        setting("trusted_proxies")
    monkeypatch.setenv("TOOLGATE_TRUSTED_PROXIES", "10.0.0.7, 192.168.0.0/16")
    assert setting("trusted_proxies") == ("10.0.0.7", "192.168.0.0/16")


def test_the_sign_in_window_is_a_setting_and_its_default_is_a_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLGATE_SIGN_IN_WINDOW_S", raising=False)
    assert SignInLimits.from_settings().window_s == 60
    monkeypatch.setenv("TOOLGATE_SIGN_IN_WINDOW_S", "300")
    limits = SignInLimits.from_settings()
    assert (limits.window_s, limits.per_source, limits.per_identity) == (300, 30, 10)
