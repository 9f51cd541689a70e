"""Rate-limit counters forget their ended windows. Before, a row was kept for every bucket and
window ever counted (a principal calling a tool once a minute wrote 1,440 rows a day, for good);
only the sign-in throttle's buckets were ever deleted. Now a row carries its window's end and the
transaction that opens a window deletes the windows that ended `FORGET_AFTER_S` before it, on
the store's clock, whatever limits wrote them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from support import shift_store_clock

from toolgate.clock import parse_iso
from toolgate.store import Store
from toolgate.store.counters import FORGET_AFTER_S
from toolgate.store.migrations_unattended import UNATTENDED_STEPS


def _rows(store: Store) -> dict[str, int]:
    with store.transaction(write=False) as tx:
        return {
            f"{r['bucket']}@{r['window_start']}": int(r["count"])
            for r in tx.execute("SELECT bucket, window_start, count FROM rate_counters")
        }


def _buckets(store: Store) -> list[str]:
    return sorted(key.split("@")[0] for key in _rows(store))


def test_an_ended_window_is_forgotten_when_a_window_opens_after_the_grace(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    minute, forever = 60, 10**9  # the long window ends in 2033: it is running throughout
    store.counters.increment("pt:acme:ada:lookup", minute)
    store.counters.increment("t:acme", forever)
    first = {k for k in _rows(store) if k.startswith("pt:")}
    with monkeypatch.context() as later:  # the minute ended, the grace has not
        shift_store_clock(later, store, timedelta(seconds=minute + 1))
        store.counters.increment("pt:acme:ada:lookup", minute)  # opens the next minute
        assert first <= set(
            _rows(store)
        )  # still counted into by a transaction that read the time before its end
        assert _buckets(store) == ["pt:acme:ada:lookup", "pt:acme:ada:lookup", "t:acme"]
    with monkeypatch.context() as later:  # both minutes ended more than the grace ago
        shift_store_clock(later, store, timedelta(seconds=2 * minute + FORGET_AFTER_S + 1))
        assert store.counters.count_hits([("pt:acme:bob:lookup", minute, 5)]) is None  # opens a window
        assert _buckets(store) == ["pt:acme:bob:lookup", "t:acme"]
        assert store.counters.value("t:acme", forever) == 1  # a running window is never forgotten


def test_a_share_taken_in_a_new_window_forgets_ended_ones_and_a_forgotten_window_takes_nothing_back(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    minute = 60
    granted = store.counters.take_shares([("g:", minute, 100, 10)])
    assert granted.grants == (10,)
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=minute + FORGET_AFTER_S + 1))
        again = store.counters.take_shares([("t:acme", minute, 100, 10)])
        assert again.grants == (10,)
        assert _buckets(store) == ["t:acme"]
        # the first share's window is gone: giving its hits back changes nothing and does not fail
        store.counters.give_back([("g:", granted.window_ends[0] - minute, 10)])
        assert _buckets(store) == ["t:acme"] and store.counters.value("t:acme", minute) == 10


def test_processes_opening_windows_at_once_forget_the_same_ended_rows_without_waiting_on_each_other(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    minute = 60
    for n in range(40):
        store.counters.increment(f"pt:acme:user{n}:lookup", minute)
    shift_store_clock(monkeypatch, store, timedelta(seconds=minute + FORGET_AFTER_S + 1))
    workers = 8
    start = threading.Barrier(workers)

    def open_window(n: int) -> int:
        start.wait()
        return store.counters.increment(f"t:tenant{n}", minute)

    with ThreadPoolExecutor(workers) as pool:
        counts = list(pool.map(open_window, range(workers)))
    assert counts == [1] * workers  # every transaction committed: none deadlocked or failed
    left = _buckets(store)
    assert left == sorted(f"t:tenant{n}" for n in range(workers))


def test_rows_written_before_rows_carried_their_end_are_taken_to_end_a_day_after_they_started(
    store: Store,
) -> None:
    store.counters.increment("pt:acme:ada:lookup", 60)
    step = next(s for s in UNATTENDED_STEPS if "carry their window's end" in s.name)
    fill = next(
        sql for sql in getattr(step, store.dialect).split(";\n") if sql.startswith("UPDATE rate_counters")
    )
    with store.transaction() as tx:
        tx.execute("UPDATE rate_counters SET window_ends = NULL")
        tx.execute(fill)
        row = tx.one("SELECT window_start, window_ends FROM rate_counters")
    assert row is not None
    assert parse_iso(row["window_ends"]) - parse_iso(row["window_start"]) == timedelta(days=1)
    assert len(row["window_ends"]) == len(row["window_start"])  # the same text form: compared as text
