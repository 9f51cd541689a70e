"""The approval API decides a canary's proposal under the rules of the release that made it.

The server's own gateway is the control's; a proposal pinned to the candidate is decided by the
candidate's gateway while release control serves it (the store's records say so), exactly as the
CLI's ``approve`` does. Without that, or with a bad token, nothing is decided.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from release_control_support import CANDIDATE, RESTART, TwoReleases, run
from starlette.testclient import TestClient
from test_release_control_routing import admin

from toolgate.graph.server import http
from toolgate.store.base import Store
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.demo.identities import demo_token


def _pending_candidate_proposal(store: Store, tmp_path: Path) -> tuple[TwoReleases, dict[str, Any]]:
    candidate = ScriptedChatModel(responses=[ai("", tool_call("restart_service", RESTART))])
    two = TwoReleases(store, tmp_path, models={CANDIDATE: candidate})
    control = two.control()
    control.shadow(admin(two), CANDIDATE)
    control.canary(admin(two), CANDIDATE, 100)
    waiting = run(two.graph(), "restart web", "sam", "t-http-canary")
    [proposal] = waiting["__interrupt__"][0].value["toolgate"]["proposals"]
    assert proposal["release"] == CANDIDATE
    return two, proposal


def _approve(client: TestClient, proposal: dict[str, Any], token: str) -> Any:
    return client.post(
        f"/toolgate/proposals/{proposal['proposal_id']}/approve",
        headers={"Authorization": f"Bearer {token}"},
        json={"digest": proposal["digest"]},
    )


def test_a_canary_proposal_is_approved_under_its_own_release(store: Store, tmp_path: Path) -> None:
    two, proposal = _pending_candidate_proposal(store, tmp_path)
    app = http.create_app(
        lambda: two(two.router.configured), reviewing=two.router.reviewing_gateway, waker_interval_s=None
    )
    with TestClient(app) as client:
        assert _approve(client, proposal, "not-a-token").status_code == 401
        own = _approve(client, proposal, demo_token("sam"))  # the requester
        assert own.status_code == 409 and own.json()["error"] == "self_approval"
        other_role = _approve(client, proposal, demo_token("fiona"))  # finance, not an operator
        assert other_role.status_code == 404  # not a reviewer of it: not even shown
        op = store.operations.get(proposal["operation_key"])
        assert op is not None and op.status == "pending_approval"
        approved = _approve(client, proposal, demo_token("omar"))
    assert approved.status_code == 200, approved.json()
    assert approved.json()["status"] == "approved" and approved.json()["approvers"] == ["omar"]
    assert two.handler_calls(CANDIDATE) == 0  # approval decides; execution is the graph's


def test_without_release_control_the_server_refuses_another_releases_proposal(
    store: Store, tmp_path: Path
) -> None:
    two, proposal = _pending_candidate_proposal(store, tmp_path)
    app = http.create_app(
        lambda: two(two.router.configured), reviewing=lambda release_id: None, waker_interval_s=None
    )
    with TestClient(app) as client:
        refused = _approve(client, proposal, demo_token("omar"))
    assert refused.status_code == 409 and refused.json()["error"] == "wrong_release"
    op = store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "pending_approval"
    assert store.approvals.for_proposal(proposal["proposal_id"]) == []
