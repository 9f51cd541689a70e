"""Inbound rate limits hold across processes that share PostgreSQL (real concurrency)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from support import TEST_KEY

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

url, start_at, limit, attempts = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
store = PostgresStore(url, key=KEY_LITERAL, max_size=8)
# a window far longer than the test (windows follow the store's clock): no boundary falls inside it
limiter = InboundRateLimiter(store, RateLimits(per_principal_tool=RateLimit(limit=limit, window_s=10**9)))
who = Principal(user_id="cust-ada", tenant_id="acme")
store.operations.get("warm-up")  # open the pool before the start line
time.sleep(max(0.0, start_at - time.time()))
with ThreadPoolExecutor(max_workers=8) as pool:
    allowed = sum(pool.map(lambda _: limiter.check(who, "lookup_order") is None, range(attempts)))
store.close()
print(allowed)
""".replace("KEY_LITERAL", repr(TEST_KEY))


@pytest.mark.postgres
def test_limit_is_shared_by_two_processes(pg_url: str) -> None:
    store = PostgresStore(pg_url, key=TEST_KEY)
    store.setup()
    store.close()
    start_at = str(time.time() + 3.0)  # both processes start counting together (any overlap proves it)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, pg_url, start_at, str(LIMIT), str(ATTEMPTS_PER_PROCESS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    allowed = [int(out.strip()) for out, _ in results]
    assert sum(allowed) == LIMIT, allowed
