"""Durable waits (issue 16, item 3): the orchestrator, not the model, waits for a long-running job.

A 3-minute report job (controlled clocks: the job's and the store's move together, nothing sleeps)
completes through a durable wait with no model turn while it runs, across a worker restart, on
SQLite and PostgreSQL. Authority is the store's MAC'd wait row: a tampered row is refused and
audited, a wake carries nothing, and only the store's clock judges when a check is due or the wait
has expired.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langgraph.types import Command
from support import kv_lines, principal, tool_messages
from wait_support import THREAD, WaitWorld

from toolgate.clock import Clock
from toolgate.errors import RegistryError, RunRefused
from toolgate.graph import Context
from toolgate.graph.nodes.wait import INVALID
from toolgate.graph.waits.progress import WaitPass
from toolgate.graph.worker import waker
from toolgate.graph.worker.loop import LoopOptions, WorkerLoop
from toolgate.store import Store
from toolgate.testing import open_test_app
from toolgate.tools.demo import WIDE_RELEASE
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.spec import Wait


def named(store: Store, name: str) -> list[Any]:
    return [e for e in store.audit.events() if e.event == name]


def run_worker_until(world: WaitWorld, graph: Any, condition: Any) -> list[dict[str, Any]]:
    """Run a real `WorkerLoop` on its own thread until ``condition(facts)`` is reported, then stop it."""
    seen: list[dict[str, Any]] = []
    reached = threading.Event()

    def report(facts: dict[str, Any]) -> None:
        seen.append(facts)
        if condition(facts):
            reached.set()

    gw = world.gateway()
    loop = WorkerLoop(
        gw.executor, LoopOptions(worker_id="w-test", poll_s=0.005, recover_every_s=3600), report=report
    )
    loop.wait_pass = world.wait_pass(graph, report)
    worker = threading.Thread(target=loop.run, name="wait-worker")
    worker.start()
    try:
        assert reached.wait(60), seen
    finally:
        loop.stop.set()
        worker.join(60)
    assert not worker.is_alive() and loop.summary.stopped == "signal"
    return seen


def test_a_three_minute_job_completes_through_a_durable_wait_with_no_model_turn_across_a_worker_restart(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = WaitWorld(store, monkeypatch, job_s=180)
    graph = world.graph()
    suspended = world.start_and_approve(graph)
    assert suspended["status"] == "waiting" and len(world.model.requests) == 1
    (facts,) = suspended["__interrupt__"][0].value["toolgate"]["waits"]
    assert (facts["tool"], facts["state"], facts["checks"]) == ("submit_report_job", "waiting", 0)
    assert graph.get_state(world.config).next == ("wait",)
    assert world.counter.calls == {"submit_report_job": 1}

    # worker 1 checks twice (60 s and 120 s in: running) and is stopped mid-wait
    world.advance(60)
    run_worker_until(world, graph, lambda f: f.get("checks") == 1)
    world.advance(60)
    run_worker_until(world, graph, lambda f: f.get("checks") == 2)
    wait = store.waits.get(world.operation_key())
    assert wait is not None and (wait.state, wait.last_status, wait.checks) == ("waiting", "running", 2)
    assert len(world.model.requests) == 1 and graph.get_state(world.config).next == ("wait",)

    # a new process: new gateway, graph and worker loop; the job finishes at 180 s
    restarted = world.graph()
    world.advance(65)
    seen = run_worker_until(world, restarted, lambda f: f.get("resumed") == "true")
    assert any(f.get("state") == "ready" and f.get("outcome") == "done" for f in seen)

    final = restarted.get_state(world.config).values
    assert final["status"] == "done" and restarted.get_state(world.config).next == ()
    assert len(world.model.requests) == 2  # the call and the answer: 0 turns for the 3 minutes
    assert world.counter.calls == {"submit_report_job": 1, "check_job_status": 3}
    (answer,) = tool_messages(final)  # the ORIGINAL call id carries the summary, once
    body = json.loads(str(answer.content))
    assert answer.tool_call_id == "call_rep" and body["status"] == "completed"
    assert body["data"]["job_status"] == "complete" and body["data"]["final"]["summary"]["row_count"] >= 0
    assert body["wait"]["outcome"] == "done" and body["wait"]["checks"] == 3
    second = world.model.requests[1].messages
    calls = [m for m in second if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in calls] == ["call_rep"]  # call-id pairing intact for either provider
    done = store.waits.get(world.operation_key())
    assert done is not None and (done.state, done.outcome) == ("resumed", "done")
    assert [len(named(store, n)) for n in ("wait.opened", "wait.ready", "wait.resumed")] == [1, 1, 1]


def test_a_wake_before_the_job_is_done_runs_no_model_turn_and_streams_progress(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = WaitWorld(store, monkeypatch, job_s=180)
    graph = world.graph()
    world.start_and_approve(graph)
    world.advance(20)
    assert world.wait_pass(graph)() == 1  # one check: running
    chunks = list(
        graph.stream(Command(resume={"wake": True}), world.config, context=Context(), stream_mode="custom")
    )
    assert [c["toolgate_wait"]["job_status"] for c in chunks] == ["running"]
    assert len(world.model.requests) == 1 and graph.get_state(world.config).next == ("wait",)
    world.advance(170)
    assert world.wait_pass(graph)() == 1  # done: ready, and the pass resumed the thread
    assert graph.get_state(world.config).values["status"] == "done" and len(world.model.requests) == 2


def test_a_tampered_wait_row_is_refused_and_audited_and_the_thread_keeps_waiting(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = WaitWorld(store, monkeypatch, job_s=180)
    graph = world.graph()
    world.start_and_approve(graph)
    key = world.operation_key()
    with store.transaction() as tx:  # someone with database access declares the wait over
        tx.execute("UPDATE job_waits SET state = 'ready', outcome = 'done' WHERE operation_key = ?", (key,))
    world.advance(20)
    passing = world.wait_pass(graph)
    assert passing() == 0 and passing() == 0
    graph.invoke(Command(resume={"wake": True}), world.config, context=Context())  # `toolgate resume`
    assert world.counter.calls == {"submit_report_job": 1}  # no status check ran for it
    assert len(world.model.requests) == 1 and graph.get_state(world.config).next == ("wait",)
    refused = named(store, "wait.refused")
    assert refused and {e.code for e in refused} == {INVALID} and named(store, "wait.resumed") == []
    assert store.waits.get(key).verified is False  # type: ignore[union-attr]


def test_expiry_and_due_checks_follow_the_store_clock_never_the_workers(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = WaitWorld(store, monkeypatch, job_s=7200)  # longer than the 30-minute wait
    graph = world.graph()
    world.start_and_approve(graph)

    class Skewed(Clock):
        def now(self) -> Any:
            return store.now() + timedelta(hours=2)

    skewed = open_test_app(
        model=world.model, tools=world.registry, policy=DEMO_RELEASES[WIDE_RELEASE].policy,
        store=store, clock=Skewed(), start=False,
    ).gateway  # fmt: skip
    ahead = WaitPass(store, lambda key: skewed.executor)
    assert ahead() == 0 and store.waits.get(world.operation_key()).checks == 0  # type: ignore[union-attr]
    world.advance(1801)  # the store's clock passes the expiry; the job still runs
    assert world.wait_pass(graph)() == 1
    wait = store.waits.get(world.operation_key())
    assert wait is not None and (wait.state, wait.outcome, wait.last_status) == (
        "resumed",
        "expired",
        "running",
    )
    (answer,) = tool_messages(graph.get_state(world.config).values)
    body = json.loads(str(answer.content))
    assert body["wait"]["outcome"] == "expired" and body["data"]["job_status"] == "running"
    assert len(world.model.requests) == 2


def test_the_server_waker_wakes_only_interrupted_threads_with_a_verified_ready_wait(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = WaitWorld(store, monkeypatch, job_s=180)
    graph = world.graph()
    world.start_and_approve(graph)
    woken: list[str] = []

    async def wake(thread_id: str) -> bool:
        woken.append(thread_id)
        return True

    monkeypatch.setattr(waker, "wake_thread", wake)

    class Client:
        threads = None

        def __init__(self) -> None:
            self.threads = self

        async def search(self, **kwargs: Any) -> list[Any]:
            return [{"thread_id": THREAD, "values": {}}]

    gw, rounds = world.gateway(), waker.Woken()
    assert asyncio.run(waker.wake_decided_threads(gw, Client(), rounds)) == []  # still waiting
    world.advance(200)
    WaitPass(store, lambda key: gw.executor)()  # ready; no resumer here: the server's waker wakes it
    assert asyncio.run(waker.wake_decided_threads(gw, Client(), rounds)) == [THREAD]
    assert asyncio.run(waker.wake_decided_threads(gw, Client(), rounds)) == []  # once per readiness
    assert woken == [THREAD]


def test_toolgate_worker_waits_lists_the_store_rows(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from toolgate.cli import waits as cli_waits

    world = WaitWorld(store, monkeypatch, job_s=180)
    world.start_and_approve(world.graph())

    class App:
        def __init__(self) -> None:
            self.store = store

    monkeypatch.setattr(cli_waits, "open_from_env", lambda read_only: App())
    import typer

    app = typer.Typer()
    app.command()(cli_waits.worker_waits)
    result = CliRunner().invoke(app, ["--state", "waiting"])
    assert result.exit_code == 0, result.output
    (line,) = kv_lines(result.output)
    assert (line["thread"], line["state"], line["checks"], line["verified"]) == (
        THREAD,
        "waiting",
        "0",
        "true",
    )
    assert CliRunner().invoke(app, ["--state", "bogus"]).exit_code == 2


def test_someone_of_another_tenant_cannot_carry_the_wait_on_and_rewritten_state_is_refused(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = WaitWorld(store, monkeypatch, job_s=180)
    graph = world.graph()
    world.start_and_approve(graph)
    with pytest.raises(RunRefused) as refused:  # gina (globex) wakes lee's (acme) thread
        graph.invoke(
            Command(resume={"wake": True}), world.config, context=Context(principal=principal("gina"))
        )
    assert refused.value.code == "thread_owner" and named(store, "identity.refused")
    # a client rewrites the checkpoint to say the wait is over: the seal refuses the thread, no model turn
    graph.update_state(world.config, {"status": "running"}, as_node="wait")
    graph.invoke(Command(resume={"wake": True}), world.config, context=Context())
    assert graph.get_state(world.config).values["status"] == "refused" and named(store, "state.tampered")
    assert len(world.model.requests) == 1 and world.counter.calls == {"submit_report_job": 1}
    assert store.waits.get(world.operation_key()).state == "waiting"  # type: ignore[union-attr]


def test_a_wait_declaration_is_checked_and_reads_only_a_usable_job_id() -> None:
    wait = Wait(
        status_tool="check_job_status", job_field="job_id", argument="job_id", every_s=15, max_wait_s=60
    )
    assert wait.job_ref({"job_id": "job_1"}) == "job_1"
    assert wait.job_ref({"job_id": 5}) is wait.job_ref({"job_id": ""}) is wait.job_ref(None) is None
    assert wait.job_ref({"job_id": "x" * 201}) is None
    for bad in ({"every_s": 0}, {"every_s": 61}, {"done": frozenset()}):
        with pytest.raises(RegistryError):
            Wait(**{"status_tool": "s", "job_field": "j", "argument": "a", "max_wait_s": 60, **bad})  # type: ignore[arg-type]


def test_only_the_worker_that_made_a_wait_ready_resumes_it_unless_it_was_left_ready(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = WaitWorld(store, monkeypatch, job_s=180)
    graph = world.graph()
    world.start_and_approve(graph)
    world.advance(200)
    gw = world.gateway()
    WaitPass(store, lambda key: gw.executor)()  # a worker that records the end and dies before resuming
    other = world.wait_pass(graph)
    assert other() == 0 and len(world.model.requests) == 1  # fresh: not this worker's to resume
    assert store.waits.get(world.operation_key()).state == "ready"  # type: ignore[union-attr]
    world.advance(61)  # left ready past the grace, by the store's clock: this worker resumes it
    assert other() == 0 and len(world.model.requests) == 2
    assert store.waits.get(world.operation_key()).state == "resumed"  # type: ignore[union-attr]
