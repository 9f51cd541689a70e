"""Red team (redteam5): a caller's forwarded credentials never reach another person through the
LangGraph server's run records.

The auth handler hands the graph the caller's ``X-Toolgate-Credential-*`` values inside the
authenticated user, and the server keeps that user in each run's record
(``kwargs.config.configurable.langgraph_auth_user``), which anyone who may read the thread reads:
a finance reviewer or an operator listing the runs of a customer's thread read the customer's
CRM session in clear. They now travel sealed for the person they belong to
(`toolgate.graph.server.context.seal_forwarded`); the graph still gets them, in clear, for that person only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_support import client_as, people_server_and_store
from support import REFUND_REQUEST, Harness, in_process_auth
from test_server_auth import GRAPH, Rig, new_order

from toolgate.graph.server import auth as auth_module
from toolgate.graph.server.context import server_context
from toolgate.tools.demo.identities import demo_token

SECRET = "crm-session-of-ada-0042-do-not-share"


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    return in_process_auth(tmp_path, monkeypatch)


def authenticated(user: str, **credentials: str) -> dict[str, object]:
    """What the auth handler hands the server for ``user``'s request with those credential headers."""
    headers = {b"authorization": f"Bearer {demo_token(user)}".encode()}
    headers.update({f"x-toolgate-credential-{k}".encode(): v.encode() for k, v in credentials.items()})
    scope = {"type": "http", "client": ("127.0.0.1", 50000), "headers": list(headers.items())}
    return asyncio.run(auth_module.authenticate(scope, f"Bearer {demo_token(user)}", headers))


def test_the_graph_opens_the_callers_credentials_and_nobody_elses(harness: Harness) -> None:
    ada = authenticated("cust-ada", crm_token=SECRET)
    assert SECRET not in repr(ada)  # what the server keeps in the run's record
    gw = harness.gateway()
    assert server_context(None, ada, gw.directory, gw.store.keys).credentials == {"crm_token": SECRET}
    fiona = {**authenticated("fiona"), "credentials": ada["credentials"]}  # ada's sealed text, fiona's run
    assert server_context(None, fiona, gw.directory, gw.store.keys).credentials == {}
    assert server_context(None, authenticated("fiona"), gw.directory, gw.store.keys).credentials == {}


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with people_server_and_store(tmp_path_factory.mktemp("lgdev-forwarded")) as (server, store):
        yield Rig(server, store)


@pytest.mark.server
@pytest.mark.slow
def test_a_reviewer_or_operator_reading_the_runs_of_a_thread_never_reads_the_owners_credentials(
    rig: Rig,
) -> None:
    request = REFUND_REQUEST.replace("O-5512", new_order(rig))
    with client_as(rig.server, "cust-ada", **{"X-Toolgate-Credential-Crm-Token": SECRET}) as owner:
        thread_id = owner.threads.create()["thread_id"]
        waiting = owner.runs.wait(thread_id, GRAPH, input={"messages": [{"role": "user", "content": request}]})
        assert waiting.get("status") == "awaiting_approval", waiting
    for reader in ("fiona", "omar", "cust-ada"):
        headers = {"Authorization": f"Bearer {demo_token(reader)}"}
        with httpx.Client(base_url=rig.server.url, headers=headers, timeout=60.0) as http:
            runs = http.get(f"/threads/{thread_id}/runs")
            assert runs.status_code == 200 and runs.json(), runs.text[:300]
            answers = {
                "runs": runs.text,
                "run": http.get(f"/threads/{thread_id}/runs/{runs.json()[0]['run_id']}").text,
                "thread": http.get(f"/threads/{thread_id}").text,
                "state": http.get(f"/threads/{thread_id}/state").text,
                "history": http.post(f"/threads/{thread_id}/history", json={"limit": 100}).text,
            }
        leaked = [what for what, text in answers.items() if SECRET in text]
        assert leaked == [], f"{reader} read the owner's credential in {leaked}"
