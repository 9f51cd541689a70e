"""``toolgate worker run`` deliveries take a tool-execution slot (`toolgate.policy.admission`).

The worker loop acquires the slot of the operation's stored tenant before any claim, the same
``TOOLGATE_MAX_CONCURRENT_TOOL_EXECUTIONS*`` caps the graph's execute path shares. With no free
slot the operation is not claimed and stays approved (deferred, audited ``admission.overloaded``)
and the rest of the pass skips that tenant (or everything, when the process cap is full) while
another tenant's operations are still delivered; once the slot is free a later pass delivers it
exactly once. Real threads and events hold the slots; on SQLite and PostgreSQL, with the one-tool
release of `tests/test_worker_run.py`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from test_worker_run import approved, effects, gateway_on, status, wait_for
from worker_run_release import TOOL

from toolgate.graph.gateway import Gateway
from toolgate.graph.review.decisions import decide
from toolgate.graph.review.proposals import draft_proposal, store_proposal
from toolgate.graph.worker.loop import LoopOptions, WorkerLoop
from toolgate.policy.admission import admitted, process_admission
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.store import Store

WAIT_S = 120.0
"""Upper bound of any wait (a stuck thread fails the test, never hangs it)."""


def limits(monkeypatch: pytest.MonkeyPatch, process: int, tenant: int) -> None:
    monkeypatch.setenv("TOOLGATE_MAX_CONCURRENT_TOOL_EXECUTIONS", str(process))
    monkeypatch.setenv("TOOLGATE_MAX_CONCURRENT_TOOL_EXECUTIONS_PER_TENANT", str(tenant))
    monkeypatch.setenv("TOOLGATE_ADMISSION_WAIT_S", "0.05")


class Holder(threading.Thread):
    """Holds one tool slot of ``tenant`` (as a running handler would) until ``release`` is set."""

    def __init__(self, gw: Gateway, tenant: str) -> None:
        super().__init__(daemon=True)
        self.gw, self.tenant = gw, tenant
        self.held, self.release = threading.Event(), threading.Event()

    def run(self) -> None:
        with admitted(self.gw.auditor, "tool", self.tenant):
            self.held.set()
            self.release.wait(WAIT_S)

    def __enter__(self) -> Holder:
        self.start()
        assert self.held.wait(WAIT_S), "the holder never got its slot"
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.join(WAIT_S)
        assert not self.is_alive()


def overloaded(store: Store, key: str) -> list[Any]:
    return [e for e in store.audit.events(operation_key=key) if e.event == "admission.overloaded"]


def claims(store: Store, key: str) -> int:
    return sum(e.event == "operation.claimed" for e in store.audit.events(operation_key=key))


@pytest.mark.parametrize(
    ("scope", "process", "holder_tenant"),
    [("tenant", 2, "acme"), ("process", 1, "globex")],
)
def test_a_worker_pass_with_no_free_slot_claims_nothing_then_delivers_once(
    store: Store, monkeypatch: pytest.MonkeyPatch, scope: str, process: int, holder_tenant: str
) -> None:
    limits(monkeypatch, process=process, tenant=1)
    gw = gateway_on(store)
    keys = [approved(gw, f"slot-{scope}-{n}") for n in range(2)]
    lines: list[dict[str, Any]] = []
    loop = WorkerLoop(
        gw.executor, LoopOptions(worker_id=f"w-{scope}", retry_after_s=0.0), report=lines.append
    )
    slots = process_admission()

    with Holder(gw, holder_tenant):
        assert slots.in_flight("tool") == 1
        assert loop.deliver_due() == 0
        assert (loop.summary.claimed, loop.summary.deferred) == (0, 1)  # the second is skipped
        assert [status(store, k) for k in keys] == ["approved", "approved"]
        assert [effects(store, k) for k in keys] == [0, 0] and [claims(store, k) for k in keys] == [0, 0]
        refused = [e for k in keys for e in overloaded(store, k)]
        assert len(refused) == 1  # one refusal, audited once; the other operation was not tried
        (event,) = refused
        assert (event.result, event.code, event.tenant_id, event.tool) == (
            "refused",
            "overloaded",
            "acme",
            TOOL,
        )
        assert event.detail["scope"] == scope and event.detail["kind"] == "tool"
        assert event.detail["limit"] == (1 if scope == "tenant" else process)
        (line,) = lines
        assert (line["claim"], line["status"]) == ("NOT_ATTEMPTED", "deferred")
        assert slots.in_flight("tool") == 1  # the refused worker holds nothing

    assert slots.in_flight("tool") == 0
    assert loop.deliver_due() == 2  # a later pass: both delivered
    assert loop.deliver_due() == 0  # and never again
    assert [status(store, k) for k in keys] == ["succeeded", "succeeded"]
    assert [effects(store, k) for k in keys] == [1, 1] and [claims(store, k) for k in keys] == [1, 1]
    assert slots.in_flight("tool") == 0


def test_a_worker_holds_its_slot_while_the_handler_runs(
    store: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    limits(monkeypatch, process=1, tenant=1)
    gw = gateway_on(store)
    first, second = approved(gw, "running"), approved(gw, "waiting")
    monkeypatch.setenv("WR_BLOCK", "before")  # the handler waits for the file ``release``
    monkeypatch.setenv("WR_SIGNAL_DIR", str(tmp_path))
    running = WorkerLoop(gw.executor, LoopOptions(worker_id="w-running", batch=1))
    delivered: list[int] = []
    worker = threading.Thread(target=lambda: delivered.append(running.deliver_due()), daemon=True)
    worker.start()
    try:
        wait_for(lambda: (tmp_path / "started").exists(), "the first handler to start")
        slots = process_admission()
        assert slots.in_flight("tool") == 1 and slots.in_flight("tool", "acme") == 1
        busy = next(k for k in (first, second) if status(store, k) == "executing")
        idle = second if busy == first else first

        other = WorkerLoop(gw.executor, LoopOptions(worker_id="w-other", retry_after_s=0.0))
        assert other.deliver_due() == 0 and other.summary.deferred == 1
        assert status(store, idle) == "approved" and claims(store, idle) == 0
        assert len(overloaded(store, idle)) == 1
    finally:
        (tmp_path / "release").write_text("go")
        worker.join(WAIT_S)
    assert not worker.is_alive() and delivered == [1]
    monkeypatch.delenv("WR_BLOCK")
    assert other.deliver_due() == 1
    assert [status(store, k) for k in (first, second)] == ["succeeded", "succeeded"]
    assert [effects(store, k) for k in (first, second)] == [1, 1]
    assert process_admission().in_flight("tool") == 0


def approved_for_globex(gw: Gateway, label: str) -> str:
    """A ``record_effect`` operation of tenant globex (requested by gus, approved by gwen: a
    globex requester holding the tool's ``ops:restart`` and a globex operator, added for the
    test); its key."""
    operator = Principal.from_dict(
        {"user_id": "gwen", "tenant_id": "globex", "roles": ["operator"], "scopes": []}
    )
    requester = Principal.from_dict(
        {"user_id": "gus", "tenant_id": "globex", "roles": ["support"], "scopes": ["ops:restart"]}
    )
    for person in (operator, requester):
        if gw.store.identities.get(person.user_id) is None:
            IdentityDirectory(gw.store).add(person, by=None)
    spec = gw.registry.get(TOOL)
    assert spec is not None
    draft = draft_proposal(
        gw,
        spec,
        tenant_id="globex",
        requester_id="gus",
        thread_id=f"t-{label}",
        call_id="c1",
        arguments={"label": label},
    )
    stored, op, _ = store_proposal(gw, spec, draft, actor="gus")
    decide(gw, stored.proposal_id, operator, "approve")
    return op.operation_key


def test_one_tenant_with_no_free_slot_never_holds_back_another(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits(monkeypatch, process=3, tenant=1)
    gw = gateway_on(store)
    acme = [approved(gw, f"busy-tenant-{n}") for n in range(2)]
    globex = approved_for_globex(gw, "free-tenant")
    loop = WorkerLoop(gw.executor, LoopOptions(worker_id="w-tenants", retry_after_s=0.0))

    with Holder(gw, "acme"):
        assert loop.deliver_due() == 1  # globex's, whatever the pass's order
        assert (loop.summary.claimed, loop.summary.deferred) == (1, 1)
        assert status(store, globex) == "succeeded" and effects(store, globex) == 1
        assert [status(store, k) for k in acme] == ["approved", "approved"]
        assert [claims(store, k) for k in acme] == [0, 0]
        refused = [e for k in acme for e in overloaded(store, k)]
        assert [(e.tenant_id, e.detail["scope"]) for e in refused] == [("acme", "tenant")]
        assert overloaded(store, globex) == []

    assert loop.deliver_due() == 2  # one at a time: the tenant's one slot is enough for both
    assert [status(store, k) for k in acme] == ["succeeded", "succeeded"]
    assert [effects(store, k) for k in [*acme, globex]] == [1, 1, 1]
    assert process_admission().in_flight("tool") == 0
