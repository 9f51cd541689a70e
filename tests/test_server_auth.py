"""People meet toolgate through the REAL ``langgraph dev`` server, authenticated by its auth handler.

One server (module scope) on a store holding the demo people; clients are ``langgraph-sdk`` sync
clients carrying a person's bearer token. Proven:

* a customer (A, cust-ada) runs to the approval interrupt as herself, with no principal anywhere
  in the request; naming a principal in ``context`` is refused with ``principal_in_context``;
* another customer of the same tenant (C) and a customer of another tenant can neither read,
  search, run, stream nor update A's thread; a state update by anyone but an operator is refused
  with ``state_update_refused``;
* A's own approval, sent as a LangChain HITL decision, is refused (``self_approval``) in the run's
  output, nothing runs and the thread waits again; a finance reviewer (B) approves by resuming
  with ``{"decisions": [{"type": "approve"}]}`` and the refund runs exactly once;
* two-person: a support reviewer approving twice is still one person (``already_decided`` in the
  run's output, still pending); a second support reviewer completes it, once;
* an ``edit`` decision becomes a new proposal that waits for its own approval, and the editor's
  own approval of it is refused (``editor_approval``);
* a reviewer of the tenant may resume a thread but not start a new turn in it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from server_support import Server, client_as, interrupts_of, people_server_and_store
from support import REFUND_REQUEST

from toolgate.canonical import idempotency_key_for
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.store.base import Store
from toolgate.tools.demo import DemoSystem

pytestmark = [pytest.mark.server, pytest.mark.slow]

GRAPH = "toolgate"
BOB = Principal(
    user_id="cust-bob",
    tenant_id="acme",
    roles=frozenset({"customer"}),
    scopes=frozenset({"orders:read", "refunds:request"}),
)


@dataclass
class Rig:
    server: Server
    store: Store
    orders: int = 0

    def payments(self, operation_key: str) -> int:
        return DemoSystem(self.store).count(
            "sor_payment_requests", idempotency_key=idempotency_key_for(operation_key)
        )

    def events(self, event: str, code: str | None = None) -> list[Any]:
        return [e for e in self.store.audit.events() if e.event == event and (code is None or e.code == code)]


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with people_server_and_store(tmp_path_factory.mktemp("lgdev-auth")) as (server, store):
        IdentityDirectory(store).add(BOB, by=None, token="demo-token-cust-bob")
        yield Rig(server, store)


def new_order(rig: Rig) -> str:
    """A fresh delivered order of cust-ada (each test refunds its own: an order is refunded once)."""
    rig.orders += 1
    order = f"O-{9100 + rig.orders}"
    with rig.store.transaction() as tx:
        tx.execute(
            "INSERT INTO sor_orders (order_id, tenant_id, customer_id, item, amount_cents, currency, status,"
            " card_number) VALUES (?, 'acme', 'cust-ada', 'Mixer M-1', 4999, 'USD', 'delivered', '4111111111111111')",
            (order,),
        )
    return order


def start_refund(rig: Rig, user: str = "cust-ada") -> tuple[str, dict[str, Any]]:
    """A thread of ``user`` refunding a fresh order, waiting at the approval interrupt:
    ``(thread_id, proposal facts)``."""
    request = REFUND_REQUEST.replace("O-5512", new_order(rig))
    with client_as(rig.server, user) as client:
        thread_id = client.threads.create()["thread_id"]
        result = client.runs.wait(
            thread_id, GRAPH, input={"messages": [{"role": "user", "content": request}]}
        )
        assert result.get("status") == "awaiting_approval", result
        (interrupt,) = interrupts_of(client.threads.get_state(thread_id))
        (proposal,) = interrupt["value"]["toolgate"]["proposals"]
    assert result["bookkeeping"]["principal"]["user_id"] == user  # `gateway_state` reads it as a key
    return thread_id, proposal


def resume(rig: Rig, user: str, thread_id: str, decisions: list[dict[str, Any]]) -> dict[str, Any]:
    with client_as(rig.server, user) as client:
        result: dict[str, Any] = client.runs.wait(
            thread_id, GRAPH, command={"resume": {"decisions": decisions}}
        )
    return result


def status_code(exc: BaseException) -> int:
    assert isinstance(exc, httpx.HTTPStatusError), repr(exc)
    return exc.response.status_code


def test_a_principal_in_context_is_refused(rig: Rig) -> None:
    with client_as(rig.server, "cust-ada") as client:
        thread_id = client.threads.create()["thread_id"]
        with pytest.raises(httpx.HTTPStatusError) as refused:
            client.runs.wait(
                thread_id,
                GRAPH,
                input={"messages": [{"role": "user", "content": REFUND_REQUEST}]},
                context={"principal": {"user_id": "fiona", "tenant_id": "acme", "roles": ["finance"]}},
            )
    assert status_code(refused.value) == 403
    assert "principal_in_context" in refused.value.response.text
    assert rig.events("access.refused", "principal_in_context")


@pytest.mark.parametrize("token", [None, "tg_not-a-token", "demo-token-nobody"])
def test_requests_without_a_valid_token_are_refused(rig: Rig, token: str | None) -> None:
    with client_as(rig.server, None, token=token) as client, pytest.raises(httpx.HTTPStatusError) as refused:
        client.threads.create()
    assert status_code(refused.value) == 401
    assert ("missing_token" if token is None else "authentication_failed") in refused.value.response.text


def test_what_no_handler_allows_is_refused_by_default(rig: Rig) -> None:
    """Changing assistants (and crons, the store API, anything new) is not for clients: the
    catch-all handler refuses it ``not_allowed``."""
    with client_as(rig.server, "omar") as client, pytest.raises(httpx.HTTPStatusError) as refused:
        client.assistants.create(graph_id="toolgate", name="mine")
    assert status_code(refused.value) == 403 and "not_allowed" in refused.value.response.text


@pytest.mark.parametrize("intruder", ["cust-bob", "cust-gina"])
def test_another_user_can_neither_read_nor_run_nor_update_the_thread(rig: Rig, intruder: str) -> None:
    thread_id, proposal = start_refund(rig)
    with client_as(rig.server, intruder) as client:
        for attempt in (
            lambda: client.threads.get(thread_id),
            lambda: client.threads.get_state(thread_id),
            lambda: client.runs.wait(
                thread_id, GRAPH, input={"messages": [{"role": "user", "content": "hi"}]}
            ),
            lambda: client.runs.wait(
                thread_id, GRAPH, command={"resume": {"decisions": [{"type": "approve"}]}}
            ),
            lambda: client.threads.update_state(thread_id, values={"status": "done"}),
            lambda: list(client.runs.stream(thread_id, GRAPH, input=None, stream_mode="values")),
        ):
            with pytest.raises(httpx.HTTPStatusError) as refused:
                attempt()
            assert status_code(refused.value) in (403, 404), refused.value.response.text
        assert thread_id not in {t["thread_id"] for t in client.threads.search(limit=100)}
    with client_as(rig.server, "cust-ada") as owner:
        state = owner.threads.get_state(thread_id)
    assert state["values"]["status"] == "awaiting_approval" and list(state["next"]) == ["approval"]
    assert rig.payments(proposal["operation_key"]) == 0


def test_state_updates_are_for_operators_only(rig: Rig) -> None:
    thread_id, _ = start_refund(rig)
    with client_as(rig.server, "cust-ada") as client, pytest.raises(httpx.HTTPStatusError) as refused:
        client.threads.update_state(thread_id, values={"status": "done"})
    assert status_code(refused.value) == 403 and "state_update_refused" in refused.value.response.text


def test_the_requesters_own_approval_is_refused_and_a_reviewer_approves_once(rig: Rig) -> None:
    thread_id, proposal = start_refund(rig)
    own = resume(rig, "cust-ada", thread_id, [{"type": "approve"}])
    assert own["status"] == "awaiting_approval"
    (outcome,) = own["review"]["outcomes"]
    assert (outcome["result"], outcome["code"]) == ("refused", "self_approval"), own["review"]
    assert "cannot review their own proposal" in outcome["message"]
    assert rig.payments(proposal["operation_key"]) == 0
    with client_as(rig.server, "cust-ada") as client:
        (interrupt,) = interrupts_of(client.threads.get_state(thread_id))
    assert interrupt["value"]["toolgate"]["last_review"]["outcomes"][0]["code"] == "self_approval"

    done = resume(rig, "fiona", thread_id, [{"type": "approve"}])
    assert done["status"] == "done", done
    assert done["review"] == {
        "reviewer": "fiona",
        "outcomes": [{"proposal_id": proposal["proposal_id"], "decision": "approve", "result": "recorded"}],
    }
    assert rig.payments(proposal["operation_key"]) == 1
    op = rig.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "succeeded"
    again = resume(rig, "fiona", thread_id, [{"type": "approve"}])  # a finished thread: nothing to resume
    assert rig.payments(proposal["operation_key"]) == 1 and again.get("status") == "done"


def test_one_reviewer_twice_is_one_person_and_a_second_reviewer_completes_it(rig: Rig) -> None:
    thread_id, proposal = start_refund(rig)
    first = resume(rig, "rita", thread_id, [{"type": "approve"}])
    assert first["status"] == "awaiting_approval" and first["review"]["outcomes"][0]["result"] == "recorded"
    twice = resume(rig, "rita", thread_id, [{"type": "approve"}])
    assert twice["review"]["outcomes"][0]["code"] == "already_decided"
    op = rig.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "pending_approval" and rig.payments(proposal["operation_key"]) == 0
    done = resume(rig, "sam", thread_id, [{"type": "approve"}])
    assert done["status"] == "done" and rig.payments(proposal["operation_key"]) == 1


def test_an_edit_is_a_new_proposal_its_editor_cannot_approve(rig: Rig) -> None:
    thread_id, proposal = start_refund(rig)
    edited_args = {**proposal_args(rig, proposal), "amount_cents": 700}
    edit = resume(
        rig,
        "rita",
        thread_id,
        [{"type": "edit", "edited_action": {"name": "issue_refund", "args": edited_args}}],
    )
    (outcome,) = edit["review"]["outcomes"]
    assert outcome["result"] == "recorded" and outcome["new_proposal_id"] != proposal["proposal_id"]
    with client_as(rig.server, "cust-ada") as client:
        (interrupt,) = interrupts_of(client.threads.get_state(thread_id))
    (waiting,) = interrupt["value"]["toolgate"]["proposals"]
    assert (
        waiting["proposal_id"] == outcome["new_proposal_id"]
        and interrupt["value"]["action_requests"][0]["args"] == edited_args
    )
    # an edit is approved with the digest its reviewer saw (a bare approve: `digest_required`)
    own = resume(rig, "rita", thread_id, [{"type": "approve", "digest": waiting["digest"]}])
    assert own["review"]["outcomes"][0]["code"] == "editor_approval"
    done = resume(rig, "fiona", thread_id, [{"type": "approve", "digest": waiting["digest"]}])
    assert done["status"] == "done"
    assert rig.payments(waiting["operation_key"]) == 1 and rig.payments(proposal["operation_key"]) == 0
    result = json.loads(next(m["content"] for m in reversed(done["messages"]) if m.get("type") == "tool"))
    assert result["data"]["amount_cents"] == 700


def test_a_reviewer_may_resume_but_not_start_a_turn_in_someone_elses_thread(rig: Rig) -> None:
    thread_id, _ = start_refund(rig)
    with client_as(rig.server, "fiona") as client:
        assert (
            client.threads.get(thread_id)["thread_id"] == thread_id
        )  # reviewers read their tenant's threads
        with pytest.raises(httpx.HTTPStatusError) as refused:
            client.runs.wait(
                thread_id, GRAPH, input={"messages": [{"role": "user", "content": "refund O-5513 too"}]}
            )
    assert status_code(refused.value) in (403, 404)


def proposal_args(rig: Rig, proposal: dict[str, Any]) -> dict[str, Any]:
    stored = rig.store.proposals.get(proposal["proposal_id"])
    assert stored is not None
    return dict(stored.arguments)
