"""Conflict keys through the gateway: same-SKU calls are partitioned and the count is right; the same
harness without the conflict key reproduces the lost update. Independent calls run concurrently,
every call gets its own result, and a batch past its deadline is reported as partial.

Interleavings are forced or observed with barriers and recorded events (`ReadWriteWindow`), never
with sleeps: the lost update is reproduced on every run, not when the scheduler happens to allow it."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from support import TEST_KEY, principal, tool_messages
from test_demo_tools import (
    SERIALIZED_EVENTS,
    WINDOW_TIMEOUT_S,
    ReadWriteWindow,
    assert_both_read_before_either_wrote,
)

from toolgate.graph import Context
from toolgate.graph.bootstrap import initialize_store
from toolgate.graph.review.decisions import decide
from toolgate.policy.identities import IdentityDirectory
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry, ResourceRef
from toolgate.tools.demo import WIDE_RELEASE, DemoServices, DemoSystem, build_wide_registry
from toolgate.tools.demo.identities import seed_demo_identities
from toolgate.tools.demo.release import DEMO_RELEASES


class Wide:
    """The wider demo release on one store (``latency_s``: the inventory service's read-write gap)."""

    def __init__(self, path: Path, *, conflict_key: bool = True, latency_s: float = 0.0) -> None:
        self.store = SQLiteStore(path, key=TEST_KEY)
        initialize_store(self.store, DEMO_RELEASES["ops-tools/1.1.0"])
        seed_demo_identities(IdentityDirectory(self.store))
        self.services = DemoServices.on(self.store, secret=b"test-secret")
        self.services.inventory.latency_s = latency_s
        registry = build_wide_registry(DemoSystem(self.store), self.services)
        if not conflict_key:
            spec = registry.tools["update_inventory"]
            assert spec.resource is not None
            unprotected = replace(spec, resource=ResourceRef(kind="sku", argument="sku", conflict=False))
            registry = Registry.of(
                WIDE_RELEASE,
                [*(s for s in registry.tools.values() if s.name != spec.name), unprotected],
                registry.resolver,
            )
        self.registry = registry
        self.policy = DEMO_RELEASES[WIDE_RELEASE].policy

    def graph(self, model: ScriptedChatModel) -> Any:
        return open_test_app(
            model=model,
            tools=self.registry,
            policy=self.policy,
            store=self.store,
            start=False,
            checkpointer=InMemorySaver(),
        ).compiled()

    def on_hand(self, sku: str = "SKU-7") -> int:
        with self.store.transaction(write=False) as tx:
            row = tx.one("SELECT on_hand FROM sor_inventory WHERE tenant_id = 'acme' AND sku = ?", (sku,))
        assert row is not None
        return int(row["on_hand"])

    def read_before_each_adjustment(self) -> dict[int, int]:
        """``on_hand`` each SKU-7 adjustment read before writing, by its delta."""
        with self.store.transaction(write=False) as tx:
            rows = tx.execute(
                "SELECT delta, on_hand_before FROM sor_inventory_adjustments WHERE sku = 'SKU-7'"
            )
        return {int(r["delta"]): int(r["on_hand_before"]) for r in rows}

    def watch_adjustments(self, monkeypatch: pytest.MonkeyPatch, *, meet: int = 1) -> ReadWriteWindow:
        """Route ``update_inventory`` through a `ReadWriteWindow` (``meet=2``: force the race)."""
        window = ReadWriteWindow(meet=meet)
        window.install(monkeypatch, self.services.inventory)
        watched = window.wrap(self.registry.tools["update_inventory"])
        self.registry = replace(self.registry, tools={**self.registry.tools, "update_inventory": watched})
        return window


def two_same_sku_adjustments(wide: Wide) -> int:
    calls = [
        tool_call("update_inventory", {"sku": "SKU-7", "delta": -2, "reason": "shipped"}, "bin_a"),
        tool_call("update_inventory", {"sku": "SKU-7", "delta": -3, "reason": "shipped"}, "bin_b"),
    ]
    graph = wide.graph(ScriptedChatModel(responses=[ai("", *calls), ai("moved")]))
    config: Any = {"configurable": {"thread_id": "t-sku"}}
    first = graph.invoke(
        {"messages": [("user", "move 2 to bin A and 3 to bin B")]},
        config,
        context=Context(principal=principal("lee")),
    )
    gw = open_test_app(
        model=ScriptedChatModel(responses=[]),
        tools=wide.registry,
        policy=wide.policy,
        store=wide.store,
        start=False,
    ).gateway
    for proposal in first["__interrupt__"][0].value["toolgate"]["proposals"]:
        decide(gw, proposal["proposal_id"], principal("wanda"), "approve")
    final = graph.invoke(Command(resume={"wake": True}), config, context=Context())
    statuses = [json.loads(str(m.content))["status"] for m in tool_messages(final)]
    assert statuses == ["completed", "completed"]
    return wide.on_hand()


def test_same_sku_calls_run_in_order_and_the_count_is_right(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wide = Wide(tmp_path / "protected.sqlite")
    window = wide.watch_adjustments(monkeypatch)
    assert two_same_sku_adjustments(wide) == 5
    assert window.events == SERIALIZED_EVENTS  # the second call started after the first ended
    assert wide.read_before_each_adjustment() == {-2: 10, -3: 8}  # ... and read its write


def test_without_the_conflict_key_the_same_harness_loses_an_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wide = Wide(tmp_path / "unprotected.sqlite", conflict_key=False)
    window = wide.watch_adjustments(monkeypatch, meet=2)  # both calls read, then both write
    assert two_same_sku_adjustments(wide) in (7, 8)  # 10 - 2 - 3 would be 5: one change is lost
    assert_both_read_before_either_wrote(window.events)
    assert wide.read_before_each_adjustment() == {-2: 10, -3: 10}


def test_independent_reads_run_concurrently_and_each_gets_its_result(tmp_path: Path) -> None:
    wide = Wide(tmp_path / "reads.sqlite")
    active, peak, lock = [0], [0], threading.Lock()
    both_running = threading.Barrier(2, timeout=WINDOW_TIMEOUT_S)  # broken (call fails) if run one by one
    spec = wide.registry.tools["get_inventory"]

    def together(args: Any, ctx: Any) -> Any:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        both_running.wait()  # returns only once the other read is running too
        with lock:
            active[0] -= 1
        return spec.handler(args, ctx)

    wide.registry = replace(
        wide.registry, tools={**wide.registry.tools, spec.name: replace(spec, handler=together)}
    )
    calls = [tool_call("get_inventory", {"sku": "SKU-7"}, f"r{i}") for i in range(2)]
    calls.append(tool_call("lookup_order", {"order_id": "O-7001"}, "bad"))
    state = wide.graph(ScriptedChatModel(responses=[ai("", *calls), ai("ok")])).invoke(
        {"messages": [("user", "stock?")]},
        {"configurable": {"thread_id": "t-par"}},
        context=Context(principal=principal("lee")),
    )
    results = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}
    assert results["r0"]["status"] == results["r1"]["status"] == "completed"
    assert results["bad"]["status"] == "rejected"
    assert [m.tool_call_id for m in tool_messages(state)] == ["bad", "r0", "r1"]
    assert peak[0] == 2


@pytest.mark.parametrize("deadline", [5.0])
def test_a_batch_past_its_deadline_is_reported_partial(tmp_path: Path, deadline: float) -> None:
    # the slow call is held until the batch has answered, so it is past the deadline by construction
    # (its own timeout is far longer than the deadline, so it cannot end first as a timeout); the
    # deadline only has to be long enough for the quick call on a loaded machine
    wide = Wide(tmp_path / "deadline.sqlite")
    spec = wide.registry.tools["get_inventory"]
    release = threading.Event()

    def stuck(args: Any, ctx: Any) -> Any:
        assert release.wait(60), "never released"
        return spec.handler(args, ctx)

    wide.registry = replace(
        wide.registry, tools={**wide.registry.tools, spec.name: replace(spec, handler=stuck, timeout_s=60)}
    )
    calls = [
        tool_call("get_inventory", {"sku": "SKU-7"}, "slow"),
        tool_call("lookup_order", {"order_id": "O-5512"}, "fast"),
    ]
    state = wide.graph(ScriptedChatModel(responses=[ai("", *calls), ai("partial")])).invoke(
        {"messages": [("user", "both")]},
        {"configurable": {"thread_id": "t-deadline"}},
        context=Context(principal=principal("lee"), batch_deadline_s=deadline),
    )
    release.set()
    results = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}
    assert results["fast"]["status"] == "completed"
    assert results["slow"]["status"] == "in_progress" and results["slow"]["batch"]["partial"] is True
    assert state["outcomes"]["slow"]["status"] == "in_progress"
