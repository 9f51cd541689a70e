"""A durable wait's status checks run as the requesting user (issue 16, item 3): their sealed token.

``check_job_status`` here declares a forwarded ``reports_token``. Lee proposes the report job with
his token (and one the tool does not declare); Ana approves and resumes with a token of her own.
The worker's status checks see Lee's token, never Ana's, from a seal bound to the wait (key,
tenant, requester, status tool, expiry); only the declared credential is sealed, as ciphertext,
and the seal is gone once the wait ends. A missing, tampered, other wait's or expired seal is
refused before the handler runs (``delegation.refused`` audited, handler calls 0): the wait ends
at once as ``refused`` (as a write fails closed), or, for a seal that expired with the wait, as
``expired``. SQLite and PostgreSQL; controlled clocks, nothing sleeps.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command
from support import TEST_KEY, principal, shift_store_clock, tool_messages
from wait_support import WaitWorld

from toolgate.errors import ToolExecutionError
from toolgate.graph import Context
from toolgate.graph.delivery.delegation import DelegationRefused
from toolgate.graph.review.decisions import decide
from toolgate.graph.waits.delegation import (
    carry_for_wait,
    open_for_wait,
    pending_key,
    seal_for_wait,
    wait_key,
)
from toolgate.graph.waits.progress import WaitPass
from toolgate.policy.identities import IdentityDirectory
from toolgate.store import Store
from toolgate.store.waits import WaitIn, WaitRecord
from toolgate.tools import Registry
from toolgate.tools.demo import WIDE_RELEASE, DemoResolver, DemoServices, DemoSystem
from toolgate.tools.demo.reports import WAIT_MAX_S, report_specs
from toolgate.tools.spec import HandlerContext
from toolgate.tools.tenant_overrides import TenantOverride

LEE_TOKEN = "rep_lee_own_token_0001"
LEE_FRESH = "rep_lee_fresh_token_0003"
ANA_TOKEN = "rep_ana_reviewer_token_0002"
UNDECLARED = "hr_not_declared_0004"


class SealedWaitWorld(WaitWorld):
    """`WaitWorld` whose ``check_job_status`` declares ``reports_token`` and records what it got."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(store, monkeypatch, job_s=180)
        self.seen: list[dict[str, str]] = []
        specs = []
        for spec in report_specs(self.reports):
            if spec.name == "check_job_status":
                spec = replace(
                    spec,
                    forwarded_credentials=frozenset({"reports_token"}),
                    handler=self._recording(spec.handler),
                )
            specs.append(spec)
        resolver = DemoResolver(DemoSystem(store), DemoServices.on(store, secret=TEST_KEY))
        self.registry = Registry.of(WIDE_RELEASE, self.counter.wrap(specs), resolver)

    def _recording(self, handler: Any) -> Any:
        def recorded(args: Any, ctx: HandlerContext) -> Any:
            self.seen.append(dict(ctx.credentials))
            return handler(args, ctx)

        return recorded

    def propose(self, graph: Any, credentials: dict[str, str]) -> str:
        """Lee asks for the report, forwarding ``credentials``; the proposal's operation key."""
        first = graph.invoke(
            {"messages": [HumanMessage("Sales summary for January please.")]},
            self.config,
            context=Context(principal=principal("lee"), credentials=credentials),
        )
        facts = first["__interrupt__"][0].value["toolgate"]["proposals"][0]
        decide(self.gateway(), facts["proposal_id"], principal("ana"), "approve")
        return str(facts["operation_key"])

    def resume(self, graph: Any, context: Context) -> dict[str, Any]:
        return dict(graph.invoke(Command(resume={"wake": True}), self.config, context=context))

    def wait(self) -> WaitRecord:
        row = self.store.waits.get(self.operation_key())
        assert row is not None
        return row


def reviewer() -> Context:
    """Ana's resume, carrying a token of her own (which must never reach Lee's status checks)."""
    return Context(principal=principal("ana"), credentials={"reports_token": ANA_TOKEN})


def sealed_rows(store: Store) -> list[dict[str, Any]]:
    with store.transaction(write=False) as tx:
        return list(tx.execute("SELECT * FROM sealed_delegations ORDER BY operation_key"))


def refusals(store: Store) -> list[Any]:
    return [e for e in store.audit.events() if e.event == "delegation.refused"]


def started(store: Store, monkeypatch: pytest.MonkeyPatch) -> tuple[SealedWaitWorld, Any, WaitRecord]:
    """Lee's job, approved by Ana, suspended on its wait with Lee's token sealed for it."""
    world = SealedWaitWorld(store, monkeypatch)
    graph = world.graph()
    world.propose(graph, {"reports_token": LEE_TOKEN})
    assert world.resume(graph, reviewer())["status"] == "waiting"
    return world, graph, world.wait()


def test_status_checks_run_with_the_requesters_sealed_token_never_the_reviewers(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = SealedWaitWorld(store, monkeypatch)
    graph = world.graph()
    key = world.propose(graph, {"reports_token": LEE_TOKEN, "hr_token": UNDECLARED})
    (pending,) = sealed_rows(store)  # sealed at proposal, by Lee's own request, for the wait
    assert pending["operation_key"] == pending_key(key)
    assert LEE_TOKEN not in str(pending) and UNDECLARED not in str(pending)  # ciphertext only

    assert world.resume(graph, reviewer())["status"] == "waiting"
    row = world.wait()
    (sealed,) = sealed_rows(store)  # rebound to the wait; the proposal's copy is gone
    assert (sealed["operation_key"], sealed["expires_at"]) == (wait_key(key), row.expires_at)
    assert sealed["sealed"].startswith("v1.") and LEE_TOKEN not in sealed["sealed"]
    assert open_for_wait(store, row) == {"reports_token": LEE_TOKEN}  # the undeclared one never sealed

    world.advance(60)
    assert world.wait_pass(graph)() == 1  # running
    world.advance(125)
    assert world.wait_pass(graph)() == 1  # done: ready, resumed
    assert world.seen == [{"reports_token": LEE_TOKEN}] * 2  # Lee's, never Ana's, never the undeclared
    assert world.counter.calls["check_job_status"] == 2
    done = world.wait()
    assert (done.state, done.outcome) == ("resumed", "done")
    assert sealed_rows(store) == [] and refusals(store) == []  # deleted when the wait ended
    (answer,) = tool_messages(graph.get_state(world.config).values)
    assert json.loads(str(answer.content))["wait"]["outcome"] == "done"


def test_a_wait_whose_status_tool_declares_no_credentials_deletes_nothing_when_it_ends(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = WaitWorld(store, monkeypatch)  # the demo's check_job_status: no forwarded credentials
    graph = world.graph()
    deletes: list[str] = []
    real_delete = store.delegations.delete
    monkeypatch.setattr(store.delegations, "delete", lambda key: deletes.append(key) or real_delete(key))
    assert world.start_and_approve(graph)["status"] == "waiting"
    assert sealed_rows(store) == []  # nothing sealed at proposal or at the wait
    world.advance(185)
    assert world.wait_pass(graph)() == 1  # done: ready, resumed
    done = store.waits.get(world.operation_key())
    assert done is not None and (done.state, done.outcome) == ("resumed", "done")
    assert deletes == []  # no write for credentials that were never sealed


def test_the_requesters_own_resume_seals_the_token_of_that_request(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = SealedWaitWorld(store, monkeypatch)
    graph = world.graph()
    world.propose(graph, {"reports_token": LEE_TOKEN})
    fresh = Context(
        principal=principal("lee"), credentials={"reports_token": LEE_FRESH, "hr_token": UNDECLARED}
    )
    assert world.resume(graph, fresh)["status"] == "waiting"
    assert open_for_wait(store, world.wait()) == {"reports_token": LEE_FRESH}
    assert [r["operation_key"] for r in sealed_rows(store)] == [wait_key(world.operation_key())]
    world.advance(190)
    assert world.wait_pass(graph)() == 1
    assert world.seen == [{"reports_token": LEE_FRESH}] and sealed_rows(store) == []


def test_a_wait_without_the_requesters_token_fails_closed_and_never_uses_the_reviewers(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = SealedWaitWorld(store, monkeypatch)
    graph = world.graph()
    world.propose(graph, {"hr_token": UNDECLARED})  # Lee forwards no reports_token
    assert world.resume(graph, reviewer())["status"] == "waiting"
    assert sealed_rows(store) == []  # Ana's token is not Lee's: nothing sealed
    world.advance(60)
    assert world.wait_pass(graph)() == 1
    assert world.counter.calls["check_job_status"] == 0 and world.seen == []
    (refused,) = refusals(store)
    assert (refused.code, refused.tool, refused.tenant_id) == (
        "delegation_missing",
        "check_job_status",
        "acme",
    )
    assert refused.operation_key == world.operation_key() and refused.actor_id  # Lee's, as a hash
    row = world.wait()
    assert (row.state, row.outcome, row.last_status) == ("resumed", "refused", "error:delegation_missing")
    final = graph.get_state(world.config).values  # resumed at once: no polling until the expiry
    (answer,) = tool_messages(final)
    body = json.loads(str(answer.content))
    assert body["wait"]["outcome"] == "refused" and "Do not resubmit" in body["wait"]["note"]
    assert final["status"] == "done"


def test_a_tampered_seal_is_refused_and_the_wait_ends_refused(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, graph, row = started(store, monkeypatch)
    (sealed,) = sealed_rows(store)
    raw = bytearray(base64.urlsafe_b64decode(sealed["sealed"].removeprefix("v1.")))
    raw[20] ^= 0x01  # one bit of the ciphertext
    flipped = "v1." + base64.urlsafe_b64encode(bytes(raw)).decode("ascii")
    with store.transaction() as tx:
        tx.execute(
            "UPDATE sealed_delegations SET sealed = ? WHERE operation_key = ?",
            (flipped, wait_key(row.operation_key)),
        )
    with pytest.raises(DelegationRefused) as caught:
        open_for_wait(store, row)
    assert caught.value.kind == "delegation_invalid"
    world.advance(60)
    assert world.wait_pass(graph)() == 1
    assert world.counter.calls["check_job_status"] == 0 and world.seen == []
    assert [e.code for e in refusals(store)] == ["delegation_invalid"]
    ended = world.wait()
    assert (ended.state, ended.outcome) == ("resumed", "refused") and sealed_rows(store) == []


def test_another_waits_seal_does_not_open_for_this_wait(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, graph, row = started(store, monkeypatch)
    other = store.waits.open(
        WaitIn(
            operation_key="op-other-wait",
            thread_id="t-other",
            tenant_id="acme",
            user_id="lee",
            call_id="c9",
            tool="submit_report_job",
            status_tool="check_job_status",
            job_ref="job_0000000000000009",
            every_s=float(WAIT_MAX_S),
            max_wait_s=float(WAIT_MAX_S),
        )
    )  # fmt: skip  (not due during this test)
    status = world.registry.get("check_job_status")
    operation = store.operations.get(row.operation_key)
    assert status is not None and operation is not None
    gw = world.gateway()
    proposal = gw.executor.proposal(operation.proposal_id)
    assert proposal is not None
    lee = principal("lee")
    source = seal_for_wait(
        store, gw.auditor, status, other, proposal, lee, {"reports_token": "rep_lee_other_05"}
    )
    copied = store.delegations.get(wait_key(other.operation_key))
    assert source == "request" and copied is not None
    store.delegations.put(
        wait_key(row.operation_key), copied.sealed, row.expires_at
    )  # with this wait's expiry
    world.advance(60)
    assert world.wait_pass(graph)() == 1
    assert world.counter.calls["check_job_status"] == 0 and world.seen == []
    assert [e.code for e in refusals(store)] == ["delegation_invalid"]
    ended = store.waits.get(row.operation_key)
    assert ended is not None and (ended.state, ended.outcome) == ("resumed", "refused")
    assert store.delegations.get(wait_key(row.operation_key)) is None
    assert store.delegations.get(wait_key(other.operation_key)) is not None  # the other wait is still waiting


def test_a_seal_past_its_waits_expiry_by_a_skewed_store_clock_is_refused(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, graph, _ = started(store, monkeypatch)
    world.advance(60)
    assert world.wait_pass(graph)() == 1  # one real check, as Lee
    assert world.seen == [{"reports_token": LEE_TOKEN}]
    shift_store_clock(
        monkeypatch, store, timedelta(seconds=WAIT_MAX_S)
    )  # the store's clock skews past expiry
    with pytest.raises(DelegationRefused) as caught:
        open_for_wait(store, world.wait())
    assert caught.value.kind == "delegation_expired"
    assert world.wait_pass(graph)() == 1
    assert world.counter.calls["check_job_status"] == 1  # the refused check never ran
    assert [e.code for e in refusals(store)] == ["delegation_expired"]
    ended = world.wait()  # the seal expired with the wait: its natural end, with the latest status
    assert (ended.state, ended.outcome, ended.last_status) == ("resumed", "expired", "running")
    assert sealed_rows(store) == []


def test_a_refused_check_ends_a_wait_refused_and_purge_removes_the_seals_of_ended_waits(store: Store) -> None:
    def opened(n: int) -> WaitRecord:
        return store.waits.open(
            WaitIn(
                operation_key=f"op-{n}", thread_id=f"t-{n}", tenant_id="acme", user_id="lee", call_id="c1",
                tool="submit_report_job", status_tool="check_job_status", job_ref=f"job_{n:016d}",
                every_s=15.0, max_wait_s=600.0,
            )
        )  # fmt: skip

    first, second = opened(1), opened(2)
    for row in (first, second):
        store.delegations.put(wait_key(row.operation_key), "v1.opaque", row.expires_at)
        store.delegations.put(pending_key(row.operation_key), "v1.opaque", row.expires_at)
    ended = store.waits.record_check(
        "op-1", checks_seen=0, job_status="error:delegation_invalid", result=None, done=False, refused=True
    )
    assert ended is not None and (ended.state, ended.outcome, ended.verified) == ("ready", "refused", True)
    assert store.waits.list("ready")[0].outcome == "refused"  # the schema accepts the outcome
    assert store.delegations.purge() == 2  # the ended wait's seals; the waiting one's stay
    assert [r["operation_key"] for r in sealed_rows(store)] == [pending_key("op-2"), wait_key("op-2")]
    assert store.waits.record_check("op-1", checks_seen=1, job_status="x", result=None, done=True) is None


def test_a_reviewers_edit_carries_the_requesters_wait_seal_never_the_reviewers(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = SealedWaitWorld(store, monkeypatch)
    graph = world.graph()
    key = world.propose(graph, {"reports_token": LEE_TOKEN})
    gw = world.gateway()
    operation = store.operations.get(key)
    assert operation is not None
    original = gw.executor.proposal(operation.proposal_id)
    assert original is not None
    edited = replace(original, proposal_id="p-edited", operation_key="op-edited")
    assert carry_for_wait(store, gw.auditor, original, edited)
    assert [r["operation_key"] for r in sealed_rows(store)] == [pending_key("op-edited")]
    other = replace(original, proposal_id="p-other", operation_key="op-other", requester_id="ana")
    assert not carry_for_wait(store, gw.auditor, edited, other)  # another requester: nothing carried
    row = store.waits.open(
        WaitIn(
            operation_key="op-edited", thread_id="t-edited", tenant_id="acme", user_id="lee", call_id="c1",
            tool="submit_report_job", status_tool="check_job_status", job_ref="job_0000000000000007",
            every_s=15.0, max_wait_s=600.0,
        )
    )  # fmt: skip
    status = world.registry.get("check_job_status")
    assert status is not None
    ana = principal("ana")  # the reviewer's resume: her token is never sealed for Lee's wait
    assert (
        seal_for_wait(store, gw.auditor, status, row, edited, ana, {"reports_token": ANA_TOKEN}) == "proposal"
    )
    assert open_for_wait(store, row) == {"reports_token": LEE_TOKEN}
    assert [r["operation_key"] for r in sealed_rows(store)] == [wait_key("op-edited")]
    forged = store.delegations.put(pending_key(key), sealed_rows(store)[0]["sealed"], original.expires_at)
    assert not carry_for_wait(
        store, gw.auditor, original, edited
    )  # a wait's seal does not open as a proposal's
    assert forged.operation_key == pending_key(key) and [e.code for e in refusals(store)] == [
        "delegation_invalid"
    ]


def test_two_workers_racing_on_a_refused_check_record_it_once_and_run_no_handler(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, _, row = started(store, monkeypatch)
    store.delegations.delete(wait_key(row.operation_key))  # the seal is gone: every check is refused
    world.advance(60)
    gw = world.gateway()
    passes = [
        WaitPass(store, lambda key: gw.executor) for _ in range(2)
    ]  # no resumer: the record is the race
    barrier = threading.Barrier(2)
    recorded: list[int] = []

    def work(one: WaitPass) -> None:
        barrier.wait(30)
        recorded.append(one())

    threads = [threading.Thread(target=work, args=(p,)) for p in passes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(recorded) == [0, 1] and world.counter.calls["check_job_status"] == 0
    ended = store.waits.get(row.operation_key)
    assert ended is not None and (ended.state, ended.outcome, ended.checks) == ("ready", "refused", 1)
    assert {e.code for e in refusals(store)} == {"delegation_missing"} and sealed_rows(store) == []


class OverriddenWaitWorld(SealedWaitWorld):
    """The shared ``check_job_status`` declares no credential; acme's own implementation of it
    (a per-tenant override) declares ``reports_token`` and records what it got."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        WaitWorld.__init__(self, store, monkeypatch, job_s=180)
        self.seen = []
        specs = self.counter.wrap(report_specs(self.reports))
        shared = next(s for s in specs if s.name == "check_job_status")
        own = TenantOverride(
            tenant_id="acme",
            tool="check_job_status",
            handler=self._recording(shared.handler),
            handler_revision="check-job-status/acme-own-1",
            forwarded_credentials=frozenset({"reports_token"}),
        )
        resolver = DemoResolver(DemoSystem(store), DemoServices.on(store, secret=TEST_KEY))
        self.registry = Registry.of(WIDE_RELEASE, specs, resolver, [own])


def test_a_tenants_own_status_tool_is_the_one_the_worker_runs_with_its_declared_credential(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = OverriddenWaitWorld(store, monkeypatch)
    graph = world.graph()
    world.propose(graph, {"reports_token": LEE_TOKEN, "hr_token": UNDECLARED})
    assert world.resume(graph, reviewer())["status"] == "waiting"
    assert open_for_wait(store, world.wait()) == {"reports_token": LEE_TOKEN}  # what acme's own declares
    world.advance(190)
    assert world.wait_pass(graph)() == 1
    assert world.seen == [{"reports_token": LEE_TOKEN}]  # acme's implementation ran, as Lee
    assert world.counter.calls["check_job_status"] == 1
    assert (world.wait().state, world.wait().outcome) == ("resumed", "done") and sealed_rows(store) == []


def test_a_tenants_own_status_tool_failing_counts_against_its_own_breaker_not_the_shared_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant's own implementation is its own dependency (`Registry.breaker_key`): its status
    checks failing must not open the breaker every other tenant's checks of the shared one pass."""
    world = OverriddenWaitWorld(store, monkeypatch)
    own = world.registry.overrides["acme"]["check_job_status"]

    def down(args: Any, ctx: HandlerContext) -> Any:
        raise ToolExecutionError("server_error", "acme's own reports service is down", retryable=True)

    world.registry.overrides["acme"]["check_job_status"] = replace(own, handler=down)
    graph = world.graph()
    world.propose(graph, {"reports_token": LEE_TOKEN})
    assert world.resume(graph, reviewer())["status"] == "waiting"
    world.advance(60)
    assert world.wait_pass(graph)() == 1
    assert world.wait().last_status == "error:server_error"
    shared, acme = store.breakers.row("check_job_status"), store.breakers.row("check_job_status@acme")
    assert shared is None or shared.failures == 0
    assert acme is not None and acme.failures == 1


def test_a_requester_revoked_while_waiting_has_their_sealed_token_used_no_more(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Revoking a person stops toolgate acting as them: the status checks of a job they started
    no longer run with their sealed token (``requester_inactive``, audited, the handler never
    runs); the wait ends refused at once and the seal goes."""
    world, graph, row = started(store, monkeypatch)
    world.advance(60)
    assert world.wait_pass(graph)() == 1 and world.seen == [{"reports_token": LEE_TOKEN}]
    IdentityDirectory(store).revoke("lee", by=None)
    world.advance(60)
    assert world.wait_pass(graph)() == 1
    assert world.seen == [{"reports_token": LEE_TOKEN}] and world.counter.calls["check_job_status"] == 1
    (refused,) = refusals(store)
    assert (refused.code, refused.operation_key, refused.tenant_id) == (
        "requester_inactive",
        row.operation_key,
        "acme",
    )
    ended = world.wait()
    assert (ended.state, ended.outcome, ended.last_status) == ("resumed", "refused", "error:requester_inactive")
    assert sealed_rows(store) == []
