"""Per-handler concurrency caps (issue 32; the chapter's ``max_concurrency``): at most
``ToolSpec.max_concurrency`` calls of one handler run at once; a call that finds every slot taken
waits briefly and is refused ``handler_busy`` before its handler runs (a write is not claimed and
stays approved). Real threads, started together at a barrier; handlers block on events, so the
interleaving never depends on timing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from support import Harness, audit_events, principal

from toolgate.errors import RegistryError, ToolExecutionError
from toolgate.graph.delivery.executor import Executor
from toolgate.policy.handler_slots import HandlerBusy, HandlerSlots
from toolgate.policy.retry import ReadRetry
from toolgate.store import Store
from toolgate.tools import Registry
from toolgate.tools.spec import inventory_text, manifest_fields

CALLERS = 6
CAP = 2


class Blocking:
    """A handler wrapper that counts how many calls run at once and holds each until released."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.calls = 0
        self.release = threading.Event()

    def __call__(self, args: Any, ctx: Any) -> Any:
        with self.lock:
            self.calls += 1
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            assert self.release.wait(60), "the test never released the handler"
            return self.handler(args, ctx)
        finally:
            with self.lock:
                self.running -= 1


def _until(check: Any, what: str) -> None:
    """Wait (bounded) for a condition another thread brings about."""
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_at_most_max_concurrency_reads_run_at_once_and_the_rest_are_refused(store: Store) -> None:
    harness = Harness(store)
    status = harness.registry.tools["get_service_status"]
    blocking = Blocking(status.handler)
    capped = replace(status, handler=blocking, max_concurrency=CAP, timeout_s=60)
    slots = HandlerSlots(wait_s=0.05)
    executor = replace(harness.gateway().executor, handler_slots=slots)
    barrier = threading.Barrier(CALLERS)
    outcomes: list[str] = []
    done = threading.Condition()

    def call() -> None:
        barrier.wait()
        try:
            executor.run_read(capped, {"service_alias": "web"}, principal("omar"))
            outcome = "ran"
        except ToolExecutionError as exc:
            outcome = exc.kind
        with done:
            outcomes.append(outcome)
            done.notify_all()

    threads = [threading.Thread(target=call) for _ in range(CALLERS)]
    for thread in threads:
        thread.start()
    with done:  # the excess callers are refused while the first CAP are still inside the handler
        assert done.wait_for(lambda: len(outcomes) == CALLERS - CAP, timeout=60)
    assert blocking.running == CAP and slots.running(capped.name) == CAP
    blocking.release.set()
    for thread in threads:
        thread.join(60)
    assert sorted(outcomes) == ["handler_busy"] * (CALLERS - CAP) + ["ran"] * CAP
    assert blocking.most == CAP and blocking.calls == CAP  # a refused call never reached the handler
    _until(lambda: slots.running(capped.name) == 0, "every slot given back")
    assert slots.refused[capped.name] == CALLERS - CAP


def test_a_read_past_its_timeout_keeps_its_slot_until_its_handler_finishes(store: Store) -> None:
    harness = Harness(store)
    status = harness.registry.tools["get_service_status"]
    blocking = Blocking(status.handler)
    capped = replace(status, handler=blocking, max_concurrency=1, timeout_s=0.2)
    slots = HandlerSlots(wait_s=0.05)
    executor = replace(
        harness.gateway().executor, handler_slots=slots, read_retry=ReadRetry(sleep=lambda _: None)
    )
    with pytest.raises(HandlerBusy):  # timed out, retried: the overrunning handler still holds the slot
        executor.run_read(capped, {"service_alias": "web"}, principal("omar"))
    assert blocking.calls == 1 and slots.running(capped.name) == 1
    blocking.release.set()
    _until(lambda: slots.running(capped.name) == 0, "the slot given back when the handler finished")
    executor.run_read(capped, {"service_alias": "web"}, principal("omar"))
    assert blocking.calls == 2


def test_a_write_finding_its_handler_full_is_not_claimed_and_stays_approved(store: Store) -> None:
    harness = Harness(store)
    refund = harness.registry.tools["issue_refund"]
    blocking = Blocking(refund.handler)
    capped = replace(refund, handler=blocking, max_concurrency=1)
    specs = [capped if s.name == refund.name else s for s in harness.registry.tools.values()]
    registry = Registry.of(harness.registry.release, specs, harness.system)
    first, gateway = harness.approved_refund(registry, "t-cap-1")
    second, _ = harness.approved_refund(registry, "t-cap-2")
    slots = HandlerSlots(wait_s=0.05)
    executor: Executor = replace(gateway.executor, handler_slots=slots)
    running = threading.Thread(
        target=executor.deliver, args=(first["operation_key"],), kwargs={"worker_id": "w1"}
    )
    running.start()
    _until(lambda: blocking.running == 1, "the first refund inside its handler")
    busy = executor.deliver(second["operation_key"], worker_id="w2")
    assert busy.status == "approved" and busy.claim == "NOT_ATTEMPTED"
    assert (busy.error or {}).get("kind") == "handler_busy" and (busy.error or {}).get("retryable") is True
    assert [e.code for e in audit_events(store, "operation.deferred")] == ["handler_busy"]
    blocking.release.set()
    running.join(60)
    assert blocking.most == 1 and blocking.calls == 1
    later = executor.deliver(second["operation_key"], worker_id="w2")  # its slot free: claimed now
    # (the order is refunded already, so this second refund of it fails in its handler: it ran)
    assert later.status in ("succeeded", "failed") and blocking.calls == 2
    assert slots.running(refund.name) == 0


def test_a_cap_below_one_does_not_load(store: Store) -> None:
    spec = Harness(store).registry.tools["get_service_status"]
    for bad in (0, -1, True):
        with pytest.raises(RegistryError, match="max_concurrency"):
            replace(spec, max_concurrency=bad)
    capped = replace(spec, max_concurrency=4)
    assert manifest_fields(capped)["max_concurrency"] == 4 and "max_concurrency" not in manifest_fields(spec)
    assert " max_concurrency=4" in inventory_text(capped)  # the registry audit's inventory line
