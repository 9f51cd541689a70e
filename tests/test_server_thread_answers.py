"""A server thread whose write settled after its run ended shows the store's outcome to its client
(issue 29), on the REAL ``langgraph dev``.

lee's stock adjustment is approved while another process holds the SKU's lease, so the woken
run's delivery is deferred (``resource_busy``: the operation stays approved) and the thread
ends. A worker (``toolgate worker run --once`` on the server's data directory, another process)
delivers it once the lease is free: the store says ``succeeded`` while the thread, untouched,
still says what it saw. The server's waker answers it from the store: the client reading the
thread's state sees ``completed``, and the stock moved exactly once. Before, the view kept the
stale outcome for good. The deferral is forced by holding the lease (no timing window); the test
polls the thread's state for its outcome, never sleeps for an interleaving.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from server_support import Server, client_as, interrupts_of, people_server_and_store
from support import cli_env, kv_lines, toolgate

from toolgate.canonical import canonical_json
from toolgate.store.base import Store
from toolgate.tools.demo.identities import demo_token

pytestmark = [pytest.mark.server, pytest.mark.slow]

WAIT_S = 90.0
ADJUST = 'call update_inventory {"sku": "SKU-7", "delta": 5, "reason": "received"}'
SKU_LEASE = (canonical_json(["acme", "sku", "SKU-7"]),)


@pytest.fixture(scope="module")
def server_and_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Store]]:
    # the woken run waits for the SKU's lease only briefly, then defers the delivery
    env = {"TOOLGATE_DUPLICATE_WAIT_S": "0.2", "TOOLGATE_WAKER_INTERVAL_S": "0.5"}
    with people_server_and_store(tmp_path_factory.mktemp("lgdev-answers"), env) as pair:
        yield pair


def thread_values(server: Server, thread_id: str) -> dict[str, Any]:
    with client_as(server, "lee") as client:
        return dict(client.threads.get_state(thread_id)["values"])


def wait_for(server: Server, thread_id: str, what: str, done: Any) -> dict[str, Any]:
    """Poll the thread's state (as its owner) until ``done(values)``."""
    deadline = time.monotonic() + WAIT_S
    while True:
        with client_as(server, "lee") as client:
            state = client.threads.get_state(thread_id)
            thread = client.threads.get(thread_id)
        values = dict(state["values"])
        if thread["status"] == "idle" and done(values):
            return values
        assert time.monotonic() < deadline, (
            f"thread {thread_id} never {what}: {thread['status']} {values.get('outcomes')}"
        )
        time.sleep(0.2)


def stock(store: Store) -> int:
    with store.transaction(write=False) as tx:
        row = tx.one("SELECT on_hand FROM sor_inventory WHERE tenant_id = 'acme' AND sku = 'SKU-7'")
    assert row is not None
    return int(row["on_hand"])


def test_a_write_settled_after_its_run_ended_is_shown_from_the_store(
    server_and_store: tuple[Server, Store],
) -> None:
    server, store = server_and_store
    before = stock(store)
    with client_as(server, "lee") as client:
        thread_id = client.threads.create()["thread_id"]
        result = client.runs.wait(
            thread_id, "toolgate", input={"messages": [{"role": "user", "content": ADJUST}]}
        )
        assert result["status"] == "awaiting_approval", result
        (interrupt,) = interrupts_of(client.threads.get_state(thread_id))
    (proposal,) = interrupt["value"]["toolgate"]["proposals"]
    (call_id,) = [
        c for c, r in result["calls"].items() if r.get("operation_key") == proposal["operation_key"]
    ]

    # another process holds the SKU: the woken run's delivery is deferred, the thread ends
    assert store.leases.acquire(SKU_LEASE, "another-process", 600)
    with httpx.Client(base_url=server.url, timeout=60, trust_env=False) as http:
        approved = http.post(
            f"/toolgate/proposals/{proposal['proposal_id']}/approve",
            json={"digest": proposal["digest"]},
            headers={"Authorization": f"Bearer {demo_token('wanda')}"},
        )
    assert approved.status_code == 200, approved.text
    ended = wait_for(server, thread_id, "ended", lambda v: v.get("status") == "done")
    assert ended["outcomes"][call_id]["status"] == "approved"  # not delivered: what the thread saw
    op = store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "approved" and stock(store) == before

    # the lease is free: a worker elsewhere delivers it; the store says succeeded
    store.leases.release(SKU_LEASE, "another-process")
    drained = toolgate(["worker", "run", "--once"], cli_env(server.data_dir))
    assert "succeeded=1" in drained.stdout, drained.stdout
    # the thread is the server's (not in the worker's checkpointer): the server answers it
    assert not [line for line in kv_lines(drained.stdout) if "answered" in line]
    settled = store.operations.get(proposal["operation_key"])
    assert settled is not None and settled.status == "succeeded" and stock(store) == before + 5

    values = wait_for(
        server, thread_id, "showed the store's outcome",
        lambda v: (v.get("outcomes", {}).get(call_id) or {}).get("status") == "completed",
    )  # fmt: skip
    assert values["status"] == "done"
    last = values["messages"][-1]
    assert f"update_inventory [{call_id}]: completed" in last["content"], last
    assert stock(store) == before + 5  # answering delivered nothing again
    with store.transaction(write=False) as tx:
        (row,) = tx.execute(
            "SELECT COUNT(*) AS n FROM sor_inventory_adjustments WHERE tenant_id = 'acme' AND sku = 'SKU-7'"
        )
    assert row["n"] == 1
