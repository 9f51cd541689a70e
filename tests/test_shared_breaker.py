"""Circuit breakers shared through the store: one breaker for every process on one database.

Two `Store` instances on one database stand for two processes (each with its own
`SharedBreakerRegistry`, as each process builds one); the skew tests run real child processes on
PostgreSQL whose wall clock libfaketime moves by an hour. Concurrency is real (threads behind a
barrier); waits poll the store's own clock, never a fixed sleep.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from support import TEST_KEY, Harness, shift_store_clock
from test_clock_skew import FAST, SLOW, assert_skewed, find_libfaketime, skewed

from toolgate.errors import ToolExecutionError
from toolgate.policy.breaker import BreakerOpenError
from toolgate.policy.shared_breaker import SharedBreaker, SharedBreakerRegistry
from toolgate.store import PostgresStore, Store

THRESHOLD = 3
RESET_S = 30.0


def breaker(store: Store, name: str = "payments", reset_s: float = RESET_S) -> SharedBreaker:
    """The breaker ``name`` of a new process on ``store`` (sync_s=0: every call asks the store)."""
    found = SharedBreakerRegistry(store, THRESHOLD, reset_s, sync_s=0.0).get(name)
    assert isinstance(found, SharedBreaker)
    return found


def failing() -> None:
    raise ToolExecutionError("server_error", "payments is down")


def open_through(b: SharedBreaker) -> None:
    for _ in range(THRESHOLD):
        with pytest.raises(ToolExecutionError):
            b.call(failing)


def test_a_breaker_opened_by_one_process_refuses_in_another(two: tuple[Store, Store]) -> None:
    first, second = breaker(two[0]), breaker(two[1])
    calls: list[str] = []
    assert second.call(lambda: calls.append("ok")) is None  # closed: the call runs
    open_through(first)
    with pytest.raises(BreakerOpenError) as refused:
        second.call(lambda: calls.append("never"))
    assert calls == ["ok"]  # refused without reaching the dependency
    assert 0 < refused.value.retry_after_s <= RESET_S
    assert second.snapshot()["state"] == "open" and second.snapshot()["times_opened"] == 1
    # a caller error proves the dependency answers: it never counts
    third = breaker(two[1], "lookup")
    for _ in range(THRESHOLD + 1):
        with pytest.raises(ToolExecutionError):
            third.call(lambda: (_ for _ in ()).throw(ToolExecutionError("caller_error", "no such order")))
    assert third.state == "closed"


def test_exactly_one_probe_across_processes_in_half_open(
    two: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    open_through(breaker(two[0]))
    for s in two:  # past the reset timeout by the store's clock (both "processes" read the same one)
        shift_store_clock(monkeypatch, s, timedelta(seconds=RESET_S + 1))
    breakers = [breaker(two[i % 2]) for i in range(2)]
    barrier = threading.Barrier(16)
    answered = threading.Event()
    refusals = threading.Semaphore(0)

    def attempt(i: int) -> str:
        b = breakers[i % 2]
        barrier.wait()
        try:
            b.acquire()
        except BreakerOpenError:
            refusals.release()
            return "refused"
        assert answered.wait(60)  # hold the probe until every other caller was answered
        b.record_success()
        return "probe"

    with ThreadPoolExecutor(max_workers=16) as pool:
        futures = [pool.submit(attempt, i) for i in range(16)]
        for _ in range(15):  # every caller but one is refused while the probe is out
            assert refusals.acquire(timeout=60)
        answered.set()
        verdicts = [f.result(timeout=60) for f in futures]
    assert verdicts.count("probe") == 1 and verdicts.count("refused") == 15
    assert breakers[0].state == "closed" == breakers[1].state  # the probe's success closed it for both


def test_a_failed_probe_reopens_for_everyone_and_an_unreported_one_is_given_back(
    two: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = breaker(two[0]), breaker(two[1])
    open_through(first)
    for s in two:
        shift_store_clock(monkeypatch, s, timedelta(seconds=RESET_S + 1))
    with pytest.raises(ToolExecutionError):
        second.call(failing)  # the probe, and it fails
    with pytest.raises(BreakerOpenError):
        first.acquire()
    assert first.snapshot()["times_opened"] == 2
    with monkeypatch.context() as later:
        for s in two:
            shift_store_clock(later, s, timedelta(seconds=RESET_S + 1))
        first.acquire()  # the probe...
        with pytest.raises(BreakerOpenError):
            second.acquire()
        first.release()  # ...given back without a verdict (the claim went elsewhere)
        second.acquire()  # the next caller may probe at once
        second.record_success()
    assert first.state == "closed"


def test_a_skewed_process_clock_changes_nothing(
    two: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process: every clock of this process an hour ahead; the store's decides (on SQLite the
    store's clock is the host's, so it moves too: only PostgreSQL shows the difference)."""
    first = breaker(two[0])
    open_through(first)
    if not isinstance(two[0], PostgresStore):
        pytest.skip("SQLite's clock is this host's: covered by the PostgreSQL case")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    monkeypatch.setattr(time, "monotonic", lambda: 10**9 + real())
    with pytest.raises(BreakerOpenError):
        breaker(two[1]).acquire()


# ---- real child processes with a skewed wall clock (PostgreSQL) ---------------------------------

CHILD = """
import json, sys
from datetime import UTC, datetime
from toolgate.policy.breaker import BreakerOpenError
from toolgate.policy.shared_breaker import SharedBreakerRegistry
from toolgate.store import PostgresStore

url, reset_s = sys.argv[1], float(sys.argv[2])
store = PostgresStore(url, key=KEY_LITERAL)
b = SharedBreakerRegistry(store, 3, reset_s, sync_s=0.0).get("payments")
verdict = "admitted"
try:
    b.acquire()
except BreakerOpenError:
    verdict = "refused"
else:
    b.record_success()
row = store.breakers.row("payments")
print(json.dumps({"clock": datetime.now(UTC).isoformat(), "verdict": verdict, "state": row.state}))
store.close()
""".replace("KEY_LITERAL", repr(TEST_KEY))


def child(env: dict[str, str], url: str, reset_s: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(reset_s)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def poll(condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the store's clock never got there"
        time.sleep(0.05)


@pytest.mark.postgres
def test_child_processes_with_skewed_clocks_neither_reopen_nor_hold_a_breaker(
    pg_url: str, faketime: str, harness_env: dict[str, str]
) -> None:
    reset_s = 20.0  # longer than a child's start on a loaded machine
    store = PostgresStore(pg_url, key=TEST_KEY)
    try:
        store.setup()
        open_through(breaker(store, reset_s=reset_s))
        # an hour FAST: by its clock the reset passed long ago; the store's clock says no
        fast = child(skewed(harness_env, faketime, FAST), pg_url, reset_s)
        assert_skewed(fast["clock"], store.now(), FAST)
        row = store.breakers.row("payments")
        assert row is not None and row.retry_in_s > 0, (
            "the reset passed by the store's clock too: inconclusive"
        )
        assert (fast["verdict"], fast["state"]) == ("refused", "open")
        # once the store's clock passes the reset, an hour SLOW child gets the probe and closes it
        poll(lambda: (row := store.breakers.row("payments")) is not None and row.retry_in_s == 0)
        slow = child(skewed(harness_env, faketime, SLOW), pg_url, reset_s)
        assert_skewed(slow["clock"], store.now(), SLOW)
        assert (slow["verdict"], slow["state"]) == ("admitted", "closed")
    finally:
        store.close()


@pytest.fixture
def faketime() -> str:
    """libfaketime's path (skipped without it, as in tests/test_clock_skew.py)."""
    import os

    path = find_libfaketime()
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("libfaketime is not installed (CI=true: clock-skew tests must not be skipped)")
        pytest.skip("libfaketime is not installed (Debian package `faketime`)")
    return path


@pytest.fixture
def harness_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}


def test_the_gateway_shares_breakers_through_its_store(two: tuple[Store, Store]) -> None:
    harness = Harness(two[0])
    executor = harness.gateway().executor
    assert isinstance(executor.breakers, SharedBreakerRegistry)
    open_through(breaker(two[1], "issue_refund"))  # another process saw the payment system fail
    with pytest.raises(BreakerOpenError):
        executor.breakers.get("issue_refund").acquire()


def test_a_healthy_breaker_reads_the_store_again_only_after_a_change_notice(
    two: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the store's change notices (PostgreSQL), a healthy reading is reused for as long as
    nothing changed: calls cost no store round trip, whatever ``sync_s`` says; a breaker opened by
    another process refuses here once its notice arrived. Without notices (SQLite), ``sync_s``."""
    mine, theirs = two
    reads: list[str] = []
    admit = mine.breakers.admit

    def counted(name: str, holder: str, probe_lease_s: float) -> Any:
        reads.append(name)
        return admit(name, holder, probe_lease_s)

    monkeypatch.setattr(mine.breakers, "admit", counted)
    here = SharedBreakerRegistry(mine, THRESHOLD, RESET_S, sync_s=0.05).get("payments")
    assert isinstance(here, SharedBreaker)
    changes = mine.changes
    changes.start()
    if isinstance(mine, PostgresStore):
        deadline = time.monotonic() + 10
        while not changes.live:  # the listener connects in the background
            assert time.monotonic() < deadline, "the change listener never connected"
            time.sleep(0.01)
    for _ in range(5):
        here.call(lambda: None)
    first = len(reads)
    assert first == 1
    seen = changes.seen(("breaker:payments",))
    if not isinstance(mine, PostgresStore):  # no notices: read again once sync_s has passed
        assert not changes.live
        time.sleep(0.06)
        here.call(lambda: None)
        assert len(reads) == 2
        return
    time.sleep(0.06)  # longer than sync_s: no notice, so the reading still stands
    here.call(lambda: None)
    assert len(reads) == 1
    open_through(breaker(theirs))  # another process opens it
    assert changes.wait(("breaker:payments",), seen, 10), "no change notice for the breaker"
    with pytest.raises(BreakerOpenError):
        here.call(lambda: None)
    assert len(reads) == 2
