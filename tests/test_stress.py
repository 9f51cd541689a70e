"""Stress: 8 processes x 64 concurrent deliveries of 200 approved operations on PostgreSQL give
exactly 200 effects and lose none."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from support import TEST_KEY, Harness, principal

from toolgate.canonical import idempotency_key_for
from toolgate.graph.review.decisions import decide
from toolgate.graph.review.proposals import draft_proposal, store_proposal
from toolgate.store import PostgresStore

OPERATIONS = 200
PROCESSES = 8
THREADS = 64

WORKER = """
import random, sys, time
from concurrent.futures import ThreadPoolExecutor
from toolgate.policy import PolicyRules
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.store import PostgresStore
from toolgate.testing import ScriptedChatModel, open_test_app
from toolgate.tools import Registry
from toolgate.tools.demo import REFUND_RELEASE
from toolgate.tools.demo import DemoSystem, demo_specs

url, keys_file, start_at, worker = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
keys = open(keys_file).read().split()
random.Random(worker).shuffle(keys)
store = PostgresStore(url, key=KEY_LITERAL, max_size=12)
system = DemoSystem(store)
gw = open_test_app(tools=Registry.of(REFUND_RELEASE, demo_specs(system), system),
                   policy=DEMO_RELEASES[REFUND_RELEASE].policy, store=store, start=False).gateway
store.operations.get("warm-up")
time.sleep(max(0.0, start_at - time.time()))
with ThreadPoolExecutor(max_workers=int(sys.argv[5])) as pool:
    claims = sum(d.claim == "ACQUIRED" for d in pool.map(
        lambda k: gw.executor.deliver(k, worker_id=f"{worker}", wait_s=120), keys))
print(claims)
""".replace("KEY_LITERAL", repr(TEST_KEY))


@pytest.mark.exclusive
@pytest.mark.postgres
@pytest.mark.slow
def test_eight_processes_sixty_four_threads_two_hundred_operations(pg_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    harness = Harness(PostgresStore(pg_url, key=TEST_KEY, max_size=10))
    gw = harness.gateway()
    spec = harness.registry.tools["restart_service"]
    keys = []
    for n in range(OPERATIONS):
        draft = draft_proposal(
            gw,
            spec,
            tenant_id="acme",
            requester_id="sam",
            thread_id="t-stress",
            call_id=f"c{n}",
            arguments={"service_alias": "web", "reason": f"stress restart {n}"},
        )
        proposal, _, _ = store_proposal(gw, spec, draft, actor="sam")
        decide(gw, proposal.proposal_id, principal("omar"), "approve")
        keys.append(proposal.operation_key)
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("\n".join(keys))
    start_at = str(time.time() + 4)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, pg_url, str(keys_file), start_at, f"proc{i}", str(THREADS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    claims = [int(out.strip()) for out, _ in outputs]
    assert sum(claims) == OPERATIONS
    statuses = [harness.store.operations.get(k).status for k in keys]  # type: ignore[union-attr]
    assert statuses.count("succeeded") == OPERATIONS  # none lost
    with harness.store.transaction(write=False) as tx:
        effects = tx.one("SELECT COUNT(*) AS n FROM sor_restarts WHERE tenant_id = 'acme'")
        requests = tx.one("SELECT COUNT(*) AS n FROM sor_restart_requests WHERE tenant_id = 'acme'")
    assert effects is not None and int(effects["n"]) == OPERATIONS
    assert requests is not None and int(requests["n"]) == OPERATIONS  # one downstream request per operation
    assert all(
        harness.system.count("sor_restart_requests", idempotency_key=idempotency_key_for(k)) == 1
        for k in keys[:20]
    )
    harness.store.close()
