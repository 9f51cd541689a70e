"""A read's ownership lookups at execute travel with its handler: one hop to loaded code for both
(issue 31, item 2), each still under its own deadline and with its own failure code. A lookup
that refuses, raises or hangs at execute answers that read alone as the execute checkpoint's
refusal did (``not_owner``, ``resolver_failed``, audited ``call.rejected`` at stage ``execute``
with the read's ``call.accepted``); its handler never starts, and a hung lookup holds no handler
slot and no breaker verdict."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from support import Harness, start, tool_messages

from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools import Registry, loaded_code

ORDER = {"order_id": "O-5512"}


class OwnerCheck:
    """The demo's owner check of orders, with what each of its calls does next (``answers``:
    ``"real"``, another status, ``"raise"`` or ``"hang"``) and the threads it ran on."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.threads: list[int] = []
        self.release = threading.Event()
        self.hanging = threading.Event()

    def around(self, owner: Any) -> Any:
        def check(resource_id: str, ctx: Any) -> Any:
            self.threads.append(threading.get_ident())
            answer = self.answers.pop(0) if self.answers else "real"
            if answer == "raise":
                raise RuntimeError("ownership database down")
            if answer == "hang":
                self.hanging.set()
                self.release.wait(30)
                return owner(resource_id, ctx)
            return owner(resource_id, ctx) if answer == "real" else answer

        return check


def world(
    tmp_path: Any, answers: list[str], *, max_concurrency: int | None = None
) -> tuple[Harness, OwnerCheck, list[int]]:
    """A harness whose ``lookup_order`` asks ``OwnerCheck`` and records its handler's threads."""
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    owner = OwnerCheck(answers)
    handler_threads: list[int] = []

    def changed(spec: Any) -> Any:
        if spec.name != "lookup_order":
            return spec
        handler = spec.handler

        def recorded(args: Any, ctx: Any) -> Any:
            handler_threads.append(threading.get_ident())
            return handler(args, ctx)

        resource = replace(spec.resource, owner=owner.around(spec.resource.owner))
        return replace(spec, resource=resource, handler=recorded, max_concurrency=max_concurrency)

    specs = [changed(s) for s in harness.registry.tools.values()]
    harness.registry = Registry.of(harness.registry.release, specs, harness.system)
    return harness, owner, handler_threads


def read_once(harness: Harness, thread: str) -> tuple[dict[str, Any], dict[str, Any]]:
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", ORDER, "c1")), ai("done")])
    state = start(harness.graph(model), "where is my order?", "cust-ada", thread)
    (message,) = tool_messages(state)
    return json.loads(str(message.content)), state


def rejected(harness: Harness, thread: str) -> list[tuple[str | None, Any]]:
    return [
        (e.code, e.detail.get("stage"))
        for e in harness.store.audit.events()
        if e.thread_id == thread and e.event == "call.rejected"
    ]


def events(harness: Harness, thread: str) -> list[str]:
    return [e.event for e in harness.store.audit.events() if e.thread_id == thread]


def test_the_execute_lookup_and_the_handler_run_in_one_hop(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness, owner, handler_threads = world(tmp_path, [])
    hops: list[int] = []
    worker = loaded_code._POOL.worker

    def counted() -> Any:
        hops.append(1)
        return worker()

    monkeypatch.setattr(loaded_code._POOL, "worker", counted)
    answer, state = read_once(harness, "t-one-hop")

    assert state["status"] == "done" and "O-5512" in json.dumps(answer)
    assert harness.handler_calls["lookup_order"] == 1
    # asked at dispatch (a hop of its own), then again at execute on the very thread the handler
    # then ran on, handed over with it: two hops to loaded code in all, not three
    assert len(owner.threads) == 2 and handler_threads == [owner.threads[1]]
    assert len(hops) == 2
    assert events(harness, "t-one-hop").count("call.completed") == 1


def test_an_order_changing_hands_before_execute_refuses_the_read_there(tmp_path: Any) -> None:
    harness, _, _ = world(tmp_path, ["real", "not_owner"])
    answer, state = read_once(harness, "t-changed")

    assert answer["error"] == "not_owner" and answer["retryable"] is False
    assert state["status"] == "done" and harness.handler_calls.get("lookup_order", 0) == 0
    assert rejected(harness, "t-changed") == [("not_owner", "execute")]
    trail = events(harness, "t-changed")
    assert "call.accepted" in trail and "call.completed" not in trail and "call.failed" not in trail
    # no verdict on the dependency: its breaker saw no call
    breaker = harness.gateway().executor.breakers.get(harness.registry.breaker_key("lookup_order", "acme"))
    assert breaker.snapshot()["consecutive_failures"] == 0


def test_a_lookup_that_raises_at_execute_fails_closed(tmp_path: Any) -> None:
    harness, _, _ = world(tmp_path, ["real", "raise"])
    answer, _ = read_once(harness, "t-raises")

    assert answer["error"] == "resolver_failed" and answer["retryable"] is True
    assert "ownership database down" not in json.dumps(answer)
    assert harness.handler_calls.get("lookup_order", 0) == 0
    assert rejected(harness, "t-raises") == [("resolver_failed", "execute")]


def test_a_lookup_that_hangs_at_execute_is_refused_by_its_own_deadline_and_holds_no_slot(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loaded_code, "LOOKUP_TIMEOUT_S", 0.3)
    harness, owner, handler_threads = world(tmp_path, ["real", "hang"], max_concurrency=1)
    try:
        answer, _ = read_once(harness, "t-hangs")
        assert owner.hanging.is_set()
        assert answer["error"] == "resolver_failed"
        assert rejected(harness, "t-hangs") == [("resolver_failed", "execute")]
        # the lookup still hangs on its worker; the read's one handler slot is free all the same
        again, _ = read_once(harness, "t-after")
        assert "O-5512" in json.dumps(again) and again.get("error") is None
    finally:
        owner.release.set()
    assert harness.handler_calls["lookup_order"] == 1  # the second read's only: the first never ran
    assert len(handler_threads) == 1


def test_the_handler_keeps_its_own_deadline_behind_a_lookup(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler that overruns its timeout is answered by its own deadline, not the lookup's
    (the caller sleeps once for both; a handler starting later ends its time no sooner)."""
    monkeypatch.setattr(loaded_code, "LOOKUP_TIMEOUT_S", 60.0)
    release = threading.Event()
    ran: list[int] = []

    def owner() -> str:
        return "owned"

    def handler(n: int) -> int:
        ran.append(n)
        release.wait(30)
        return n

    started = time.monotonic()
    checked, future = loaded_code.start_checked([owner], lambda i, v: v == "owned", handler, 7)
    try:
        with pytest.raises(TimeoutError):
            loaded_code.wait_checked(checked, future, loaded_code.LOOKUP_TIMEOUT_S, 0.2)
        assert time.monotonic() - started < 30  # the lookup's 60 s never held the answer
        assert ran == [7] and checked.started
    finally:
        release.set()
    assert future.result(timeout=30) == 7


def test_a_lookup_that_refuses_stops_the_worker_before_the_handler() -> None:
    ran: list[int] = []
    checked, future = loaded_code.start_checked(
        [lambda: "owned", lambda: "foreign", lambda: "owned"], lambda i, v: v == "owned", ran.append, 1
    )
    with pytest.raises(loaded_code.NotStarted):
        loaded_code.wait_checked(checked, future, 30.0, 30.0)
    assert ran == [] and not checked.started
    assert [a.result() for a in checked.answers[:2]] == ["owned", "foreign"]
    with pytest.raises(loaded_code.NotStarted):
        checked.answers[2].result()  # never asked


def test_a_lookup_that_raises_a_base_exception_is_its_answer_not_the_process_end() -> None:
    def abort() -> str:
        raise SystemExit(3)

    checked, future = loaded_code.start_checked([abort], lambda i, v: v == "owned", lambda: "ran")
    with pytest.raises(loaded_code.NotStarted):
        loaded_code.wait_checked(checked, future, 30.0, 30.0)
    with pytest.raises(loaded_code.HandlerAborted):
        checked.answers[0].result()
    assert loaded_code.run_with_timeout(lambda: "still serving", 30.0) == "still serving"
