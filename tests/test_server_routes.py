"""The approval flow through the custom HTTP routes of the REAL ``langgraph dev``, and a CLI approval
that wakes a thread waiting on the server.

One server (module scope); requesters run to the approval interrupt with ``langgraph-sdk``; the
reviewers act through ``/toolgate/...`` with their bearer tokens (or through the ``toolgate`` CLI
on the server's data directory). Proven: another tenant sees nothing (404, audited); the
requester's own approval is refused (``self_approval``, 409) and changes nothing; a support
reviewer approving twice is still one person (``already_decided``); an edit is a new proposal;
an approval through the API wakes the server thread, which executes once; an approval made with
the CLI is picked up by the server's waker, which resumes the thread, which executes once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from server_support import Server, client_as, interrupts_of, people_server_and_store
from support import REFUND_REQUEST, cli_env, kv_lines, toolgate

from toolgate.canonical import idempotency_key_for
from toolgate.store.base import Store
from toolgate.tools.demo import DemoSystem
from toolgate.tools.demo.identities import demo_token

pytestmark = [pytest.mark.server, pytest.mark.slow]

WAIT_S = 90.0


@dataclass
class Rig:
    server: Server
    store: Store
    orders: int = 0

    def api(self, user: str, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {demo_token(user)}"}
        with httpx.Client(base_url=self.server.url, timeout=60, trust_env=False) as http:
            return http.request(method, path, json=body, headers=headers)

    def payments(self, operation_key: str) -> int:
        return DemoSystem(self.store).count(
            "sor_payment_requests", idempotency_key=idempotency_key_for(operation_key)
        )


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with people_server_and_store(tmp_path_factory.mktemp("lgdev-routes")) as (server, store):
        yield Rig(server, store)


def pending_refund(rig: Rig) -> tuple[str, dict[str, Any]]:
    """cust-ada's refund of a fresh order, waiting on the server: ``(thread_id, proposal facts)``."""
    rig.orders += 1
    order = f"O-{9200 + rig.orders}"
    with rig.store.transaction() as tx:
        tx.execute(
            "INSERT INTO sor_orders (order_id, tenant_id, customer_id, item, amount_cents, currency, status,"
            " card_number) VALUES (?, 'acme', 'cust-ada', 'Grinder G-2', 4999, 'USD', 'delivered', '4111111111111111')",
            (order,),
        )
    with client_as(rig.server, "cust-ada") as client:
        thread_id = client.threads.create()["thread_id"]
        request = REFUND_REQUEST.replace("O-5512", order)
        result = client.runs.wait(
            thread_id, "toolgate", input={"messages": [{"role": "user", "content": request}]}
        )
        assert result["status"] == "awaiting_approval", result
        (interrupt,) = interrupts_of(client.threads.get_state(thread_id))
    (proposal,) = interrupt["value"]["toolgate"]["proposals"]
    return thread_id, proposal


def wait_for_thread(rig: Rig, thread_id: str, status: str) -> dict[str, Any]:
    """Poll the thread (as its owner) until its state says ``status`` (the server's waker is async)."""
    deadline = time.monotonic() + WAIT_S
    with client_as(rig.server, "cust-ada") as client:
        while True:
            values = client.threads.get_state(thread_id)["values"]
            if values.get("status") == status:
                return dict(values)
            assert time.monotonic() < deadline, (
                f"thread {thread_id} never reached {status}: {values.get('status')}"
            )
            time.sleep(0.25)


def test_another_tenant_sees_nothing(rig: Rig) -> None:
    _, proposal = pending_refund(rig)
    listed = rig.api("gina", "GET", "/toolgate/proposals")
    assert listed.status_code == 200 and listed.json()["proposals"] == []
    shown = rig.api("gina", "GET", f"/toolgate/proposals/{proposal['proposal_id']}")
    approve = rig.api(
        "gina",
        "POST",
        f"/toolgate/proposals/{proposal['proposal_id']}/approve",
        {"digest": proposal["digest"]},
    )
    assert shown.status_code == approve.status_code == 404 and shown.json() == approve.json()
    assert rig.api("gina", "GET", "/toolgate/proposals/prop_does_not_exist").json() == shown.json()
    assert any(
        e.event == "api.refused" and e.proposal_id == proposal["proposal_id"]
        for e in rig.store.audit.events()
    )


def test_an_approval_through_the_api_wakes_the_thread_and_it_runs_once(rig: Rig) -> None:
    thread_id, proposal = pending_refund(rig)
    url = f"/toolgate/proposals/{proposal['proposal_id']}"
    own = rig.api("cust-ada", "POST", f"{url}/approve", {"digest": proposal["digest"]})
    assert own.status_code == 409 and own.json()["error"] == "self_approval"
    assert rig.store.operations.get(proposal["operation_key"]).status == "pending_approval"  # type: ignore[union-attr]
    detail = rig.api("fiona", "GET", url).json()
    assert detail["arguments"] == {**detail["arguments"]} and detail["digest"] == proposal["digest"]
    assert detail["seconds_left"] > 0 and detail["risk"] == "danger"
    approved = rig.api("fiona", "POST", f"{url}/approve", {"digest": proposal["digest"]})
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    done = wait_for_thread(rig, thread_id, "done")
    assert done["outcomes"][proposal["call_id"]]["status"] == "completed"
    assert rig.payments(proposal["operation_key"]) == 1
    operation = rig.api("fiona", "GET", f"/toolgate/operations/{proposal['operation_key']}").json()
    assert operation["status"] == "succeeded"
    # audit events are for auditors at this door as on the CLI: the approver is refused, audrey reads
    refused = rig.api("fiona", "GET", f"/toolgate/operations/{proposal['operation_key']}/trace")
    assert refused.status_code == 403 and refused.json()["error"] == "not_auditor"
    trace = rig.api("audrey", "GET", f"/toolgate/operations/{proposal['operation_key']}/trace").json()
    assert trace["missing"] == [] and trace["tamper_check"] == "PASS"


def test_one_reviewer_twice_is_one_person_and_an_edit_is_a_new_proposal(rig: Rig) -> None:
    thread_id, proposal = pending_refund(rig)
    url = f"/toolgate/proposals/{proposal['proposal_id']}"
    first = rig.api("rita", "POST", f"{url}/approve", {"digest": proposal["digest"]})
    assert first.status_code == 200 and first.json()["status"] == "pending_approval"
    twice = rig.api("rita", "POST", f"{url}/approve", {"digest": proposal["digest"]})
    assert twice.status_code == 409 and twice.json()["error"] == "already_decided"
    assert rig.store.operations.get(proposal["operation_key"]).status == "pending_approval"  # type: ignore[union-attr]
    arguments = rig.api("sam", "GET", url).json()["arguments"]
    edited = rig.api("sam", "POST", f"{url}/edit", {"arguments": {**arguments, "amount_cents": 1234}})
    assert edited.status_code == 201, edited.text
    new = edited.json()
    assert new["proposal_id"] != proposal["proposal_id"] and new["status"] == "pending_approval"
    own = rig.api(
        "sam", "POST", f"/toolgate/proposals/{new['proposal_id']}/approve", {"digest": new["digest"]}
    )
    assert own.status_code == 409 and own.json()["error"] == "editor_approval"
    approved = rig.api(
        "fiona", "POST", f"/toolgate/proposals/{new['proposal_id']}/approve", {"digest": new["digest"]}
    )
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    wait_for_thread(rig, thread_id, "done")
    assert rig.payments(new["operation_key"]) == 1 and rig.payments(proposal["operation_key"]) == 0


def test_an_approval_made_with_the_cli_wakes_the_server_thread(rig: Rig) -> None:
    thread_id, proposal = pending_refund(rig)
    env = cli_env(rig.server.data_dir)
    approved = toolgate(["approve", proposal["proposal_id"], "--as", "fiona"], env)
    assert kv_lines(approved.stdout)[0]["status"] == "approved"
    done = wait_for_thread(rig, thread_id, "done")  # the server's waker resumed it; nobody else did
    assert done["outcomes"][proposal["call_id"]]["status"] == "completed"
    assert rig.payments(proposal["operation_key"]) == 1


def test_the_runtimes_mcp_and_a2a_routes_are_not_served(rig: Rig) -> None:
    """``langgraph dev`` adds ``/mcp`` and ``/a2a/{assistant}``, which ran the graph for any
    signed-in caller outside every route this README documents; langgraph.json turns both off."""
    mcp = rig.api("fiona", "POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    a2a = rig.api("fiona", "POST", "/a2a/toolgate", {"jsonrpc": "2.0", "id": 1, "method": "message/send"})
    assert mcp.status_code == 404, mcp.text
    assert a2a.status_code == 404, a2a.text
    assert rig.api("fiona", "GET", "/toolgate/me").status_code == 200  # our own routes still serve


def test_a_reviewer_cannot_copy_a_customers_thread_an_owner_can_copy_their_own(rig: Rig) -> None:
    """A copy keeps the source's metadata, owner included: a reviewer (who may read the tenant's
    threads) copying cust-ada's thread would make a thread owned by cust-ada that she never made."""
    thread_id, _ = pending_refund(rig)
    before = rig.store.audit.events()
    with client_as(rig.server, "fiona") as reviewer, pytest.raises(Exception) as refused:
        reviewer.threads.copy(thread_id)
    assert "403" in str(refused.value) or "thread_copy_refused" in str(refused.value)
    new = rig.store.audit.events()[len(before) :]
    assert [(e.event, e.code) for e in new if e.event == "access.refused"] == [
        ("access.refused", "thread_copy_refused")
    ]
    with client_as(rig.server, "fiona") as reviewer:  # no thread of hers came of it
        assert reviewer.threads.search(metadata={"owner": "fiona"}) == []
    with client_as(rig.server, "cust-ada") as owner:
        copied = owner.threads.copy(thread_id)
        assert copied["metadata"]["owner"] == "cust-ada"
