"""A thread's release pin is read from the store once per graph run, not once per node.

Through the real routed graph on both backends: every routed node of a run follows the pin the
run read first (or recorded on its first model turn); the next run reads the store again, so a
migration or an edited row between runs is seen at once, and one landing mid-run is seen by the
thread's next run. Concurrent runs of different threads each read their own pin.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langgraph.runtime import Runtime
from pydantic import PrivateAttr
from release_control_support import CANDIDATE as B
from release_control_support import CONTROL as A
from release_control_support import TwoReleases, audit_events, run, text

from toolgate.store.base import Store
from toolgate.store.thread_releases import ThreadReleases
from toolgate.testing import ScriptedChatModel, ai, tool_call

STATUS = {"service_alias": "web"}
GONE = "ops-tools/9.9.9"


class HookedModel(ScriptedChatModel):
    """A scripted model that first runs the next queued hook (None: no hook) on each request."""

    _hooks: list[Callable[[], None] | None] = PrivateAttr(default_factory=list)

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        hook = self._hooks.pop(0) if self._hooks else None
        if hook is not None:
            hook()
        return super()._generate(messages, stop, run_manager, **kwargs)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Store reads of each thread's pin (`ThreadReleases.get`), by thread id."""
    counted: Counter[str] = Counter()
    lock = threading.Lock()
    original = ThreadReleases.get

    def get(self: ThreadReleases, thread_id: str) -> Any:
        with lock:
            counted[thread_id] += 1
        return original(self, thread_id)

    monkeypatch.setattr(ThreadReleases, "get", get)
    return counted


def test_one_pin_read_per_run_and_the_next_run_reads_again(
    store: Store, tmp_path: Path, reads: Counter[str]
) -> None:
    model_a = HookedModel(
        responses=[
            ai("", tool_call("get_service_status", STATUS, "c1")),
            text("web is up"),
            ai("", tool_call("get_service_status", STATUS, "c2")),
            text("still up"),
        ]
    )
    two = TwoReleases(store, tmp_path, models={A: model_a})
    graph = two.graph()

    state = run(graph, "is web up?", "sam", "t-reads")  # model, dispatch, execute, model: one read
    assert state["status"] == "done" and state["release"] == A
    assert reads["t-reads"] == 1 and len(model_a.requests) == 2 and two.handler_calls(A) == 1

    state = run(graph, "and now?", "sam", "t-reads")  # a new run reads the store again
    assert state["status"] == "done" and reads["t-reads"] == 2 and two.handler_calls(A) == 2

    ThreadReleases(store).migrate("t-reads", GONE, by="ivy", expect_version=1)  # between runs
    reads.clear()
    state = run(graph, "once more?", "sam", "t-reads")
    assert state["status"] == "needs_review" and state["status_reason"].startswith("release_unavailable")
    assert reads["t-reads"] == 1 and len(model_a.requests) == 4  # no model ran for it
    [stopped] = audit_events(store, "release.thread_stopped")
    assert (stopped.code, stopped.detail["pinned"]) == ("release_unavailable", GONE)


def test_a_migration_mid_run_is_followed_by_the_threads_next_run(
    store: Store, tmp_path: Path, reads: Counter[str]
) -> None:
    model_a = HookedModel(
        responses=[text("web is up"), ai("", tool_call("get_service_status", STATUS)), text("up")]
    )
    two = TwoReleases(store, tmp_path, models={A: model_a})
    graph = two.graph()
    assert run(graph, "is web up?", "sam", "t-mid")["release"] == A
    pins = ThreadReleases(store)
    model_a._hooks.append(lambda: pins.migrate("t-mid", GONE, by="ivy", expect_version=1))

    state = run(graph, "check again", "sam", "t-mid")  # migrated during its first model request

    assert state["status"] == "done" and state["release"] == A  # the run finished as it began
    assert two.handler_calls(A) == 1 and reads["t-mid"] == 2  # one read for each run
    state = run(graph, "and now?", "sam", "t-mid")
    assert state["status"] == "needs_review" and state["status_reason"].startswith("release_unavailable")
    assert len(model_a.requests) == 3 and reads["t-mid"] == 3


def test_concurrent_runs_of_two_threads_each_follow_their_own_pin(
    store: Store, tmp_path: Path, reads: Counter[str]
) -> None:
    model_a = HookedModel(responses=[text("A answers x"), text("A answers y")])
    model_b = HookedModel(responses=[text("B answers y")])
    two = TwoReleases(store, tmp_path, models={A: model_a, B: model_b})
    graph = two.graph()
    assert run(graph, "hello", "sam", "t-y")["release"] == A
    ThreadReleases(store).migrate("t-y", B, by="ivy", expect_version=1)
    both = threading.Barrier(2)
    model_a._hooks.append(lambda: both.wait(timeout=60))  # each run waits inside its model request
    model_b._hooks.append(lambda: both.wait(timeout=60))  # until the other run is there too
    results: dict[str, dict[str, Any]] = {}

    def start(thread: str) -> None:
        results[thread] = run(graph, "hello again", "sam", thread)

    workers = [threading.Thread(target=start, args=(t,)) for t in ("t-x", "t-y")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)

    assert (results["t-x"]["status"], results["t-x"]["release"]) == ("done", A)
    assert (results["t-y"]["status"], results["t-y"]["release"]) == ("done", B)
    assert len(model_a.requests) == 2 and len(model_b.requests) == 1
    assert reads["t-x"] == 1 and reads["t-y"] == 2  # t-y: its first run, then this one


def test_a_runtime_without_a_run_control_reads_the_store_every_time(store: Store, tmp_path: Path) -> None:
    two = TwoReleases(store, tmp_path)
    pins = ThreadReleases(store)
    pinning = two.router.pins
    two.router.state()  # the release-control tables exist
    pins.pin("t-plain", A, tenant_id="acme")
    plain = Runtime(context=None)
    assert pinning.pin_of_run("t-plain", plain) == pins.get("t-plain")
    pins.migrate("t-plain", B, by="ivy", expect_version=1)
    found = pinning.pin_of_run("t-plain", plain)
    assert found is not None and found.release == B
