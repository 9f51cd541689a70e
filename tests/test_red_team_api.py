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
from toolgate.graph.server.serving import MAX_BODY_BYTES
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


def test_a_bad_page_or_a_forged_cursor_from_a_signed_in_reviewer_is_audited(rig: Api) -> None:
    """A listing refused ``invalid_page`` (a limit out of range, a cursor the store never handed
    out) is audited as ``api.refused`` like a bad status, where it answered 422 with nothing in
    the log: a caller probing the cursor's form left no trace."""
    _, facts = rig.pending("t-bad-page")
    for query in ("limit=0", "limit=x", "after=not-a-position"):
        listing = rig.get(f"/toolgate/proposals?{query}", "fiona")
        assert listing.status_code == 422 and listing.json()["error"] == "invalid_page", query
    refused = [e for e in rig.store.audit.events() if e.event == "api.refused"]
    assert [e.code for e in refused] == ["invalid_page"] * 3
    assert {e.actor_id for e in refused} == {rig.gw.auditor.actor("fiona")}
    assert rig.unchanged(facts)


def test_an_oversized_body_is_refused_after_sign_in_and_audited(rig: Api) -> None:
    """A body past ``MAX_BODY_BYTES`` is judged once the caller is known: without a token it is
    the ``401`` every unauthenticated request gets, from a signed-in reviewer ``413
    body_too_large`` audited as ``api.refused`` with its caller, where both answered 413 before
    anyone was authenticated and nothing reached the log."""
    _, facts = rig.pending("t-too-large")
    huge = json.dumps({"digest": "x" * (MAX_BODY_BYTES + 1)})
    anonymous = rig.client.post(proposal_url(facts, "approve"), content=huge)
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "missing_token"
    signed_in = rig.client.post(proposal_url(facts, "approve"), content=huge, headers=auth("fiona"))
    assert signed_in.status_code == 413 and signed_in.json()["error"] == "body_too_large"
    refused = [e for e in rig.store.audit.events() if e.event == "api.refused"]
    assert [(e.code, e.actor_id) for e in refused] == [("body_too_large", rig.gw.auditor.actor("fiona"))]
    assert refused[0].detail["status"] == 413
    assert rig.unchanged(facts)


@pytest.mark.parametrize("route", ["approve", "reject", "edit"])
def test_a_body_nested_9000_deep_is_invalid_json_audited_never_a_500(rig: Api, route: str) -> None:
    """Python's JSON parser recurses per level: 9,000 brackets raised RecursionError (a 500,
    unaudited). The nesting is measured before parsing, so it is the door's own refusal."""
    _, facts = rig.pending(f"t-deep-{route}")
    deep = '{"digest": ' + "[" * 9000 + "]" * 9000 + "}"
    response = rig.client.post(proposal_url(facts, route), content=deep, headers=auth("fiona"))
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "invalid_json" and "nested deeper" in response.json()["message"]
    refused = [e.code for e in rig.store.audit.events() if e.event == "api.refused"]
    assert refused == ["invalid_json"]
    assert rig.unchanged(facts)
