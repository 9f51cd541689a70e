"""Red team, the approval API: bad input from a signed-in caller is refused with a stable code,
changes nothing, and is audited as ``api.refused`` with that code (who sent what kind of bad
request), like every other refusal of this door."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient
from support import Harness
from test_http_api import Api, auth, proposal_url

import toolgate.graph.server.http as http
from toolgate.store import Store


@pytest.fixture
def rig(store: Store) -> Api:
    harness = Harness(store)
    gw = harness.gateway()
    return Api(harness, gw, TestClient(http.create_app(lambda: gw, waker_interval_s=None)))


def test_a_malformed_body_from_a_signed_in_reviewer_is_audited(rig: Api) -> None:
    _, facts = rig.pending("t-bad-audited")
    for content, code in (("{", "invalid_json"), (json.dumps({"digest": 5}), "invalid_body")):
        response = rig.client.post(proposal_url(facts, "approve"), content=content, headers=auth("fiona"))
        assert response.status_code == 422 and response.json()["error"] == code
    listing = rig.get("/toolgate/proposals?status=bogus", "fiona")
    assert listing.status_code == 422
    refused = [e for e in rig.store.audit.events() if e.event == "api.refused"]
    assert [e.code for e in refused] == ["invalid_json", "invalid_body", "invalid_status"]
    assert {e.actor_id for e in refused} == {rig.gw.auditor.actor("fiona")}
    assert rig.unchanged(facts)
