"""Red team (redteam5): a thread's owner and state through the REAL ``langgraph dev`` server's
thread doors that the read and run checks do not cover.

* Creating a thread with another person's thread id and ``if_exists: "do_nothing"`` answered
  with that thread as it stands: its metadata and its whole state (the conversation, the order,
  the proposed refund), to anyone who knew the id, of any tenant. The create handler now hands
  the runtime the caller's own filter, so an existing thread of someone else is a 409 and
  nothing of it is answered.
* An operator may repair a thread's state, which carries no authority (the graph seals it); a
  thread's ``owner`` and ``tenant`` metadata are authority (the server's read and run checks are
  filters on them). An operator rewriting them handed one customer's thread to another (who then
  read it) or took it to delete it. Refused ``thread_owner_refused``, audited, nothing changed.
* A reviewer may resume a thread of their tenant, nothing more. A resume that names an earlier
  checkpoint (``checkpoint_id``) forks the thread there and runs it again from that step: the
  owner's turn, its model request and its reads, started by the reviewer. It is the owner's
  alone now, like a resume with a ``goto`` (someone else's thread is not found).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from server_support import client_as, people_server_and_store
from test_server_auth import BOB, GRAPH, Rig, start_refund, status_code

from toolgate.policy.identities import IdentityDirectory
from toolgate.store.audit import actor_hash

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with people_server_and_store(tmp_path_factory.mktemp("lgdev-threads")) as (server, store):
        IdentityDirectory(store).add(BOB, by=None, token="demo-token-cust-bob")
        yield Rig(server, store)


def post_as(rig: Rig, user: str, method: str, path: str, body: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer demo-token-{user}"}
    with httpx.Client(base_url=rig.server.url, headers=headers, timeout=60.0) as client:
        return client.request(method, path, json=body)


def owner_view(rig: Rig, thread_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The thread's metadata and state as its owner reads them."""
    with client_as(rig.server, "cust-ada") as owner:
        return owner.threads.get(thread_id)["metadata"], owner.threads.get_state(thread_id)


@pytest.mark.parametrize("intruder", ["cust-bob", "cust-gina", "fiona"])
def test_creating_a_thread_under_someone_elses_id_answers_nothing_of_it(rig: Rig, intruder: str) -> None:
    thread_id, proposal = start_refund(rig)
    stored = rig.store.proposals.get(proposal["proposal_id"])
    assert stored is not None
    order = str(stored.arguments["order_id"])
    answer = post_as(rig, intruder, "POST", "/threads", {"thread_id": thread_id, "if_exists": "do_nothing"})
    assert answer.status_code == 409, answer.text[:300]
    assert "blender" not in answer.text and "cust-ada" not in answer.text
    assert order not in answer.text and proposal["operation_key"] not in answer.text
    metadata, state = owner_view(rig, thread_id)
    assert (metadata["owner"], metadata["tenant"]) == ("cust-ada", "acme")
    assert state["values"]["status"] == "awaiting_approval" and list(state["next"]) == ["approval"]


def test_the_owner_still_creates_and_finds_their_own_thread_idempotently(rig: Rig) -> None:
    thread_id, _ = start_refund(rig)
    again = post_as(rig, "cust-ada", "POST", "/threads", {"thread_id": thread_id, "if_exists": "do_nothing"})
    assert again.status_code == 200 and again.json()["thread_id"] == thread_id


@pytest.mark.parametrize(
    "metadata",
    [{"owner": "cust-bob"}, {"tenant": "globex"}, {"owner": "omar", "note": "mine now"}],
    ids=["to-another-customer", "to-another-tenant", "to-the-operator"],
)
def test_an_operator_cannot_hand_a_thread_to_someone_else(rig: Rig, metadata: dict[str, str]) -> None:
    thread_id, proposal = start_refund(rig)
    refused_before = len(rig.events("access.refused", "thread_owner_refused"))
    changed = post_as(rig, "omar", "PATCH", f"/threads/{thread_id}", {"metadata": metadata})
    assert changed.status_code == 403 and "thread_owner_refused" in changed.text, changed.text[:300]
    assert len(rig.events("access.refused", "thread_owner_refused")) == refused_before + 1
    owner, _ = owner_view(rig, thread_id)
    assert (owner["owner"], owner["tenant"]) == ("cust-ada", "acme") and "note" not in owner
    with client_as(rig.server, "cust-bob") as bob, pytest.raises(httpx.HTTPStatusError) as unseen:
        bob.threads.get_state(thread_id)
    assert status_code(unseen.value) == 404
    pruned = post_as(rig, "omar", "POST", "/threads/prune", {"thread_ids": [thread_id]})
    assert pruned.status_code == 404  # only the owner deletes
    assert rig.payments(proposal["operation_key"]) == 0


def test_an_operator_still_writes_other_metadata(rig: Rig) -> None:
    thread_id, _ = start_refund(rig)
    noted = post_as(rig, "omar", "PATCH", f"/threads/{thread_id}", {"metadata": {"repair_note": "checked"}})
    assert noted.status_code == 200, noted.text[:300]
    metadata, _ = owner_view(rig, thread_id)
    assert metadata["repair_note"] == "checked" and metadata["owner"] == "cust-ada"


def model_turns(rig: Rig, thread_id: str) -> int:
    return len([e for e in rig.store.audit.events() if e.event == "model.response" and e.thread_id == thread_id])


def test_a_reviewers_resume_at_an_earlier_checkpoint_is_only_the_owners(rig: Rig) -> None:
    thread_id, proposal = start_refund(rig)
    with client_as(rig.server, "cust-ada") as owner:
        history = owner.threads.get_history(thread_id, limit=100)
    first = history[-1]["checkpoint"]["checkpoint_id"]  # before the owner's first turn
    turns = model_turns(rig, thread_id)
    _, before = owner_view(rig, thread_id)
    for fork in ({"checkpoint_id": first}, {"checkpoint": {"checkpoint_id": first, "checkpoint_ns": ""}}):
        body = {"assistant_id": GRAPH, "command": {"resume": {"wake": True}}, **fork}
        forked = post_as(rig, "fiona", "POST", f"/threads/{thread_id}/runs/wait", body)
        assert forked.status_code in (403, 404), (fork, forked.status_code, forked.text[:300])
    assert model_turns(rig, thread_id) == turns  # no model request started by the reviewer
    _, after = owner_view(rig, thread_id)
    assert after["checkpoint"] == before["checkpoint"] and list(after["next"]) == ["approval"]
    assert json.dumps(after["values"], sort_keys=True) == json.dumps(before["values"], sort_keys=True)
    assert rig.payments(proposal["operation_key"]) == 0


def test_a_head_checkpoint_that_cannot_be_read_is_never_taken_for_the_head(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reviewer's resume naming a checkpoint whose head the loopback could not read (the
    transport failed, not an HTTP status) surfaced as a 500; it is not shown to be the head, so
    the run is the owner's only (404 to the reviewer)."""
    import asyncio

    import httpx

    from toolgate.graph.server import auth as server_auth

    class Down:
        class threads:
            @staticmethod
            async def get_state(thread_id: str) -> Any:
                raise httpx.ConnectError("loopback down")

    monkeypatch.setattr(server_auth, "langgraph_client", lambda: Down)
    assert asyncio.run(server_auth.at_latest_checkpoint("t-1", {"checkpoint_id": "c-1"})) is False
    assert asyncio.run(server_auth.at_latest_checkpoint("t-1", {})) is True  # names none: the head


def refusals_of(rig: Rig, user: str, path: str, since: int = 0) -> list[Any]:
    """``access.refused`` events of ``user`` for a request to ``path``, after the first ``since``
    events of the trail (the module's server is shared)."""
    actor = actor_hash(rig.store.keys.key("actor"), user)
    return [
        e
        for e in rig.store.audit.events()[since:]
        if e.event == "access.refused" and e.actor_id == actor and e.detail.get("path") == path
    ]


@pytest.mark.parametrize("intruder", ["cust-bob", "cust-gina"])
def test_what_the_runtimes_filters_refuse_is_audited(rig: Rig, intruder: str) -> None:
    """The auth handler hands the runtime a filter; the runtime answers a thread it does not reach
    with 404 and a create naming it with 409. Both are refusals toolgate's own code never saw:
    each is on the audit trail now (`toolgate.graph.server.runtime_refusals`), with the caller."""
    thread_id, _ = start_refund(rig)
    path, since = f"/threads/{thread_id}", len(rig.store.audit.events())
    read = post_as(rig, intruder, "GET", path, None)
    assert read.status_code == 404, read.text[:300]
    (hidden,) = refusals_of(rig, intruder, path)
    assert (hidden.code, hidden.result, hidden.detail["method"], hidden.detail["status"]) == (
        "not_found_or_hidden",
        "refused",
        "GET",
        404,
    )
    state = post_as(rig, intruder, "GET", f"{path}/state", None)
    assert state.status_code == 404 and refusals_of(rig, intruder, f"{path}/state")
    created = post_as(rig, intruder, "POST", "/threads", {"thread_id": thread_id, "if_exists": "do_nothing"})
    assert created.status_code == 409
    (conflict,) = refusals_of(rig, intruder, "/threads", since)
    assert conflict.code == "conflict"
    # the owner's own reads are answered and audit nothing
    assert post_as(rig, "cust-ada", "GET", path, None).status_code == 200
    assert not refusals_of(rig, "cust-ada", path)


def test_a_body_the_runtime_cannot_read_is_audited_and_sign_in_refusals_once(rig: Rig) -> None:
    """A 422 from the runtime is audited ``invalid_request``; a 403 of the auth handler stays one
    event (its own ``not_allowed``), never a second one from the middleware."""
    since = len(rig.store.audit.events())
    unreadable = post_as(rig, "cust-bob", "POST", "/threads/search", {"limit": "many"})
    assert unreadable.status_code == 422, unreadable.text[:300]
    (event,) = refusals_of(rig, "cust-bob", "/threads/search", since)
    assert event.code == "invalid_request"
    refused = post_as(rig, "cust-bob", "POST", "/assistants", {"graph_id": GRAPH})
    assert refused.status_code == 403
    assert not refusals_of(rig, "cust-bob", "/assistants", since)  # the handler's event carries no path
    new = rig.store.audit.events()[since:]
    assert [e.code for e in new if e.event == "access.refused" and e.code == "not_allowed"] == ["not_allowed"]
