"""The approval API and reviewer console (`toolgate.graph.server.http`), in process, on both stores.

Proposals are made by the real graph (scripted model); the API runs over the same store through
Starlette's test client. Every refusal is checked for "nothing changed": the operation is still
``pending_approval`` and no decision was recorded.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from starlette.testclient import TestClient
from support import REFUND_REQUEST, Harness, principal, start, tool_messages

import toolgate.graph.server.http as http
import toolgate.graph.worker.waker as waker
from toolgate.errors import ConfigurationError
from toolgate.graph import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.review.decisions import decide
from toolgate.graph.server.serving import MAX_BODY_BYTES
from toolgate.store import Store
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools.demo import WIDE_RELEASE, DemoServices, DemoSystem, build_wide_registry
from toolgate.tools.demo.identities import demo_token
from toolgate.tools.demo.release import DEMO_RELEASES

REFUND = {"order_id": "O-5512", "amount_cents": 1000, "reason": "damaged"}


@dataclass
class Api:
    """A harness, its gateway and the API over it, with the wake function recorded."""

    harness: Harness
    gw: Gateway
    client: TestClient
    woken: list[str] = field(default_factory=list)

    @property
    def store(self) -> Store:
        return self.harness.store

    def get(self, path: str, user: str | None = None, **kw: Any) -> Any:
        return self.client.get(path, headers=auth(user), **kw)

    def post(self, path: str, user: str | None, body: Any = None, **kw: Any) -> Any:
        return self.client.post(path, headers=auth(user), json=body, **kw)

    def pending(self, thread: str, **arguments: Any) -> tuple[Any, dict[str, Any]]:
        """A refund proposal by cust-ada on ``thread``: the graph and the interrupt's facts."""
        model = ScriptedChatModel(
            responses=[ai("", tool_call("issue_refund", {**REFUND, **arguments}, "c1")), ai("done")]
        )
        graph = self.harness.graph(model)
        state = start(graph, REFUND_REQUEST, "cust-ada", thread)
        return graph, state["__interrupt__"][0].value["toolgate"]["proposals"][0]

    def status(self, facts: dict[str, Any]) -> str:
        operation = self.store.operations.get(facts["operation_key"])
        assert operation is not None
        return operation.status

    def unchanged(self, facts: dict[str, Any]) -> bool:
        """Still pending, no decision recorded, no thread woken."""
        return (
            self.status(facts) == "pending_approval"
            and self.store.approvals.for_proposal(facts["proposal_id"]) == []
            and self.woken == []
        )

    def audited(self, event: str, code: str | None = None) -> int:
        return sum(1 for e in self.store.audit.events() if e.event == event and code in (None, e.code))


def auth(user: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {demo_token(user)}"} if user else {}


@pytest.fixture
def api(store: Store, monkeypatch: pytest.MonkeyPatch) -> Api:
    harness = Harness(store)
    gw = harness.gateway()
    made = Api(harness, gw, TestClient(http.create_app(lambda: gw, waker_interval_s=None)))

    async def wake(thread_id: str) -> bool:
        made.woken.append(thread_id)
        return True

    monkeypatch.setattr(waker, "wake_thread", wake)
    return made


def proposal_url(facts: dict[str, Any], action: str = "") -> str:
    return f"/toolgate/proposals/{facts['proposal_id']}" + (f"/{action}" if action else "")


def test_no_wrong_or_revoked_token_gets_401_and_changes_nothing(api: Api) -> None:
    _, facts = api.pending("t-auth")
    approve = proposal_url(facts, "approve")
    body = {"digest": facts["digest"]}
    missing = api.post(approve, None, body)
    assert missing.status_code == 401 and missing.json()["error"] == "missing_token"
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = api.client.post(approve, json=body, headers={"Authorization": "Bearer demo-token-nobody"})
    assert wrong.status_code == 401 and wrong.json()["error"] == "authentication_failed"
    basic = api.client.post(approve, json=body, headers={"Authorization": f"Basic {demo_token('fiona')}"})
    assert basic.status_code == 401 and basic.json()["error"] == "missing_token"
    api.gw.directory.revoke("fiona", by=None)
    revoked = api.post(approve, "fiona", body)
    assert revoked.status_code == 401 and revoked.json()["error"] == "revoked"
    assert api.get("/toolgate/me").status_code == 401
    assert api.get("/toolgate/proposals", "fiona").status_code == 401
    for response in (missing, wrong, basic, revoked):
        assert set(response.json()) == {"error", "message"} and "Traceback" not in response.text
    assert api.unchanged(facts)
    assert api.audited("identity.refused") >= 5


def test_me_names_the_caller(api: Api) -> None:
    me = api.get("/toolgate/me", "fiona")
    assert me.status_code == 200 and me.headers["cache-control"] == "no-store"
    assert me.json() == {
        "user_id": "fiona",
        "tenant": "acme",
        "roles": ["finance"],
        "display_name": "Fiona (finance)",
    }


def test_another_tenants_reviewer_sees_nothing_and_every_probe_is_audited(api: Api) -> None:
    _, facts = api.pending("t-tenant")
    assert [p["proposal_id"] for p in api.get("/toolgate/proposals", "fiona").json()["proposals"]] == [
        facts["proposal_id"]
    ]
    assert api.get("/toolgate/proposals", "gina").json() == {"proposals": []}
    assert api.get("/toolgate/proposals?status=all", "gina").json() == {"proposals": []}
    foreign = api.get(proposal_url(facts), "gina")
    unknown = api.get("/toolgate/proposals/prop_does_not_exist", "gina")
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.json() == unknown.json() == {"error": "not_found", "message": "no such proposal"}
    assert api.post(proposal_url(facts, "approve"), "gina", {"digest": facts["digest"]}).status_code == 404
    assert api.post(proposal_url(facts, "reject"), "gina", {"reason": "mine now"}).status_code == 404
    assert api.post(proposal_url(facts, "edit"), "gina", {"arguments": REFUND}).status_code == 404
    operation = f"/toolgate/operations/{facts['operation_key']}"
    assert api.get(operation, "gina").json() == api.get("/toolgate/operations/op_nope", "gina").json()
    assert api.get(operation + "/trace", "gina").status_code == 404
    assert api.unchanged(facts)
    refused = [e for e in api.store.audit.events() if e.event == "api.refused"]
    assert [e.code for e in refused].count("not_visible") == 6 and [e.code for e in refused].count(
        "not_found"
    ) == 2
    assert all(e.actor_id == api.gw.auditor.actor("gina") for e in refused)
    assert {e.proposal_id for e in refused if e.code == "not_visible" and e.proposal_id} == {
        facts["proposal_id"]
    }


def test_the_requester_sees_their_proposal_but_cannot_approve_it(api: Api) -> None:
    _, facts = api.pending("t-self")
    assert [p["proposal_id"] for p in api.get("/toolgate/proposals", "cust-ada").json()["proposals"]] == [
        facts["proposal_id"]
    ]
    refused = api.post(proposal_url(facts, "approve"), "cust-ada", {"digest": facts["digest"]})
    assert refused.status_code == 409
    assert refused.json()["error"] == "self_approval" and refused.json()["status_now"] == "pending_approval"
    assert api.unchanged(facts) and api.audited("approval.refused", "self_approval") == 1
    operator = api.get("/toolgate/proposals", "omar").json()  # same tenant, not an approver of refunds
    assert operator == {"proposals": []} and api.get(proposal_url(facts), "omar").status_code == 404


def test_a_finance_reviewer_approves_the_digest_shown_and_the_thread_is_woken(api: Api) -> None:
    graph, facts = api.pending("t-approve")
    shown = api.get(proposal_url(facts), "fiona").json()
    assert shown["arguments"] == REFUND and shown["digest"] == facts["digest"]
    assert shown["handler_revision"] == facts["handler_revision"] and shown["release"] == facts["release"]
    assert shown["review_details"] == {  # the payment system's record of the order, as acme sees it
        "order_id": "O-5512",
        "item": "Blender B-200",
        "currency": "USD",
        "order_amount_cents": 4999,
        "already_refunded_cents": 0,
        "remaining_cents": 4999,
        "this_refund_cents": 1000,
        "remaining_after_cents": 3999,
    }
    assert shown["review_details_error"] is None and shown["warnings"] == [] and shown["related"] == []
    assert 0 < shown["seconds_left"] <= 3600 and shown["status"] == "pending_approval"
    assert shown["decisions"] == [] and shown["requester"] == "cust-ada"
    stored = api.store.proposals.get(facts["proposal_id"])
    for key in ("arguments_sha256", "tool_version", "risk", "effect", "rollback", "approval_class"):
        assert shown[key] == getattr(stored, key)
    assert shown["timeout_s"] == 15  # issue_refund's hard timeout, from the release that proposed it

    stale = api.post(proposal_url(facts, "approve"), "fiona", {"digest": "0" * 64})
    assert stale.status_code == 409 and stale.json()["error"] == "digest_mismatch"
    assert api.unchanged(facts)

    approved = api.post(proposal_url(facts, "approve"), "fiona", {"digest": shown["digest"]})
    assert approved.status_code == 200
    assert approved.json()["status"] == "approved" and approved.json()["approvers"] == ["fiona"]
    assert approved.json()["woken"] is True and api.woken == ["t-approve"]
    again = api.post(proposal_url(facts, "approve"), "fiona", {"digest": shown["digest"]})
    assert again.status_code == 409 and again.json()["error"] == "not_pending"
    assert again.json()["status_now"] == "approved"

    decisions = api.get(proposal_url(facts), "fiona").json()["decisions"]
    assert [(d["reviewer"], d["decision"], d["authentic"]) for d in decisions] == [("fiona", "approve", True)]

    graph.invoke(
        Command(resume={"wake": True}), {"configurable": {"thread_id": "t-approve"}}, context=Context()
    )
    operation = api.get(f"/toolgate/operations/{facts['operation_key']}", "fiona").json()
    assert operation["status"] == "succeeded" and operation["result"]["amount_cents"] == 1000
    assert api.harness.refunds() == 1
    # the reviewer follows the operation but reads no audit events: one role rule at every door
    trace_url = f"/toolgate/operations/{facts['operation_key']}/trace"
    reads_before = len([e for e in api.store.audit.events() if e.event == "audit.read"])
    refused = api.get(trace_url, "fiona")
    assert refused.status_code == 403 and refused.json()["error"] == "not_auditor", refused.json()
    read = api.harness.store.audit.latest("audit.read")
    assert read is not None and (read.result, read.code) == ("refused", "not_auditor")
    assert read.actor_id == api.gw.auditor.actor("fiona") and read.detail["subject"] == facts["operation_key"]
    assert api.get(trace_url, "glen").status_code == 404  # another tenant's auditor: as an unknown id
    assert api.get(trace_url, "otto").json()["final"] == "succeeded"  # the all-tenant auditor
    report = api.get(trace_url, "audrey").json()
    assert len([e for e in api.store.audit.events() if e.event == "audit.read"]) == reads_before + 3
    events = [e["event"] for e in report["events"]]
    assert report["final"] == "succeeded" and report["missing"] == [] and report["tamper_check"] == "PASS"
    assert (
        events.index("approval.recorded")
        < events.index("proposal.approved")
        < events.index("operation.completed")
    )
    recorded = next(e for e in report["events"] if e["event"] == "approval.recorded")
    assert recorded["actor"] == api.gw.auditor.actor("fiona") and recorded["release"] == facts["release"]
    read = api.harness.store.audit.latest("audit.read")  # the trace read is itself audited
    assert read is not None and read.actor_id == api.gw.auditor.actor("audrey") and read.tenant_id == "acme"
    assert read.detail["subject"] == facts["operation_key"] and read.result == "read"
    assert api.get(f"/toolgate/operations/{facts['operation_key']}", "gina").status_code == 404


def test_a_second_approval_by_the_same_person_is_already_decided(api: Api) -> None:
    _, facts = api.pending("t-twice")
    first = api.post(proposal_url(facts, "approve"), "rita", {"digest": facts["digest"]})
    assert first.status_code == 200 and first.json()["status"] == "pending_approval"
    assert first.json()["still_needed"] == "1 more approval(s) needed" and api.woken == []
    second = api.post(proposal_url(facts, "approve"), "rita", {"digest": facts["digest"]})
    assert second.status_code == 409 and second.json()["error"] == "already_decided"
    assert (
        api.status(facts) == "pending_approval"
        and len(api.store.approvals.for_proposal(facts["proposal_id"])) == 1
    )
    other = api.post(proposal_url(facts, "approve"), "sam", {"digest": facts["digest"]})
    assert other.json()["status"] == "approved" and other.json()["approvers"] == ["rita", "sam"]
    assert api.woken == ["t-twice"]


def test_a_rejection_needs_a_reason(api: Api) -> None:
    _, facts = api.pending("t-reject")
    for body in ({}, {"reason": "   "}):
        refused = api.post(proposal_url(facts, "reject"), "fiona", body)
        assert refused.status_code == 422 and refused.json()["error"] == "reason_required"
    assert api.unchanged(facts) and api.audited("approval.refused", "reason_required") == 2
    rejected = api.post(proposal_url(facts, "reject"), "fiona", {"reason": "duplicate request"})
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert api.woken == ["t-reject"]
    decision = api.get(proposal_url(facts), "fiona").json()["decisions"][0]
    assert decision["decision"] == "reject" and decision["reason"] == "duplicate request"


def test_bad_bodies_are_refused_with_422_before_anything_changes(api: Api) -> None:
    _, facts = api.pending("t-bodies")
    url = proposal_url(facts, "approve")
    headers = auth("fiona")
    raw = {
        "not json": 'digest="x"',
        "not an object": json.dumps([facts["digest"]]),
        "wrong type": json.dumps({"digest": 5}),
        "unknown field": json.dumps({"digest": facts["digest"], "reviewer": "fiona"}),
        "missing digest": "{}",
        "empty digest": json.dumps({"digest": " "}),
        "duplicate keys": f'{{"digest": "{"0" * 64}", "digest": "{facts["digest"]}"}}',
        "not a number": '{"digest": NaN}',
        "empty": "",
    }
    for why, content in raw.items():
        response = api.client.post(url, content=content, headers=headers)
        assert response.status_code == 422, why
        assert response.json()["error"] in ("invalid_json", "invalid_body"), why
    huge = api.client.post(url, content=b" " * (MAX_BODY_BYTES + 1), headers=headers)
    assert huge.status_code == 413 and huge.json()["error"] == "body_too_large"
    edit = api.post(proposal_url(facts, "edit"), "fiona", {"arguments": "amount 700"})
    assert edit.status_code == 422 and edit.json()["message"] == "arguments must be an object"
    listing = api.get("/toolgate/proposals?status=bogus", "fiona")
    assert listing.status_code == 422 and listing.json()["error"] == "invalid_status"
    assert api.unchanged(facts)


def test_the_listing_pages_by_a_cursor_and_refuses_a_bad_limit_or_cursor(api: Api) -> None:
    _, first = api.pending("t-page-1")
    _, second = api.pending("t-page-2")
    page = api.get("/toolgate/proposals?limit=1", "fiona").json()
    assert [p["proposal_id"] for p in page["proposals"]] == [first["proposal_id"]]
    assert page["next_after"]
    rest = api.get(f"/toolgate/proposals?limit=1&after={page['next_after']}", "fiona").json()
    assert set(rest) == {"proposals"}  # no next_after: the last page
    assert [p["proposal_id"] for p in rest["proposals"]] == [second["proposal_id"]]
    both = api.get("/toolgate/proposals", "fiona").json()
    assert [p["proposal_id"] for p in both["proposals"]] == [first["proposal_id"], second["proposal_id"]]
    for query in ("limit=0", "limit=501", "limit=x", "limit=-1", "after=not-a-position"):
        refused = api.get(f"/toolgate/proposals?{query}", "fiona")
        assert refused.status_code == 422 and refused.json()["error"] == "invalid_page", query
    assert api.unchanged(first) and api.unchanged(second)


def test_an_edit_is_a_new_pending_proposal_that_its_editor_cannot_approve(api: Api) -> None:
    _, facts = api.pending("t-edit")
    switched = api.post(
        proposal_url(facts, "edit"),
        "fiona",
        {"tool": "restart_service", "arguments": {"service_alias": "web", "reason": "because"}},
    )
    assert switched.status_code == 409 and switched.json()["error"] == "tool_switch"
    by_requester = api.post(
        proposal_url(facts, "edit"), "cust-ada", {"arguments": {**REFUND, "amount_cents": 9}}
    )
    assert by_requester.status_code == 403 and by_requester.json()["error"] == "missing_role"
    assert api.audited("api.refused", "missing_role") == 1
    too_much = api.post(proposal_url(facts, "edit"), "fiona", {"arguments": {**REFUND, "amount_cents": 5000}})
    assert too_much.status_code == 422 and too_much.json()["error"] == "semantic_invalid"
    assert api.unchanged(facts)

    edited = api.post(proposal_url(facts, "edit"), "fiona", {"arguments": {**REFUND, "amount_cents": 700}})
    assert edited.status_code == 201 and edited.json()["status"] == "pending_approval"
    new = edited.json()
    assert new["supersedes"] == facts["proposal_id"] and api.woken == ["t-edit"]
    original = api.get(proposal_url(facts), "fiona").json()
    assert original["status"] == "rejected" and original["superseded_by"] == new["proposal_id"]
    shown = api.get(f"/toolgate/proposals/{new['proposal_id']}", "fiona").json()
    assert shown["arguments"]["amount_cents"] == 700 and shown["editors"] == ["fiona"]
    assert shown["supersedes"] == facts["proposal_id"] and shown["digest"] == new["digest"]

    by_editor = api.post(
        f"/toolgate/proposals/{new['proposal_id']}/approve", "fiona", {"digest": new["digest"]}
    )
    assert by_editor.status_code == 409 and by_editor.json()["error"] == "editor_approval"
    stale = api.post(f"/toolgate/proposals/{new['proposal_id']}/approve", "rita", {"digest": facts["digest"]})
    assert stale.status_code == 409 and stale.json()["error"] == "digest_mismatch"
    assert api.store.approvals.for_proposal(new["proposal_id"]) == []
    assert api.post(proposal_url(facts, "approve"), "rita", {"digest": facts["digest"]}).json()["error"] == (
        "not_pending"
    )


def test_review_details_show_what_a_preview_token_will_create(store: Store, monkeypatch: Any) -> None:
    Harness(store)  # schema, demo people and the systems of record
    registry = build_wide_registry(DemoSystem(store), DemoServices.on(store, secret=b"test-secret"))
    policy = DEMO_RELEASES[WIDE_RELEASE].policy

    def graph(*responses: Any) -> Any:
        model = ScriptedChatModel(responses=list(responses))
        return open_test_app(
            model=model, tools=registry, policy=policy, store=store, start=False, checkpointer=InMemorySaver()
        ).compiled()

    order = {
        "vendor_id": "V-100",
        "currency": "USD",
        "line_items": [{"sku": "SKU-7", "quantity": 3, "unit_price_cents": 139900}],
    }
    previewed = graph(ai("", tool_call("preview_purchase_order", order, "p1")), ai("here")).invoke(
        {"messages": [("user", "3 laptops from V-100")]},
        {"configurable": {"thread_id": "t-preview"}},
        context=Context(principal=principal("lee")),
    )
    preview = json.loads(str(tool_messages(previewed)[0].content))["data"]
    waiting = graph(
        ai("", tool_call("create_purchase_order", {"preview_token": preview["preview_token"]}, "c1"))
    ).invoke(
        {"messages": [("user", "order it")]},
        {"configurable": {"thread_id": "t-create"}},
        context=Context(principal=principal("lee")),
    )
    facts = waiting["__interrupt__"][0].value["toolgate"]["proposals"][0]
    gw = open_test_app(
        model=ScriptedChatModel(responses=[]), tools=registry, policy=policy, store=store, start=False
    ).gateway
    client = TestClient(http.create_app(lambda: gw, waker_interval_s=None))
    shown = client.get(proposal_url(facts), headers=auth("paul")).json()
    assert shown["arguments"] == {"preview_token": preview["preview_token"]}  # the token alone says nothing
    details = shown["review_details"]
    assert details["total_cents"] == preview["total_cents"] and details["vendor_id"] == "V-100"
    assert details["used"] is False and shown["review_details_error"] is None
    assert 0 < shown["seconds_left"] <= 3600
    assert client.get(proposal_url(facts), headers=auth("lee")).json()["review_details"] == details


def test_the_console_and_its_assets_are_served_with_nothing_external(api: Api) -> None:
    kinds = {
        "/console": "text/html",
        "/console/app.js": "text/javascript",
        "/console/console.css": "text/css",
    }
    texts = {}
    for path, kind in kinds.items():
        response = api.client.get(path)
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind), path
        assert response.headers["x-content-type-options"] == "nosniff"
        texts[path] = response.text
        assert "http://" not in response.text and "https://" not in response.text, path
    page = texts["/console"]
    assert "default-src 'none'" in api.client.get("/console").headers["content-security-policy"]
    for marker in (
        'id="token-input"',
        'id="sign-out"',
        'id="approve"',
        'id="reject-reason"',
        'aria-live="polite"',
    ):
        assert marker in page
    assert 'src="console/app.js"' in page and 'href="console/console.css"' in page
    script = texts["/console/app.js"]
    # the token lives in the page's memory only: never written to storage a script of the origin reads
    assert "innerHTML" not in script and "localStorage" not in script and "setItem" not in script
    assert "document.cookie" not in script
    slash = api.client.get("/console/", follow_redirects=False)
    assert slash.status_code == 308 and slash.headers["location"] == "../console"


# ---- waking threads --------------------------------------------------------------------------


class FakeLangGraph:
    """Stands in for the server's loopback client: serves canned thread searches and states."""

    def __init__(self, threads: list[Any], states: dict[str, Any] | None = None, fail_first: int = 0) -> None:
        self.threads = self
        self.found = threads
        self.states = states or {}
        self.fail_first = fail_first
        self.searches = 0

    async def search(self, **kwargs: Any) -> list[Any]:
        assert kwargs == {"status": "interrupted", "limit": 100}
        self.searches += 1
        if self.searches <= self.fail_first:
            raise RuntimeError("server still starting")
        return self.found

    async def get_state(self, thread_id: str) -> Any:
        return self.states.get(thread_id, "junk")


def test_the_waker_wakes_only_threads_whose_operation_was_decided(api: Api) -> None:
    decided_graph, decided = api.pending("t-decided")
    waiting_graph, _ = api.pending("t-waiting", amount_cents=1200)

    def values(graph: Any, thread: str) -> dict[str, Any]:
        return dict(graph.get_state({"configurable": {"thread_id": thread}}).values)

    decide(api.gw, decided["proposal_id"], principal("fiona"), "approve")
    forged = {"awaiting": ["x", 5, None, "y"], "calls": {"x": {"operation_key": "op_nope"}, "y": "junk"}}
    fake = FakeLangGraph(
        [
            {"thread_id": "t-decided", "values": values(decided_graph, "t-decided")},
            {"thread_id": "t-waiting", "values": values(waiting_graph, "t-waiting")},
            {"thread_id": "t-forged", "values": forged},
            {"thread_id": "t-via-state"},
            {"thread_id": 7},
            "junk",
        ],
        states={"t-via-state": {"values": {"awaiting": "nope", "calls": []}}},
    )
    woken: waker.Woken = {}
    assert asyncio.run(waker.wake_decided_threads(api.gw, fake, woken)) == ["t-decided"]
    assert api.woken == ["t-decided"]
    assert asyncio.run(waker.wake_decided_threads(api.gw, fake, woken)) == []  # woken once per decision
    fake.found = fake.found[1:]
    asyncio.run(waker.wake_decided_threads(api.gw, fake, woken))
    assert woken == {} and api.woken == ["t-decided"]


def test_awaited_operation_keys_reads_untrusted_state_defensively() -> None:
    read = waker.awaited_operation_keys
    assert read(None) == read([]) == read({"awaiting": "c1"}) == read({"awaiting": ["c1"], "calls": []}) == []
    calls = {"c1": {"operation_key": "op_a"}, "c2": {"operation_key": "op_a"}, "c3": {"operation_key": 5}}
    assert read({"awaiting": ["c1", "c2", "c3", "c4", {"c1": 1}], "calls": calls}) == ["op_a"]
    many = {
        "awaiting": [f"c{i}" for i in range(500)],
        "calls": {f"c{i}": {"operation_key": f"op_{i}"} for i in range(500)},
    }
    assert len(read(many)) == waker.MAX_AWAITED_PER_THREAD
    assert read({"awaiting": ["c1"], "calls": {"c1": {"operation_key": "x" * 201}}}) == []


def test_the_background_waker_survives_a_failed_round_and_stops_on_shutdown(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph, facts = api.pending("t-background")
    decide(api.gw, facts["proposal_id"], principal("fiona"), "approve")
    state = dict(graph.get_state({"configurable": {"thread_id": "t-background"}}).values)
    fake = FakeLangGraph([{"thread_id": "t-background", "values": state}], fail_first=1)
    app = http.create_app(lambda: api.gw, waker_interval_s=0.01, langgraph_client=lambda: fake)
    started = time.monotonic()
    with TestClient(app):
        while api.woken == [] and time.monotonic() - started < 20:
            time.sleep(0.01)
    assert api.woken == ["t-background"] and fake.searches >= 2
    searches = fake.searches
    time.sleep(0.1)
    assert fake.searches == searches  # stopped with the app


@pytest.mark.parametrize(
    ("failure", "status", "code"),
    [
        (ConfigurationError("TOOLGATE_KEY is not set"), 503, "unavailable"),
        (RuntimeError("boom"), 500, "internal_error"),
    ],
)
def test_a_server_that_cannot_build_its_gateway_answers_a_stable_error(
    failure: Exception, status: int, code: str
) -> None:
    """Misconfigured (``unavailable``) or failing unexpectedly (``internal_error``): the client
    gets the stable error body, never the exception's text or a traceback (those go to the log)."""

    def broken() -> Gateway:
        raise failure

    client = TestClient(http.create_app(broken, waker_interval_s=None))
    answer = client.get("/toolgate/proposals", headers=auth("fiona"))
    assert answer.status_code == status and answer.json()["error"] == code
    assert set(answer.json()) == {"error", "message"} and str(failure) not in answer.text
