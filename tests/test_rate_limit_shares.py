"""Leased rate-limit shares: no store round trip while a share lasts, and never past the limit.

Two `Store` instances on one database stand for two processes (each with its own limiter);
concurrency is real (threads behind a barrier). Real processes, one with a skewed wall clock,
are in ``tests/test_rate_limit_processes.py``.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from support import shift_store_clock

from toolgate.policy.principal import Principal
from toolgate.policy.ratelimit import InboundRateLimiter, share_of
from toolgate.policy.rules import RateLimit, RateLimits
from toolgate.store import Store

WINDOW = 10**9  # one fixed window for a whole test: no boundary falls inside it
ADA = Principal(user_id="cust-ada", tenant_id="acme")


def count_writes(monkeypatch: pytest.MonkeyPatch, store: Store) -> list[bool]:
    """Every write transaction ``store`` opens from now on."""
    opened: list[bool] = []
    real = store.transaction

    def counted(*, write: bool = True) -> Any:
        if write:
            opened.append(write)
        return real(write=write)

    monkeypatch.setattr(store, "transaction", counted)
    return opened


def test_shares_are_small_limits_one_hit_and_large_ones_a_bounded_tenth() -> None:
    assert [share_of(n) for n in (1, 5, 19, 20, 250, 1000, 10**9)] == [1, 1, 1, 2, 25, 100, 100]


def test_a_call_within_its_shares_makes_no_store_round_trip(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    limits = RateLimits(per_tenant=RateLimit(limit=1000, window_s=WINDOW), global_=RateLimit(limit=500, window_s=WINDOW))
    limiter = InboundRateLimiter(store, limits)
    opened = count_writes(monkeypatch, store)
    for _ in range(50):
        assert limiter.check(ADA, "lookup_order") is None
    assert opened == [True]  # one grant of 100 and 50 for both windows, then nothing
    assert store.counters.value("t:acme", WINDOW) == 100 and store.counters.value("g:", WINDOW) == 50
    assert limiter.check(ADA, "lookup_order") is None
    assert opened == [True, True]  # the global share was spent: one refill
    limiter.give_back()  # 49 + 49 unspent: back to the store in one transaction
    assert opened == [True, True, True]
    assert store.counters.value("t:acme", WINDOW) == 51 and store.counters.value("g:", WINDOW) == 51
    limiter.give_back()  # nothing held any more
    assert len(opened) == 3


def test_threads_of_two_processes_never_exceed_a_leased_limit(two: tuple[Store, Store]) -> None:
    limit, threads, attempts = 200, 8, 60  # shares of 20; 2 x 8 x 60 attempts for 200 hits
    limits = RateLimits(per_tenant=RateLimit(limit=limit, window_s=WINDOW), global_=RateLimit(limit=10**6, window_s=WINDOW))
    limiters = [InboundRateLimiter(s, limits) for s in two]
    start = threading.Barrier(threads * len(limiters))

    def run(index: int) -> int:
        limiter = limiters[index % len(limiters)]
        start.wait()
        return sum(limiter.check(ADA, "lookup_order") is None for _ in range(attempts))

    with ThreadPoolExecutor(max_workers=threads * len(limiters)) as pool:
        allowed = list(pool.map(run, range(threads * len(limiters))))
    assert sum(allowed) == limit  # every share spent, none past the limit
    refused = limiters[0].check(ADA, "lookup_order")
    assert refused is not None and refused.code == "rate_limited"


def test_a_share_ends_with_its_window_on_the_store_clock_whatever_the_process_clock_says(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    window_s, limit = 60, 100  # shares of 10
    now = store.now().timestamp()
    to_end = (now - now % window_s + window_s) - now
    later = monkeypatch.context()
    with later as shifted:
        shift_store_clock(shifted, store, timedelta(seconds=to_end - 1.0))  # 1 s before the window ends
        import toolgate.policy.ratelimit as ratelimit

        monotonic = [time.monotonic()]

        class Clock:
            """This process's clocks: monotonic under the test's control, the wall an hour fast."""

            @staticmethod
            def monotonic() -> float:
                return monotonic[0]

            @staticmethod
            def time() -> float:
                return time.time() + 3600

        shifted.setattr(ratelimit, "time", Clock)
        limiter = InboundRateLimiter(store, RateLimits(per_tenant=RateLimit(limit=limit, window_s=window_s)))
        opened = count_writes(shifted, store)
        assert limiter.check(ADA, "lookup_order") is None
        assert opened == [True]
        first = store.counters.value("t:acme", window_s)
        assert first == 10
        monotonic[0] += 0.5  # still inside the window: the share is spent locally
        assert limiter.check(ADA, "lookup_order") is None
        assert opened == [True]
        monotonic[0] += 1.0  # the window has ended on the store's clock: the rest of the share is void
        shift_store_clock(shifted, store, timedelta(seconds=1.5))
        assert limiter.check(ADA, "lookup_order") is None
        assert opened == [True, True]  # a new share, asked of the store
        assert store.counters.value("t:acme", window_s) == 10  # the new window's share


def test_principals_whose_ids_join_alike_never_share_a_bucket(store: Store) -> None:
    """Joined with ":", tenant ``acme:ada`` with user ``x`` and tenant ``acme`` with user ``ada:x``
    named one principal-tool bucket: one of them spent the other's limit."""
    limiter = InboundRateLimiter(store, RateLimits(per_principal_tool=RateLimit(limit=1, window_s=WINDOW)))
    first, second = Principal(user_id="ada:x", tenant_id="acme"), Principal(user_id="x", tenant_id="acme:ada")
    assert limiter.check(first, "lookup_order") is None
    assert limiter.check(second, "lookup_order") is None
    refused = limiter.check(first, "lookup_order")
    assert refused is not None and refused.code == "rate_limited"
