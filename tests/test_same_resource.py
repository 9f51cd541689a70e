"""Same resource, any thread: two graph runs on two stores of one database (as two processes would
be) update one SKU at the same time, and the count is right every time.

A batch keeps same-SKU calls in one lane (`test_parallel_batches`); across threads and processes
only the store's resource lease does. Each repetition forces the overlap with events, never with
sleeps: the first handler to start waits inside the tool until the other delivery has been
refused the SKU's lease, so both really run at once. Without the declared conflict (no lease) the
same harness, forced to read twice before either writes, loses an update in every repetition.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from support import TEST_KEY, principal, shift_store_clock, tool_messages
from test_demo_tools import WINDOW_TIMEOUT_S, ReadWriteWindow

from toolgate.graph import Context
from toolgate.graph.bootstrap import initialize_store
from toolgate.graph.delivery.same_resource import resource_keys
from toolgate.graph.review.decisions import decide
from toolgate.policy.identities import IdentityDirectory
from toolgate.store import PostgresStore, SQLiteStore, Store
from toolgate.store.leases import ResourcesBusy
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import ResourceRef
from toolgate.tools.demo import WIDE_RELEASE, DemoServices, DemoSystem, build_wide_registry
from toolgate.tools.demo.identities import seed_demo_identities
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.spec import HandlerContext, ToolSpec

REPETITIONS = 20
START = 10  # SKU-7 of acme in the demo stock


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def two_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """Two stores on one fresh database (separate connections, as two processes hold)."""

    def open_store() -> Store:
        if request.param == "sqlite":
            return SQLiteStore(tmp_path / "toolgate.sqlite", key=TEST_KEY)
        return PostgresStore(request.getfixturevalue("pg_url"), key=TEST_KEY)

    first = open_store()
    initialize_store(first, DEMO_RELEASES["ops-tools/1.1.0"])
    seed_demo_identities(IdentityDirectory(first))
    second = open_store()
    yield first, second
    first.close()
    second.close()


class Side:
    """One gateway process: its own store object, demo services and release."""

    def __init__(self, store: Store, wrap: Callable[[ToolSpec], ToolSpec], *, conflict: bool) -> None:
        self.store = store
        self.services = DemoServices.on(store, secret=b"test-secret")
        registry = build_wide_registry(DemoSystem(store), self.services)
        spec = registry.tools["update_inventory"]
        if not conflict:  # the tool no longer declares the SKU: no lease, as before this protection
            spec = replace(spec, resource=ResourceRef(kind="sku", argument="sku", conflict=False))
        self.registry = replace(registry, tools={**registry.tools, spec.name: wrap(spec)})
        self.policy = DEMO_RELEASES[WIDE_RELEASE].policy

    def app(self, model: ScriptedChatModel) -> Any:
        """This side's release around ``model``, built by the composition root."""
        return open_test_app(
            model=model, tools=self.registry, policy=self.policy, store=self.store, start=False
        )

    def gateway(self, model: ScriptedChatModel) -> Any:
        return self.app(model).gateway

    def approved_run(self, thread_id: str, delta: int) -> tuple[Any, dict[str, Any], str]:
        """A graph run that proposed ``delta`` units of SKU-7, its proposal approved: resuming it
        executes the update. Returns the graph, its config and the operation key."""
        call = tool_call(
            "update_inventory", {"sku": "SKU-7", "delta": delta, "reason": "received"}, thread_id
        )
        graph = self.app(ScriptedChatModel(responses=[ai("", call), ai("done")])).compiled(
            checkpointer=InMemorySaver()
        )
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        with self.store.transaction() as tx:
            tx.execute("DELETE FROM rate_counters")  # 40 proposals by one requester: not under test here
        first = graph.invoke(
            {"messages": [("user", f"received {delta} of SKU-7")]},
            config,
            context=Context(principal=principal("lee")),
        )
        assert "__interrupt__" in first, [m.content for m in tool_messages(first)]
        (proposal,) = first["__interrupt__"][0].value["toolgate"]["proposals"]
        decide(
            self.gateway(ScriptedChatModel(responses=[])),
            proposal["proposal_id"],
            principal("wanda"),
            "approve",
        )
        return graph, config, proposal["operation_key"]


def resume_together(runs: list[tuple[Any, dict[str, Any], str]]) -> list[str]:
    """Resume the approved runs in threads released together; each run's tool status."""
    start = threading.Barrier(len(runs), timeout=WINDOW_TIMEOUT_S)
    statuses: list[str] = [""] * len(runs)
    errors: list[BaseException] = []

    def resume(index: int) -> None:
        graph, config, _ = runs[index]
        try:
            start.wait()
            final = graph.invoke(Command(resume={"wake": True}), config, context=Context())
            (message,) = tool_messages(final)
            statuses[index] = json.loads(str(message.content))["status"]
        except BaseException as exc:  # reported below, never swallowed
            errors.append(exc)

    threads = [threading.Thread(target=resume, args=(i,)) for i in range(len(runs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WINDOW_TIMEOUT_S * 2)
    assert not errors, errors
    return statuses


def rows(store: Store, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    with store.transaction(write=False) as tx:
        return tx.execute(sql, params)


def on_hand(store: Store) -> int:
    (row,) = rows(store, "SELECT on_hand FROM sor_inventory WHERE tenant_id = 'acme' AND sku = 'SKU-7'")
    return int(row["on_hand"])


class FirstWaitsForARefusal:
    """The first update handler to start waits, inside the tool, until some delivery has been
    refused the SKU's lease: the two deliveries overlap for certain. Counts handler calls."""

    def __init__(self, stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch) -> None:
        self.refused = threading.Event()
        self.calls: list[int] = []
        self._lock = threading.Lock()
        for store in stores:
            claim = store.operations.claim  # takes the resource leases in its own transaction

            def watched(*args: Any, _claim: Any = claim, **kwargs: Any) -> Any:
                try:
                    return _claim(*args, **kwargs)
                except ResourcesBusy:
                    self.refused.set()
                    raise

            monkeypatch.setattr(store.operations, "claim", watched)

    def reset(self) -> None:
        self.refused.clear()

    def wrap(self, spec: ToolSpec) -> ToolSpec:
        inner = spec.handler

        def handler(args: Any, ctx: HandlerContext) -> Any:
            with self._lock:
                self.calls.append(args.delta)
                first = len(self.calls) % 2 == 1
            if first:
                assert self.refused.wait(WINDOW_TIMEOUT_S), "the other delivery never asked for the lease"
            return inner(args, ctx)

        return replace(spec, handler=handler)


def test_two_threads_updating_one_sku_at_once_never_lose_an_update(
    two_stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = FirstWaitsForARefusal(two_stores, monkeypatch)
    sides = [Side(store, gate.wrap, conflict=True) for store in two_stores]
    store = two_stores[0]
    for rep in range(REPETITIONS):
        gate.reset()
        runs = [sides[0].approved_run(f"r{rep}-a", 2), sides[1].approved_run(f"r{rep}-b", 3)]
        assert resume_together(runs) == ["completed", "completed"]
        assert gate.refused.is_set()  # the second delivery really came while the first one ran
        assert on_hand(store) == START + 5 * (rep + 1), f"repetition {rep}: an update was lost"
        assert len(gate.calls) == 2 * (rep + 1)  # each handler exactly once
        keys = [key for _, _, key in runs]
        ops = [store.operations.get(key) for key in keys]
        assert [(op.status, op.attempts) for op in ops if op] == [("succeeded", 1)] * 2
        adjustments = rows(
            store,
            "SELECT on_hand_before, on_hand_after FROM sor_inventory_adjustments ORDER BY on_hand_before"
            " LIMIT 2 OFFSET ?",
            (2 * rep,),
        )
        # the later update read the earlier one's write
        assert adjustments[0]["on_hand_after"] == adjustments[1]["on_hand_before"]
        started = [
            e for e in store.audit.events() if e.event == "handler.started" and e.operation_key in keys
        ]
        assert len(started) == 2
        assert [e for e in store.audit.events() if e.event == "operation.deferred"] == []
        assert rows(store, "SELECT * FROM resource_leases") == []  # every lease given back
    assert len(rows(store, "SELECT * FROM sor_inventory_adjustments WHERE sku = 'SKU-7'")) == 2 * REPETITIONS


def test_without_the_lease_the_same_threads_lose_an_update_every_time(
    two_stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    window = ReadWriteWindow(meet=2)  # both adjustments read before either writes: the race, forced
    sides = [Side(store, window.wrap, conflict=False) for store in two_stores]
    for side in sides:
        window.install(monkeypatch, side.services.inventory)
    store = two_stores[0]
    expected_if_right = START
    for rep in range(REPETITIONS):
        before = on_hand(store)
        runs = [sides[0].approved_run(f"r{rep}-a", 2), sides[1].approved_run(f"r{rep}-b", 3)]
        assert resume_together(runs) == ["completed", "completed"]  # both "succeeded" ...
        expected_if_right += 5
        assert on_hand(store) in (before + 2, before + 3)  # ... yet one of the two changes is lost
        reads = rows(
            store,
            "SELECT on_hand_before FROM sor_inventory_adjustments ORDER BY created_at LIMIT 2 OFFSET ?",
            (2 * rep,),
        )
        assert [r["on_hand_before"] for r in reads] == [before, before]
    assert len(window.events) == 6 * REPETITIONS  # start, read, end of each handler call
    assert on_hand(store) < expected_if_right


def counting(calls: list[int], gate: threading.Event | None = None) -> Callable[[ToolSpec], ToolSpec]:
    """Wraps the update handler to record each call's delta (and, with ``gate``, to wait for it)."""

    def wrap(spec: ToolSpec) -> ToolSpec:
        inner = spec.handler

        def handler(args: Any, ctx: HandlerContext) -> Any:
            calls.append(args.delta)
            if gate is not None:
                assert gate.wait(WINDOW_TIMEOUT_S), "never let go"
            return inner(args, ctx)

        return replace(spec, handler=handler)

    return wrap


def sku_lease(side: Side, tenant_id: str = "acme") -> tuple[str, ...]:
    return resource_keys(side.registry.tools["update_inventory"], tenant_id, {"sku": "SKU-7"})


def deferred_codes(store: Store, operation_key: str) -> list[tuple[str, str | None]]:
    return [
        (e.result, e.code)
        for e in store.audit.events(operation_key=operation_key)
        if e.event == "operation.deferred"
    ]


def test_a_resource_still_busy_after_the_wait_is_refused_stably_and_audited_and_runs_later(
    two_stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, other_process = two_stores
    calls: list[int] = []
    side = Side(store, counting(calls), conflict=True)
    _, _, key = side.approved_run("busy", 4)
    assert other_process.leases.acquire(sku_lease(side), "other-process-holder", 30)
    executor = side.gateway(ScriptedChatModel(responses=[])).executor

    refused = executor.deliver(key, worker_id="w1", wait_s=0)
    assert (refused.status, refused.claim, refused.duplicate) == ("approved", "NOT_ATTEMPTED", False)
    assert refused.error is not None
    assert (refused.error["kind"], refused.error["retryable"]) == ("resource_busy", True)
    assert calls == [] and on_hand(store) == START
    op = store.operations.get(key)
    assert op is not None and (op.status, op.attempts, op.owner) == ("approved", 0, None)
    assert deferred_codes(store, key) == [("refused", "resource_busy")]
    assert [r["holder"] for r in rows(store, "SELECT holder FROM resource_leases")] == [
        "other-process-holder"
    ]

    # the other holder died without releasing: its lease lapses by the store's clock, not ours
    shift_store_clock(monkeypatch, store, timedelta(seconds=31))
    done = executor.deliver(key, worker_id="w1", wait_s=0)
    assert (done.status, done.claim) == ("succeeded", "ACQUIRED")
    assert calls == [4] and on_hand(store) == START + 4
    assert deferred_codes(store, key) == [("refused", "resource_busy")]  # nothing new
    assert rows(store, "SELECT * FROM resource_leases") == []


def test_the_lease_is_per_tenant_and_resource_and_taken_from_the_stored_proposal(
    two_stores: tuple[Store, Store],
) -> None:
    store, _ = two_stores
    side = Side(store, lambda spec: spec, conflict=True)
    acme, globex = sku_lease(side), sku_lease(side, "globex")
    assert acme == ('["acme","sku","SKU-7"]',) and acme != globex
    # another tenant's lease on the same SKU name does not block acme's write
    assert store.leases.acquire(globex, "globex-holder", 30)
    _, _, key = side.approved_run("tenants", 1)
    done = side.gateway(ScriptedChatModel(responses=[])).executor.deliver(key, worker_id="w1", wait_s=0)
    assert done.status == "succeeded" and on_hand(store) == START + 1
    assert [r["holder"] for r in rows(store, "SELECT holder FROM resource_leases")] == ["globex-holder"]


def test_concurrent_duplicate_deliveries_of_one_update_run_it_once_and_leave_no_lease(
    two_stores: tuple[Store, Store],
) -> None:
    calls: list[int] = []
    sides = [Side(store, counting(calls), conflict=True) for store in two_stores]
    _, _, key = sides[0].approved_run("dupes", 5)
    executors = [side.gateway(ScriptedChatModel(responses=[])).executor for side in sides]
    start = threading.Barrier(6, timeout=WINDOW_TIMEOUT_S)

    def deliver(i: int) -> Any:
        start.wait()
        return executors[i % 2].deliver(key, worker_id=f"w{i}")

    with ThreadPoolExecutor(max_workers=6) as pool:
        deliveries = list(pool.map(deliver, range(6)))
    assert calls == [5]
    assert sorted(d.claim for d in deliveries).count("ACQUIRED") == 1
    assert {d.status for d in deliveries} == {"succeeded"}
    assert on_hand(two_stores[0]) == START + 5
    assert rows(two_stores[0], "SELECT * FROM resource_leases") == []


def test_a_handler_past_its_timeout_keeps_the_lease_until_its_thread_ends(
    two_stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = two_stores
    calls: list[int] = []
    let_go, released = threading.Event(), threading.Event()
    side = Side(store, counting(calls, let_go), conflict=True)
    spec = side.registry.tools["update_inventory"]
    side.registry = replace(
        side.registry, tools={**side.registry.tools, spec.name: replace(spec, timeout_s=0.2)}
    )
    release = store.leases.release

    def watched(keys: Any, holder: str) -> int:
        count = release(keys, holder)
        if count:
            released.set()
        return count

    monkeypatch.setattr(store.leases, "release", watched)
    _, _, slow = side.approved_run("slow", 2)
    _, _, next_one = side.approved_run("next", 3)
    executor = side.gateway(ScriptedChatModel(responses=[])).executor

    timed_out = executor.deliver(slow, worker_id="w1", wait_s=0)
    assert timed_out.status == "unknown"  # the effect may still happen: the SKU stays leased
    assert not released.is_set() and len(rows(store, "SELECT * FROM resource_leases")) == 1
    busy = executor.deliver(next_one, worker_id="w2", wait_s=0)
    assert busy.error is not None and busy.error["kind"] == "resource_busy" and calls == [2]

    let_go.set()  # the overrunning handler ends: its late success is recorded, then the lease freed
    assert released.wait(WINDOW_TIMEOUT_S)
    assert rows(store, "SELECT * FROM resource_leases") == []
    op = store.operations.get(slow)
    assert op is not None and op.status == "succeeded"
    done = executor.deliver(next_one, worker_id="w2", wait_s=0)
    assert done.status == "succeeded" and calls == [2, 3]
    assert on_hand(store) == START + 5
