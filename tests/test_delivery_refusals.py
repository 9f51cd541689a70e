"""A delivery whose tool or proposal is gone is refused, audited once, and changes nothing.

`toolgate.policy.authority.Authority.before_claim`: an approved operation delivered by a process
whose release lacks its tool (``tool_not_in_release``), or whose proposal the store does not hold
(a tampered operation row naming none, or a dangling id: ``proposal_missing``), is not claimed,
stays approved, runs no handler and is audited as ``delivery.refused`` with its operation key,
tool, proposal id and tenant. A worker re-picking it on every pass adds no second identical event.
On SQLite and PostgreSQL, with the one-tool release of `tests/test_worker_run.py`.
"""

from __future__ import annotations

import pytest
from test_worker_run import approved, effects, gateway_on, status
from worker_run_release import TOOL, release

from toolgate.graph.gateway import Gateway
from toolgate.graph.worker.loop import LoopOptions, WorkerLoop
from toolgate.policy.authority import DELIVERY_REFUSED as EVENT
from toolgate.store import Store
from toolgate.store.audit_records import AuditEvent
from toolgate.testing import ScriptedChatModel, open_test_app
from toolgate.tools.registry import Registry


def refusals(store: Store, key: str) -> list[AuditEvent]:
    return [e for e in store.audit.events(operation_key=key) if e.event == EVENT]


def handler_runs(store: Store, key: str) -> int:
    started = [e for e in store.audit.events(operation_key=key) if e.event == "handler.started"]
    return len(started) + effects(store, key)


def without_tool(gw: Gateway) -> Gateway:
    """A process of the same release whose registry lacks the tool."""
    empty = Registry.of(gw.registry.release, [], gw.registry.resolver)
    assert empty.get_for(TOOL, "acme") is None
    model = ScriptedChatModel(responses=[])
    return open_test_app(model=model, tools=empty, policy=release.policy, store=gw.store, start=False).gateway


def worker_passes(gw: Gateway, passes: int) -> WorkerLoop:
    """One worker loop trying every due operation ``passes`` times (no back-off between passes)."""
    loop = WorkerLoop(gw.executor, LoopOptions(worker_id="w-refusals", retry_after_s=0.0))
    for _ in range(passes):
        assert loop.deliver_due() == 0
    return loop


def test_a_tool_missing_from_the_release_is_refused_audited_once_and_left_approved(store: Store) -> None:
    gw = gateway_on(store)
    key = approved(gw, "gone-tool")
    elsewhere = without_tool(gw)

    for _ in range(3):
        refused = elsewhere.executor.deliver(key, worker_id="w-elsewhere")
        assert refused.claim == "NOT_ATTEMPTED" and refused.status == "approved"
        assert refused.reason == f"tool {TOOL!r} is not in release {gw.registry.release}"
    loop = worker_passes(elsewhere, 3)
    assert loop.summary.refused == 3 and loop.summary.claimed == 0
    worker_passes(without_tool(gw), 2)  # another process of the same release: still no repeat

    assert status(store, key) == "approved" and handler_runs(store, key) == 0
    (event,) = refusals(store, key)
    op = store.operations.get(key)
    assert op is not None
    assert (event.result, event.code, event.operation_key) == ("refused", "tool_not_in_release", key)
    assert (event.tool, event.proposal_id, event.tenant_id) == (TOOL, op.proposal_id, "acme")
    assert event.tool_release == gw.registry.release and event.detail["tenant_id"] == "acme"

    # the operation was left intact: a process whose release has the tool delivers it once
    done = gw.executor.deliver(key, worker_id="w-home")
    assert done.claim == "ACQUIRED" and done.status == "succeeded"
    assert effects(store, key) == 1 and len(refusals(store, key)) == 1


def test_an_operation_tampered_to_name_no_proposal_is_refused_and_audited_once(store: Store) -> None:
    gw = gateway_on(store)
    key = approved(gw, "no-proposal")
    with store.transaction() as tx:  # a tampered record: the operation row no longer names its proposal
        tx.execute("UPDATE operations SET proposal_id = NULL WHERE operation_key = ?", (key,))
    fresh = gateway_on(store)  # a process that never read the proposal

    for _ in range(2):
        refused = fresh.executor.deliver(key, worker_id="w-tampered")
        assert (refused.claim, refused.status, refused.reason) == (
            "NOT_ATTEMPTED",
            "approved",
            "proposal missing",
        )
    loop = worker_passes(fresh, 3)
    assert loop.summary.refused == 3 and loop.summary.claimed == 0

    assert status(store, key) == "approved" and handler_runs(store, key) == 0
    (event,) = refusals(store, key)
    assert (event.result, event.code, event.operation_key, event.tool) == (
        "refused",
        "proposal_missing",
        key,
        TOOL,
    )
    assert event.proposal_id is None and event.tenant_id == "acme"


def test_a_proposal_the_store_does_not_hold_is_refused_and_audited_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = gateway_on(store)
    key = approved(gw, "dangling")
    op = store.operations.get(key)
    assert op is not None and op.proposal_id
    fresh = gateway_on(store)
    monkeypatch.setattr(store.proposals, "get", lambda proposal_id: None)  # the row is gone

    refused = fresh.executor.deliver(key, worker_id="w-dangling")
    assert (refused.claim, refused.status, refused.reason) == (
        "NOT_ATTEMPTED",
        "approved",
        "proposal missing",
    )
    worker_passes(fresh, 2)

    assert status(store, key) == "approved" and handler_runs(store, key) == 0
    (event,) = refusals(store, key)
    assert (event.code, event.proposal_id, event.tool, event.tenant_id) == (
        "proposal_missing",
        op.proposal_id,
        TOOL,
        "acme",
    )


def test_distinct_reasons_are_each_audited(store: Store) -> None:
    gw = gateway_on(store)
    key = approved(gw, "two-reasons")
    without_tool(gw).executor.deliver(key, worker_id="w-a")
    with store.transaction() as tx:
        tx.execute("UPDATE operations SET proposal_id = NULL WHERE operation_key = ?", (key,))
    for _ in range(2):
        gateway_on(store).executor.deliver(key, worker_id="w-b")
        without_tool(gw).executor.deliver(key, worker_id="w-a")
    assert sorted(e.code or "" for e in refusals(store, key)) == ["proposal_missing", "tool_not_in_release"]
    assert status(store, key) == "approved" and handler_runs(store, key) == 0
