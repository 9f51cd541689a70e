"""Inbound rate limits hold across processes that share PostgreSQL (real concurrency), counted
one hit at a time (a small limit) or leased in shares (a large one), also when one process's wall
clock is an hour off (libfaketime)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import TEST_KEY
from test_clock_skew import FAST, find_libfaketime, skewed

from toolgate.store import PostgresStore

LIMIT = 25
ATTEMPTS_PER_PROCESS = 40

WORKER = """
import sys, time
from concurrent.futures import ThreadPoolExecutor
from toolgate.policy.principal import Principal
from toolgate.policy.ratelimit import InboundRateLimiter
from toolgate.policy.rules import RateLimit, RateLimits
from toolgate.store import PostgresStore

url, limit, attempts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = PostgresStore(url, key=KEY_LITERAL, max_size=8)
# a window far longer than the test (windows follow the store's clock): no boundary falls inside it
limiter = InboundRateLimiter(store, RateLimits(per_principal_tool=RateLimit(limit=limit, window_s=10**9)))
print(time.time(), file=sys.stderr)  # this process's wall clock (a skewed one shows it)
who = Principal(user_id="cust-ada", tenant_id="acme")
store.operations.get("warm-up")  # open the pool before the start line
print("ready", flush=True)
sys.stdin.readline()  # the start line: every process released together (never by its own clock)
with ThreadPoolExecutor(max_workers=8) as pool:
    allowed = sum(pool.map(lambda _: limiter.check(who, "lookup_order") is None, range(attempts)))
store.close()
print(allowed)
""".replace("KEY_LITERAL", repr(TEST_KEY))


def started_together(procs: list[subprocess.Popen[str]]) -> list[tuple[str, str]]:
    """Release the worker processes together once each is ready (its pool open); their output."""
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.strip() == "ready", (line, p.stderr.read() if p.stderr else "")
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    return [p.communicate(timeout=120) for p in procs]


@pytest.mark.postgres
def test_limit_is_shared_by_two_processes(pg_url: str) -> None:
    store = PostgresStore(pg_url, key=TEST_KEY)
    store.setup()
    store.close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, pg_url, str(LIMIT), str(ATTEMPTS_PER_PROCESS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = started_together(procs)
    assert all(p.returncode == 0 for p in procs), results
    allowed = [int(out.split()[-1]) for out, _ in results]
    assert sum(allowed) == LIMIT, allowed


@pytest.mark.postgres
def test_leased_shares_hold_the_limit_across_two_processes_one_with_a_skewed_clock(pg_url: str) -> None:
    """A limit of 400 is leased in shares of 40: the two processes spend them without asking the
    store each time, and together never get more than 400, though one's wall clock is an hour
    fast (a share lasts as long as its window on the store's clock, measured on the monotonic one).
    A process holds at most one share unspent; one that was refused holds none."""
    lib = find_libfaketime()
    if lib is None:
        if os.environ.get("CI") == "true":
            pytest.fail("libfaketime is not installed (CI=true: clock-skew tests must not be skipped)")
        pytest.skip("libfaketime is not installed (Debian package `faketime`)")
    limit, attempts = 400, 450  # each process alone tries more than the limit: both end refused, holding nothing
    store = PostgresStore(pg_url, key=TEST_KEY)
    store.setup()
    store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, pg_url, str(limit), str(attempts)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=skewed(env, lib, FAST) if i == 1 else env,
        )
        for i in range(2)
    ]
    results = started_together(procs)
    assert all(p.returncode == 0 for p in procs), results
    clocks = [float(err.strip().splitlines()[0]) for _, err in results]
    assert clocks[1] - clocks[0] > 3000, clocks  # the child really ran an hour fast
    allowed = [int(out.split()[-1]) for out, _ in results]
    assert sum(allowed) == limit, allowed
