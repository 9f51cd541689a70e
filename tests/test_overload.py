"""Shedding load: excess model requests and tool executions are refused ``overloaded`` quickly, and
nothing is lost.

The model endpoint is a real local HTTP server (the OpenAI Responses replay of
tests/replay_openai.py) that holds every request until the test sets an event: the admitted
requests stay blocked there while the excess ones must already have been refused. Runs are real
threads; every wait is on an event or a semaphore, never a sleep.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import typer
from langchain_core.messages import HumanMessage
from provider_flows import OPENAI, local_harness
from replay_openai import Recorded, ReplayServer, Reply, function_call_item, message_item, response, usage
from support import REFUND_REQUEST, TEST_KEY, Harness, audit_events, principal, start

from toolgate.cli.common import EXIT_OVERLOADED, invoke
from toolgate.graph import Context
from toolgate.policy.admission import Admission, AdmissionLimits, Overloaded, process_admission
from toolgate.policy.ratelimit import InboundRateLimiter
from toolgate.policy.rules import RateLimit, RateLimits
from toolgate.store import PostgresStore, SQLiteStore, Store
from toolgate.testing import open_test_app

harness = local_harness(OPENAI)
WAIT = 60.0
"""Upper bound of every event wait (a failure, not a pace: each wait ends when its event fires)."""
_ids = itertools.count(1)


def _reply(body: dict[str, Any]) -> Reply:
    """A refund proposal for a request about O-5512, else a text answer (fresh ids each time)."""
    n = next(_ids)
    if "O-5512" in json.dumps(body):
        args = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
        item = function_call_item(f"fc_{n:020d}", f"call_overload{n:08d}", "issue_refund", args)
    else:
        item = message_item(f"msg_{n:020d}", "Nothing to do.")
    return response(f"resp_{n:020d}", [item], model="gpt-5-mini", tokens=usage(100, 20))


@dataclass
class SlowModel(ReplayServer):
    """The replay endpoint, slowed: each request is recorded, signalled on ``arrivals``, and held
    until ``gate`` is set."""

    gate: threading.Event = field(default_factory=threading.Event)
    arrivals: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Reply:
        with self.lock:
            self.requests.append(Recorded("POST", path, headers, body))
        self.arrivals.release()
        assert self.gate.wait(WAIT), "the test never released the model"
        return _reply(body)


@pytest.fixture
def slow_model() -> Iterator[SlowModel]:
    with SlowModel(script=[]) as server:
        try:
            yield server
        finally:
            server.gate.set()


def _limits(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for name, value in values.items():
        monkeypatch.setenv(f"TOOLGATE_{name.upper()}", value)


class Run(threading.Thread):
    """One task in its own thread: its final state, or the exception it ended with."""

    def __init__(self, graph: Any, user: str, thread: str) -> None:
        super().__init__(daemon=True)
        self.graph, self.user, self.thread_id = graph, user, thread
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = start(self.graph, REFUND_REQUEST, self.user, self.thread_id)
        except BaseException as exc:
            self.error = exc


def _arrive(server: SlowModel, count: int) -> None:
    for _ in range(count):
        assert server.arrivals.acquire(timeout=WAIT), "an admitted request never reached the model"


def _started(graph: Any, user: str, threads: list[str], held_at: SlowModel | None = None) -> list[Run]:
    """Runs of ``user``'s threads, started together; with ``held_at``, once each reached that model."""
    runs = [Run(graph, user, thread) for thread in threads]
    for run in runs:
        run.start()
    if held_at is not None:
        _arrive(held_at, len(runs))  # each holds its slot, blocked at the model
    return runs


def _retry(graph: Any, user: str, thread: str) -> dict[str, Any]:
    """Continue a thread whose model request was refused: from its last checkpoint."""
    config = {"configurable": {"thread_id": thread}}
    return dict(graph.invoke(None, config, context=Context(principal=principal(user))))


def test_excess_model_requests_are_refused_quickly_and_nothing_is_lost(
    harness: Harness, slow_model: SlowModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    _limits(
        monkeypatch,
        max_concurrent_model_requests="2",
        max_concurrent_model_requests_per_tenant="2",
        admission_wait_s="0.05",
    )
    graph = OPENAI.graph(harness, slow_model)
    admitted = _started(graph, "cust-ada", [f"admitted-{i}" for i in range(2)], held_at=slow_model)
    excess = _started(graph, "cust-ada", [f"excess-{i}" for i in range(3)])
    for run in excess:
        run.join(WAIT)
    # refused while the admitted requests are still held at the model
    assert not slow_model.gate.is_set()
    assert all(not run.is_alive() for run in excess)
    assert all(run.is_alive() for run in admitted)
    assert len(slow_model.requests) == 2
    for run in excess:
        assert isinstance(run.error, Overloaded), run.error
        assert (run.error.code, run.error.kind, run.error.limit) == ("overloaded", "model", 2)
        assert run.error.retry_after_s >= 1.0
        snapshot = graph.get_state({"configurable": {"thread_id": run.thread_id}})
        assert snapshot.next == ("model",)  # the checkpoint before the model call is the thread's
    refusals = audit_events(harness.store, "admission.overloaded")
    assert len(refusals) == 3
    assert {(e.tenant_id, e.code, e.detail["kind"], e.detail["limit"]) for e in refusals} == {
        ("acme", "overloaded", "model", 2)
    }
    assert {e.thread_id for e in refusals} == {run.thread_id for run in excess}
    assert harness.store.proposals.list() == []

    slow_model.gate.set()
    for run in admitted:
        run.join(WAIT)
        assert run.error is None and run.result is not None
        assert run.result["status"] == "awaiting_approval"
    for run in excess[:2]:  # retried once there is room: each continues from its checkpoint
        assert _retry(graph, "cust-ada", run.thread_id)["status"] == "awaiting_approval"
    # as `toolgate run --thread THREAD` sends it again: the turn is retried, the message not doubled
    config = {"configurable": {"thread_id": excess[2].thread_id}}
    message = {"messages": [HumanMessage(REFUND_REQUEST)]}
    woken = invoke(graph, message, config, context=Context(principal=principal("cust-ada")))
    assert [m.content for m in woken["messages"] if isinstance(m, HumanMessage)] == [REFUND_REQUEST]
    assert woken["status"] == "awaiting_approval"

    proposals = harness.store.proposals.list()
    threads = sorted(p.thread_id for p, _ in proposals)
    assert threads == sorted(r.thread_id for r in [*admitted, *excess])  # one each, none lost or doubled
    assert {op.status for _, op in proposals} == {"pending_approval"}
    assert len({op.operation_key for _, op in proposals}) == 5
    assert len(slow_model.requests) == 5
    assert harness.total_handler_calls() == 0
    assert process_admission().in_flight("model") == 0


def test_a_tenant_at_its_limit_does_not_refuse_another_tenant(
    harness: Harness, slow_model: SlowModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    _limits(
        monkeypatch,
        max_concurrent_model_requests="3",
        max_concurrent_model_requests_per_tenant="2",
        admission_wait_s="0.05",
    )
    graph = OPENAI.graph(harness, slow_model)
    acme = _started(graph, "cust-ada", [f"acme-{i}" for i in range(2)], held_at=slow_model)

    (third,) = _started(graph, "cust-bob", ["acme-third"])
    third.join(WAIT)
    assert not third.is_alive() and isinstance(third.error, Overloaded)
    assert (third.error.scope, third.error.limit, third.error.tenant_id) == ("tenant", 2, "acme")

    (globex,) = _started(graph, "cust-gina", ["globex-1"], held_at=slow_model)  # admitted while acme is full
    assert not slow_model.gate.is_set()

    slow_model.gate.set()
    for run in [*acme, globex]:
        run.join(WAIT)
        assert run.error is None, run.error
    assert globex.result is not None  # served (what it asked for is judged as usual)
    refusals = audit_events(harness.store, "admission.overloaded")
    assert [(e.tenant_id, e.detail["scope"]) for e in refusals] == [("acme", "tenant")]


def test_a_read_without_a_tool_slot_is_refused_and_its_handler_never_runs(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolgate.testing import ScriptedChatModel, ai, tool_call

    _limits(
        monkeypatch,
        max_concurrent_tool_executions="1",
        max_concurrent_tool_executions_per_tenant="1",
        admission_wait_s="0.01",
    )
    model = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")), ai("Try again later.")]
    )
    graph = harness.graph(model)
    slots = process_admission()
    slots.acquire("tool", "acme")  # another execution holds the only slot
    try:
        final = start(graph, "where is O-5512?", "cust-ada", "read-1")
    finally:
        slots.release("tool", "acme")
    assert harness.handler_calls["lookup_order"] == 0
    answer = next(m for m in final["messages"] if getattr(m, "tool_call_id", None) == "c1")
    payload = json.loads(answer.content)
    assert (payload["status"], payload["error"], payload["retryable"]) == ("overloaded", "overloaded", True)
    refusals = audit_events(harness.store, "admission.overloaded")
    assert [(e.tenant_id, e.detail["kind"], e.tool, e.call_id) for e in refusals] == [
        ("acme", "tool", "lookup_order", "c1")
    ]


def test_an_approved_write_without_a_tool_slot_stays_approved_and_runs_once_later(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph.types import Command

    from toolgate.graph.review.decisions import decide
    from toolgate.testing import ScriptedChatModel, ai, tool_call

    _limits(
        monkeypatch,
        max_concurrent_tool_executions="1",
        max_concurrent_tool_executions_per_tenant="1",
        admission_wait_s="0.01",
    )
    args = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
    model = ScriptedChatModel(
        responses=[ai("", tool_call("issue_refund", args, "w1")), ai("Pending."), ai("Done.")]
    )
    graph = harness.graph(model)
    config = {"configurable": {"thread_id": "write-1"}}
    assert start(graph, REFUND_REQUEST, "cust-ada", "write-1")["status"] == "awaiting_approval"
    [(proposal, _)] = harness.store.proposals.list()
    decide(harness.gateway(), proposal.proposal_id, principal("fiona"), "approve")
    slots = process_admission()
    slots.acquire("tool", "acme")
    try:
        graph.invoke(Command(resume={"wake": True}), config, context=Context())
    finally:
        slots.release("tool", "acme")
    operation = harness.store.operations.get(proposal.operation_key)
    assert operation is not None and operation.status == "approved"  # not claimed, not lost
    assert harness.handler_calls["issue_refund"] == 0 and harness.payments() == 0
    assert [e.detail["kind"] for e in audit_events(harness.store, "admission.overloaded")] == ["tool"]

    delivered = harness.gateway().executor.deliver(proposal.operation_key, worker_id="later")
    assert delivered.status == "succeeded"
    assert harness.handler_calls["issue_refund"] == 1 and harness.payments() == 1


def test_the_cli_prints_overloaded_with_retry_after(capsys: pytest.CaptureFixture[str]) -> None:
    class Busy:
        def invoke(self, *args: Any, **kwargs: Any) -> Any:
            raise Overloaded("model", "process", 16, 2.5, "acme")

    with pytest.raises(typer.Exit) as exited:
        invoke(Busy(), {"messages": []}, {"configurable": {"thread_id": "t-9"}})
    assert exited.value.exit_code == EXIT_OVERLOADED == 75
    assert capsys.readouterr().out.strip() == (
        "thread=t-9 status=overloaded retry_after_s=2.5 kind=model scope=process"
    )


def test_admission_waits_only_briefly_and_hands_a_freed_slot_over() -> None:
    slots = Admission(AdmissionLimits(model=1, model_per_tenant=1, wait_s=WAIT))
    slots.acquire("model", "acme")
    waiting, admitted = threading.Event(), threading.Event()

    def second() -> None:
        waiting.set()
        slots.acquire("model", "acme")  # waits for the slot, within the bound
        admitted.set()

    thread = threading.Thread(target=second, daemon=True)
    thread.start()
    assert waiting.wait(WAIT)
    slots.release("model", "acme")
    assert admitted.wait(WAIT)
    thread.join(WAIT)
    assert slots.in_flight("model") == 1 and slots.in_flight("model", "acme") == 1

    quick = Admission(AdmissionLimits(model=1, model_per_tenant=1, wait_s=0.0))
    quick.acquire("model", "acme")
    with pytest.raises(Overloaded) as refused:
        quick.acquire("model", "acme")
    assert (refused.value.scope, refused.value.limit) == ("tenant", 1)
    assert quick.refused[("model", "tenant")] == 1
    with pytest.raises(Overloaded) as full:  # another tenant: its own cap is free, the process's is not
        quick.acquire("model", "globex")
    assert (full.value.scope, full.value.limit) == ("process", 1)


# ---- the global rate limit, shared through the store --------------------------------------------


def test_the_global_window_counts_every_principal_of_every_tenant_in_the_store(
    store: Store, request: pytest.FixtureRequest
) -> None:
    other: Store = (  # another process on the same database
        SQLiteStore(store.path, key=TEST_KEY)
        if isinstance(store, SQLiteStore)
        else PostgresStore(request.getfixturevalue("pg_migrated_url"), key=TEST_KEY)
    )
    limits = RateLimits(global_=RateLimit(limit=3, window_s=10**9))
    first, second = InboundRateLimiter(store, limits), InboundRateLimiter(other, limits)
    ada, gina = principal("cust-ada"), principal("cust-gina")
    assert (ada.tenant_id, gina.tenant_id) == ("acme", "globex")
    assert first.check(ada, "lookup_order") is None
    assert second.check(gina, "lookup_order") is None
    assert first.peek(gina, "issue_refund") is None  # a peek counts nothing
    assert second.check(gina, "issue_refund") is None
    refused = first.check(ada, "issue_refund")
    assert refused is not None and (refused.code, refused.retryable) == ("rate_limited", True)
    assert second.check(gina, "lookup_order") is not None
    assert store.counters.value("g:", 10**9) == 5  # refusals are counted too (the window is full)
    other.close()


def test_the_global_window_refuses_through_the_graph_with_rate_limited(harness: Harness) -> None:
    from dataclasses import replace

    from langgraph.checkpoint.memory import InMemorySaver

    from toolgate.testing import ScriptedChatModel, ai, tool_call

    policy = replace(harness.policy, rate_limits=RateLimits(global_=RateLimit(limit=2, window_s=10**9)))

    def graph(*calls: Any) -> Any:
        model = ScriptedChatModel(responses=[ai("", *calls), ai("ok")])
        app = open_test_app(
            model=model, tools=harness.registry, policy=policy, store=harness.store, start=False
        )
        return app.compiled(checkpointer=InMemorySaver())

    ada = start(graph(tool_call("lookup_order", {"order_id": "O-5512"}, "a1")), "x", "cust-ada", "g-ada")
    gina = start(graph(tool_call("lookup_order", {"order_id": "O-7001"}, "g0")), "x", "cust-gina", "g-1")
    again = start(graph(tool_call("lookup_order", {"order_id": "O-7001"}, "g1")), "x", "cust-gina", "g-2")
    answers = {
        m.tool_call_id: json.loads(m.content)
        for state in (ada, gina, again)
        for m in state["messages"]
        if getattr(m, "tool_call_id", None)
    }
    assert answers["a1"]["status"] == "completed" and answers["g0"]["status"] == "completed"
    assert (answers["g1"]["status"], answers["g1"]["error"]) == ("rejected", "rate_limited")
    assert harness.handler_calls["lookup_order"] == 2
    refusals = [e for e in audit_events(harness.store, "call.rejected") if e.code == "rate_limited"]
    assert [(e.call_id, e.tenant_id) for e in refusals] == [("g1", "globex")]


def test_policy_files_name_the_global_window_and_refuse_an_unknown_one() -> None:
    from toolgate.errors import ConfigurationError
    from toolgate.policy.rules import PolicyRules

    base = {"schema_version": 1, "policy_version": "p/1", "rules": []}
    parsed = PolicyRules.from_mapping({**base, "rate_limits": {"global": {"limit": 500, "window_s": 60}}})
    assert parsed.rate_limits.global_ == RateLimit(limit=500, window_s=60)
    assert parsed.rate_limits.per_tenant is None
    with pytest.raises(ConfigurationError, match="globel"):
        PolicyRules.from_mapping({**base, "rate_limits": {"globel": {"limit": 5, "window_s": 60}}})
