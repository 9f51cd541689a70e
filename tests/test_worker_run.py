"""``toolgate worker run``: unattended delivery, reconciliation and recovery, with graceful shutdown.

The release under test is `worker_run_release` (one write, ``record_effect``, whose downstream is
the table ``wr_effects``: one row per performed effect, never deduplicated, so a duplicate shows
as a second row for an idempotency key). Child workers block their handler on files the test
controls (``WR_BLOCK``); every wait polls a file, a process or a store row, never a fixed sleep.

In-process (SQLite and PostgreSQL): a drain with ``--once`` semantics and ``max_operations``; a
forged approval refused and audited; an abandoned claim recovered and reconciled through the
status check (effect found: completed with no second effect; effect absent: delivered again once).
Child processes (PostgreSQL): a worker SIGKILLed mid-delivery is recovered by another with no
operator action and exactly one effect; four workers drain 1,000 operations with no duplicate;
SIGTERM lets the delivery in flight finish and exits 0 (a second signal exits at once); a worker
whose clock is an hour fast steals no live claim; ``worker verify`` asks the status check.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support import REPO, TEST_KEY, cli_env, kv_lines, principal, toolgate
from test_clock_skew import CLI, FAST, assert_skewed, find_libfaketime, skewed
from worker_run_release import TOOL, release

from toolgate.canonical import idempotency_key_for
from toolgate.errors import StoreError
from toolgate.graph.bootstrap import initialize_store
from toolgate.graph.delivery.recovery import reconcile, recover_abandoned
from toolgate.graph.gateway import Gateway
from toolgate.graph.review.decisions import decide
from toolgate.graph.review.proposals import draft_proposal, store_proposal
from toolgate.graph.worker.loop import LoopOptions, LoopSummary, WorkerLoop
from toolgate.policy.identities import IdentityDirectory
from toolgate.releases.bundle import ReleaseEnv
from toolgate.store import PostgresStore, Store
from toolgate.testing import ScriptedChatModel, open_test_app
from toolgate.tools.demo.identities import seed_demo_identities

RELEASE_REF = f"{REPO / 'tests' / 'worker_run_release.py'}:release"
WAIT_S = 180.0
"""Upper bound of any wait (a hung child fails the test, never hangs it)."""
QUICK = "0.05,0.05,0.05"
"""Status-check schedule of the tests: three checks, 50 ms apart."""


# ---- the world --------------------------------------------------------------------------------


def gateway_on(store: Store) -> Gateway:
    """The test release's gateway on ``store`` (schema, release tables and demo people ready)."""
    initialize_store(store, release)
    seed_demo_identities(IdentityDirectory(store))
    registry = release.registry(ReleaseEnv(store, secret=TEST_KEY))
    return open_test_app(
        model=ScriptedChatModel(responses=[]), tools=registry, policy=release.policy, store=store, start=False
    ).gateway


def propose(gw: Gateway, label: str) -> tuple[str, str]:
    """A ``record_effect`` proposal by sam (support, who holds the tool's ``ops:restart``: the
    requester's authority is judged again before the claim); (operation key, proposal id)."""
    spec = gw.registry.get(TOOL)
    assert spec is not None
    draft = draft_proposal(
        gw,
        spec,
        tenant_id="acme",
        requester_id="sam",
        thread_id=f"t-{label}",
        call_id="c1",
        arguments={"label": label},
    )
    stored, op, _ = store_proposal(gw, spec, draft, actor="sam")
    return op.operation_key, stored.proposal_id


def approved(gw: Gateway, label: str) -> str:
    """An operation approved by omar (operator) through the review path; its key."""
    key, proposal_id = propose(gw, label)
    decide(gw, proposal_id, principal("omar"), "approve")
    return key


def effects(store: Store, key: str | None = None) -> int:
    """Effect rows downstream (of ``key``'s idempotency key, or all)."""
    with store.transaction(write=False) as tx:
        if key is None:
            row = tx.one("SELECT COUNT(*) AS n FROM wr_effects")
        else:
            row = tx.one("SELECT COUNT(*) AS n FROM wr_effects WHERE operation_key = ?", (key,))
    assert row is not None
    return int(row["n"])


def status(store: Store, key: str) -> str:
    op = store.operations.get(key)
    assert op is not None
    return op.status


def events(store: Store, key: str) -> list[tuple[str, str, str | None]]:
    return [(e.event, e.result, e.code) for e in store.audit.events(operation_key=key)]


def run_loop(gw: Gateway, **options: Any) -> LoopSummary:
    """One in-process loop with ``--once`` semantics (drain, then return)."""
    opts = LoopOptions(worker_id="loop-test", poll_s=0.01, once=True, delays=(0.0, 0.0, 0.0), **options)
    return WorkerLoop(gw.executor, opts).run()


def wait_for(condition: Callable[[], bool], what: str, *procs: subprocess.Popen[bytes]) -> None:
    """Poll ``condition``; fail if a process in ``procs`` exits first, or after `WAIT_S`."""
    deadline = time.monotonic() + WAIT_S
    delay = 0.005
    while not condition():
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(f"a worker exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


# ---- in process (SQLite and PostgreSQL) --------------------------------------------------------


def test_once_drains_due_operations_and_max_operations_stops_early(store: Store) -> None:
    gw = gateway_on(store)
    keys = [approved(gw, f"drain-{i}") for i in range(3)]
    pending, _ = propose(gw, "not-approved")

    first = run_loop(gw, max_operations=2)
    assert (first.stopped, first.claimed, first.succeeded) == ("max_operations", 2, 2)
    rest = run_loop(gw)
    assert (rest.stopped, rest.claimed, rest.succeeded, rest.lost) == ("drained", 1, 1, 0)

    assert [status(store, k) for k in keys] == ["succeeded"] * 3
    assert [effects(store, k) for k in keys] == [1, 1, 1]
    assert status(store, pending) == "pending_approval" and effects(store, pending) == 0
    assert run_loop(gw).claimed == 0  # nothing due: nothing runs twice


def test_a_forged_approval_is_refused_and_audited_never_executed(store: Store) -> None:
    gw = gateway_on(store)
    real = approved(gw, "real")
    forged_key, forged_proposal = propose(gw, "forged")
    real_op = store.operations.get(real)
    assert real_op is not None and real_op.proposal_id
    with store.transaction() as tx:  # someone with database access copies omar's approval over
        row = tx.one("SELECT * FROM approvals WHERE proposal_id = ?", (real_op.proposal_id,))
        assert row is not None
        digest = tx.one("SELECT digest FROM proposals WHERE proposal_id = ?", (forged_proposal,))
        assert digest is not None
        forged = {**row, "approval_id": "apr_forged", "proposal_id": forged_proposal, **digest}
        columns = ", ".join(forged)
        tx.execute(
            f"INSERT INTO approvals ({columns}) VALUES ({', '.join('?' for _ in forged)})",
            tuple(forged.values()),
        )
    store.operations.transition(forged_key, "pending_approval", "approved")  # ... and flips the operation

    summary = run_loop(gw)
    assert (summary.claimed, summary.refused, summary.succeeded) == (1, 1, 1)
    assert status(store, forged_key) == "approved" and effects(store, forged_key) == 0
    assert status(store, real) == "succeeded" and effects(store, real) == 1
    seen = events(store, forged_key)
    assert ("approval.voided", "refused", "forged_approval") in seen
    assert ("approval.refused_at_execution", "refused", "approval_invalid") in seen
    assert not any(name in ("operation.claimed", "handler.started") for name, _, _ in seen)


@pytest.mark.parametrize("effect_happened", [True, False], ids=["effect-found", "effect-absent"])
def test_an_abandoned_claim_is_recovered_and_reconciled_through_the_status_check(
    store: Store, effect_happened: bool
) -> None:
    gw = gateway_on(store)
    key = approved(gw, "abandoned")
    assert store.operations.claim(key, "dead-worker", 0.0) is not None  # its worker died holding the claim
    if effect_happened:  # ... after its handler's effect reached the downstream
        with store.transaction() as tx:
            tx.execute(
                "INSERT INTO wr_effects VALUES (?, ?, ?, ?, ?)",
                (idempotency_key_for(key), key, "abandoned", 0, "2026-01-01T00:00:00Z"),
            )
    wait_for(lambda: bool(store.operations.stale_executing(0)), "the dead worker's lease to lapse (store clock)")

    summary = run_loop(gw, grace_s=0.0)
    assert (summary.recovered, summary.reconciled) == (1, 1)
    assert summary.claimed == (0 if effect_happened else 1)
    assert status(store, key) == "succeeded" and effects(store, key) == 1
    seen = events(store, key)
    assert ("operation.recovered", "unknown", None) in seen
    reconciled = "completed" if effect_happened else "absent_retry_safe"
    assert ("operation.reconciled", reconciled, None) in seen
    # the dead worker claimed it by hand here (no events): a handler starts again only when absent
    assert sum(name == "handler.started" for name, _, _ in seen) == (0 if effect_happened else 1)


def test_unknown_outcomes_are_checked_on_their_schedule_then_dead_lettered(store: Store) -> None:
    gw = gateway_on(store)
    key = approved(gw, "never-found")
    assert store.operations.claim(key, "dead-worker", 0.0) is not None
    wait_for(lambda: bool(store.operations.stale_executing(0)), "the dead worker's lease to lapse (store clock)")
    spec = gw.registry.get(TOOL)
    assert spec is not None
    calls: list[str] = []
    check = spec.reconcile
    assert check is not None

    def counted(args: Any, ctx: Any) -> Any:
        calls.append(ctx.idempotency_key)
        return check(args, ctx)

    object.__setattr__(spec, "reconcile", counted)
    object.__setattr__(spec, "retry_safe_when_absent", False)  # absent: a person must decide
    clock = [100.0]
    opts = LoopOptions(worker_id="scheduler", grace_s=0.0, delays=(5.0, 10.0, 20.0))
    loop = WorkerLoop(gw.executor, opts, monotonic=lambda: clock[0])

    loop.recover()  # start-up: the abandoned claim becomes unknown; its first check is due at +5 s
    assert status(store, key) == "unknown" and loop.summary.recovered == 1
    for now, expected_calls in ((104.9, 0), (105.0, 1), (114.9, 1), (115.0, 2), (134.9, 2)):
        clock[0] = now
        loop.check_due()
        assert len(calls) == expected_calls, now
        assert status(store, key) == "unknown"  # not found yet, not the last check: still waiting
    clock[0] = 135.0
    loop.check_due()  # the last check of the schedule
    assert len(calls) == 3 and status(store, key) == "dead_lettered"
    assert (loop.summary.reconciled, loop.summary.dead_lettered) == (1, 1)
    assert [d.operation_key for d in store.operations.dead_letters()] == [key] and effects(store, key) == 0
    dead = [e.code for e in store.audit.events(operation_key=key) if e.event == "operation.dead_lettered"]
    assert dead == ["unresolved"]  # the effect was never found (a broken check is status_check_broke)
    clock[0] = 1000.0
    loop.check_due()
    assert len(calls) == 3  # settled: never checked again



def _stepped_loop(gw: Any) -> tuple[WorkerLoop, list[float], list[dict[str, Any]]]:
    """A worker loop on ``gw`` whose clock the test moves (``clock[0]``), checking each unknown
    outcome after 1 and 2 s, with the lines it reports."""
    clock = [0.0]
    lines: list[dict[str, Any]] = []
    loop = WorkerLoop(
        gw.executor,
        LoopOptions(worker_id="w", grace_s=0.0, delays=(1.0, 2.0)),
        monotonic=lambda: clock[0],
        report=lines.append,
    )
    return loop, clock, lines

def test_a_broken_status_check_is_reported_and_retried_never_fatal(store: Store) -> None:
    gw = gateway_on(store)
    key = approved(gw, "broken-check")
    assert store.operations.claim(key, "dead-worker", 0.0) is not None
    wait_for(lambda: bool(store.operations.stale_executing(0)), "the dead worker's lease to lapse (store clock)")
    spec = gw.registry.get(TOOL)
    assert spec is not None and spec.reconcile is not None
    check, broken = spec.reconcile, [RuntimeError("downstream bug")]

    def flaky(args: Any, ctx: Any) -> Any:
        if broken:
            raise broken.pop()
        return check(args, ctx)

    object.__setattr__(spec, "reconcile", flaky)
    loop, clock, lines = _stepped_loop(gw)
    loop.recover()
    clock[0] = 1.0
    loop.check_due()
    assert loop.summary.errors == 1 and status(store, key) == "unknown"
    assert {"operation_key": key, "reconciled": "error", "error": "RuntimeError"} in lines
    clock[0] = 3.0  # retried after the schedule's longest delay: absent and retry-safe, so approved
    loop.check_due()
    assert status(store, key) == "approved" and loop.summary.reconciled == 1


def test_a_status_check_that_always_breaks_is_audited_and_dead_lettered_after_its_schedule(
    store: Store,
) -> None:
    """A hostile status check that raises on every call: each broken check is audited with a
    stable code, and after the schedule's last check the operation goes to a person (dead
    letter), where it used to stay ``unknown`` for ever, checked again and again, unaudited."""
    gw = gateway_on(store)
    key = approved(gw, "always-broken")
    assert store.operations.claim(key, "dead-worker", 0.0) is not None
    wait_for(lambda: bool(store.operations.stale_executing(0)), "the dead worker's lease to lapse (store clock)")
    spec = gw.registry.get(TOOL)
    assert spec is not None and spec.reconcile is not None
    calls: list[str] = []

    def broken(args: Any, ctx: Any) -> Any:
        calls.append(ctx.idempotency_key)
        raise RuntimeError("downstream bug")

    object.__setattr__(spec, "reconcile", broken)
    loop, clock, lines = _stepped_loop(gw)
    loop.recover()
    clock[0] = 1.0
    loop.check_due()
    assert len(calls) == 1 and status(store, key) == "unknown"  # not the last check: still waiting
    clock[0] = 3.0
    loop.check_due()  # the last check of the schedule broke too: a person decides
    assert len(calls) == 2 and status(store, key) == "dead_lettered"
    assert loop.summary.errors == 2 and loop.summary.dead_lettered == 1
    assert {"operation_key": key, "reconciled": "dead_lettered", "checks": 2} in lines
    seen = events(store, key)
    assert seen.count(("operation.status_check_failed", "error", "status_check_broke")) == 2
    assert ("operation.dead_lettered", "dead_lettered", "status_check_broke") in seen
    letters = store.operations.dead_letters()
    assert [d.operation_key for d in letters] == [key] and effects(store, key) == 0
    assert letters[0].context["history"] == [{"check": "2", "error": "RuntimeError"}]
    clock[0] = 1000.0
    loop.check_due()
    assert len(calls) == 2  # settled by a person from now on: never checked again


def test_two_workers_racing_one_reconcile_record_one_outcome_and_no_false_in_flight(
    two: tuple[Store, Store],
) -> None:
    """Two workers (each its own store connection, as two processes) check the same unknown
    outcome at once: both status checks answer absent (a barrier holds each inside its check until
    the other is there), one re-approves it, and the other's record stands for both: the loser
    says nothing, where it used to audit ``operation.reconciled in_flight`` (a handler that might
    still be running) for an operation the winner had just approved."""
    first, second = two
    gateways = [gateway_on(first), gateway_on(second)]
    key = approved(gateways[0], "raced-check")
    assert first.operations.claim(key, "dead-worker", 0.0) is not None
    wait_for(lambda: bool(first.operations.stale_executing(0)), "the dead worker's lease to lapse (store clock)")
    assert recover_abandoned(gateways[0].executor, 0.0) == [key]
    both_checking = threading.Barrier(2)
    for gw in gateways:
        spec = gw.registry.get(TOOL)
        assert spec is not None and spec.reconcile is not None

        def at_once(args: Any, ctx: Any, check: Any = spec.reconcile) -> Any:
            both_checking.wait(timeout=WAIT_S)
            return check(args, ctx)

        object.__setattr__(spec, "reconcile", at_once)
    with ThreadPoolExecutor(2) as pool:
        done = list(
            pool.map(lambda gw: reconcile(gw.executor, key, delays=(0.0,), sleep=lambda _: None), gateways)
        )
    assert sorted(r.status for r in done) == ["approved", "unchanged"]
    assert status(first, key) == "approved" and effects(first, key) == 0
    reconciled = [(name, result) for name, result, _ in events(first, key) if name == "operation.reconciled"]
    assert reconciled == [("operation.reconciled", "absent_retry_safe")]
    assert first.operations.dead_letters() == []


def test_a_long_running_loop_survives_a_store_outage(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    gw = gateway_on(store)
    key = approved(gw, "outage")
    real = store.operations.due
    failures = [StoreError("connection lost")]

    def flaky(limit: int) -> Any:
        if failures:
            raise failures.pop()
        return real(limit)

    monkeypatch.setattr(store.operations, "due", flaky)
    with pytest.raises(StoreError):  # a --once drain (cron) fails loudly
        run_loop(gw)
    failures.append(StoreError("connection lost"))
    loop = WorkerLoop(gw.executor, LoopOptions(worker_id="survivor", poll_s=0.01))
    done: list[LoopSummary] = []
    runner = threading.Thread(target=lambda: done.append(loop.run()))
    runner.start()
    try:
        wait_for(lambda: status(store, key) == "succeeded", "the delivery after the outage")
    finally:
        loop.stop.set()
        runner.join(WAIT_S)
    assert done[0].errors == 1 and done[0].claimed == 1 and effects(store, key) == 1


def test_a_stop_event_ends_the_loop_after_the_delivery_in_flight(store: Store) -> None:
    gw = gateway_on(store)
    keys = [approved(gw, f"stop-{i}") for i in range(3)]
    started, release_handler = threading.Event(), threading.Event()
    spec = gw.registry.get(TOOL)
    assert spec is not None
    inner = spec.handler

    def blocking(args: Any, ctx: Any) -> Any:
        started.set()
        assert release_handler.wait(WAIT_S)
        return inner(args, ctx)

    object.__setattr__(spec, "handler", blocking)
    loop = WorkerLoop(gw.executor, LoopOptions(worker_id="stopper", poll_s=0.01, batch=1))
    done: list[LoopSummary] = []
    runner = threading.Thread(target=lambda: done.append(loop.run()))
    runner.start()
    assert started.wait(WAIT_S)
    loop.stop.set()  # what SIGTERM does
    release_handler.set()
    runner.join(WAIT_S)
    assert not runner.is_alive() and done[0].stopped == "signal" and done[0].claimed == 1
    assert sorted(status(store, k) for k in keys) == ["approved", "approved", "succeeded"]
    assert effects(store) == 1


# ---- child processes (PostgreSQL) --------------------------------------------------------------


class Worker:
    """A ``toolgate worker run`` child; its output in files."""

    def __init__(
        self, tmp: Path, env: dict[str, str], name: str, *args: str, prefix: list[str] | None = None
    ):
        self.out, self.err = tmp / f"{name}.out", tmp / f"{name}.err"
        command = prefix or [sys.executable, "-m", "toolgate"]
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [*command, "worker", "run", "--worker", name, *args],
                env=env,
                cwd=tmp,
                stdout=out,
                stderr=err,
            )

    def lines(self) -> list[dict[str, str]]:
        return kv_lines(self.out.read_text())

    def started(self) -> bool:
        return any(line.get("event") == "started" for line in self.lines())

    def wait_started(self) -> None:
        wait_for(self.started, f"{self.out.name} to start ({self.output()})", self.proc)

    def stop(self, sig: int = signal.SIGTERM) -> dict[str, str]:
        """Signal, wait for a clean exit, return the summary line."""
        self.proc.send_signal(sig)
        return self.finish()

    def finish(self) -> dict[str, str]:
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the worker did not exit: {self.output()}") from None
        assert self.proc.returncode == 0, self.output()
        summaries = [line for line in self.lines() if "stopped" in line]
        assert len(summaries) == 1, self.output()
        return summaries[0]

    def output(self) -> str:
        return f"stdout={self.out.read_text()[-3000:]!r} stderr={self.err.read_text()[-3000:]!r}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url, key=TEST_KEY, max_size=10)
    yield store
    store.close()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Children to kill if a test fails half-way."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.kill()


def env_for(tmp: Path, pg_url: str, **extra: str) -> dict[str, str]:
    return cli_env(tmp, pg_url, TOOLGATE_RELEASE=RELEASE_REF, TOOLGATE_RECONCILE_DELAYS=QUICK, **extra)


def blocking_env(tmp: Path, pg_url: str, where: str, **extra: str) -> tuple[dict[str, str], Path]:
    signals = tmp / f"signals-{where}"
    signals.mkdir()
    return env_for(tmp, pg_url, WR_BLOCK=where, WR_SIGNAL_DIR=str(signals), **extra), signals


@pytest.mark.postgres
@pytest.mark.parametrize("where", ["after", "before"], ids=["killed-after-effect", "killed-before-effect"])
def test_a_worker_killed_mid_delivery_is_recovered_by_another_with_exactly_one_effect(
    pg: PostgresStore, pg_url: str, tmp_path: Path, workers: list[Worker], where: str
) -> None:
    gw = gateway_on(pg)
    key = approved(gw, "killed")
    env, signals = blocking_env(tmp_path, pg_url, where, TOOLGATE_CLAIM_LEASE_S="2")
    doomed = Worker(tmp_path, env, "doomed", "--poll", "0.05")
    workers.append(doomed)
    wait_for(lambda: (signals / "started").exists(), f"the handler to start ({doomed.output()})", doomed.proc)
    op = pg.operations.get(key)
    assert op is not None and op.status == "executing" and op.owner == "doomed"
    assert effects(pg, key) == (1 if where == "after" else 0)
    doomed.proc.send_signal(signal.SIGKILL)
    doomed.proc.wait(timeout=WAIT_S)

    # no operator: another worker recovers the claim once its lease lapses by the database clock
    rescuer = Worker(
        tmp_path,
        env_for(tmp_path, pg_url, TOOLGATE_CLAIM_LEASE_S="2"),
        "rescuer",
        "--poll",
        "0.05",
        "--grace",
        "0",
        "--recover-every",
        "0.1",
    )
    workers.append(rescuer)
    wait_for(
        lambda: status(pg, key) == "succeeded",
        f"the operation to complete ({rescuer.output()})",
        rescuer.proc,
    )
    summary = rescuer.stop()
    assert summary["stopped"] == "signal" and summary["recovered"] == "1" and summary["reconciled"] == "1"
    assert summary["claimed"] == ("0" if where == "after" else "1")
    assert effects(pg, key) == 1 and effects(pg) == 1
    seen = events(pg, key)
    assert ("operation.recovered", "unknown", None) in seen
    assert ("operation.reconciled", "completed" if where == "after" else "absent_retry_safe", None) in seen


@pytest.mark.exclusive
@pytest.mark.postgres
@pytest.mark.slow
def test_four_workers_drain_a_thousand_operations_without_a_duplicate(
    pg: PostgresStore, pg_url: str, tmp_path: Path, workers: list[Worker]
) -> None:
    total = 1000
    began = time.monotonic()
    gw = gateway_on(pg)
    keys = [approved(gw, f"bulk-{i}") for i in range(total)]
    created = time.monotonic()
    env = env_for(tmp_path, pg_url)
    for n in range(4):
        workers.append(Worker(tmp_path, env, f"w{n}", "--poll", "0.05", "--batch", "20"))

    def succeeded() -> int:
        with pg.transaction(write=False) as tx:
            row = tx.one("SELECT COUNT(*) AS n FROM operations WHERE status = 'succeeded'")
        assert row is not None
        return int(row["n"])

    try:
        wait_for(lambda: succeeded() == total, "every operation to complete", *(w.proc for w in workers))
    except AssertionError as exc:  # say why: each worker's own output
        raise AssertionError(f"{exc}: " + " | ".join(w.output() for w in workers)) from None
    summaries = [w.stop() for w in workers]
    drained = time.monotonic()

    with pg.transaction(write=False) as tx:
        duplicates = tx.execute(
            "SELECT idempotency_key, COUNT(*) AS n FROM wr_effects GROUP BY idempotency_key HAVING COUNT(*) > 1"
        )
    assert duplicates == []
    assert effects(pg) == total
    assert {status(pg, k) for k in keys} == {"succeeded"}
    claims = [int(s["claimed"]) for s in summaries]
    assert sum(claims) == total and all(s["stopped"] == "signal" for s in summaries)
    print(
        f"claims per worker {claims}; created in {created - began:.1f}s, drained in {drained - created:.1f}s"
    )


@pytest.mark.postgres
def test_sigterm_lets_the_delivery_in_flight_finish_then_exits_zero(
    pg: PostgresStore, pg_url: str, tmp_path: Path, workers: list[Worker]
) -> None:
    gw = gateway_on(pg)
    keys = [approved(gw, f"graceful-{i}") for i in range(2)]
    env, signals = blocking_env(tmp_path, pg_url, "before")
    worker = Worker(tmp_path, env, "graceful", "--poll", "0.05", "--batch", "1")
    workers.append(worker)
    wait_for(lambda: (signals / "started").exists(), f"the handler to start ({worker.output()})", worker.proc)
    worker.proc.send_signal(signal.SIGTERM)
    (signals / "release").touch()  # the handler in flight may finish now
    summary = worker.finish()
    assert summary["stopped"] == "signal" and summary["claimed"] == "1" and summary["succeeded"] == "1"
    assert sorted(status(pg, k) for k in keys) == ["approved", "succeeded"]  # no new claim after SIGTERM
    assert effects(pg) == 1


@pytest.mark.postgres
def test_a_second_signal_exits_at_once(
    pg: PostgresStore, pg_url: str, tmp_path: Path, workers: list[Worker]
) -> None:
    gw = gateway_on(pg)
    key = approved(gw, "impatient")
    env, signals = blocking_env(tmp_path, pg_url, "before")
    worker = Worker(tmp_path, env, "impatient", "--poll", "0.05")
    workers.append(worker)
    wait_for(lambda: (signals / "started").exists(), f"the handler to start ({worker.output()})", worker.proc)
    worker.proc.send_signal(signal.SIGTERM)
    wait_for(
        lambda: any(r.get("event") == "stopping" for r in worker.lines()), "the first signal", worker.proc
    )
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=WAIT_S) == 128 + signal.SIGTERM  # the handler was never released
    assert status(pg, key) == "executing" and effects(pg) == 0


@pytest.mark.postgres
def test_a_worker_with_a_fast_clock_steals_no_live_claim(
    pg: PostgresStore, pg_url: str, tmp_path: Path
) -> None:
    lib = find_libfaketime()
    if lib is None:
        if os.environ.get("CI") == "true":
            pytest.fail("libfaketime is not installed (CI=true: clock-skew tests must not be skipped)")
        pytest.skip("libfaketime is not installed (Debian package `faketime`)")
    gw = gateway_on(pg)
    key = approved(gw, "live-claim")
    assert pg.operations.claim(key, "live-owner", 600.0) is not None  # a live worker's claim, ten minutes left
    env = skewed(env_for(tmp_path, pg_url), lib, FAST)  # by this worker's clock it lapsed 50 min ago
    proc = subprocess.run(
        [sys.executable, "-c", CLI, "worker", "run", "--once", "--grace", "0", "--worker", "fast"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, _, rest = proc.stdout.partition("\n")
    assert_skewed(first.removeprefix("clock="), pg.now(), FAST)
    summary = kv_lines(rest)[-1]
    assert summary["stopped"] == "drained" and summary["recovered"] == "0" and summary["claimed"] == "0"
    op = pg.operations.get(key)
    assert op is not None and op.status == "executing" and op.owner == "live-owner"
    assert effects(pg) == 0 and ("operation.recovered", "unknown", None) not in events(pg, key)


@pytest.mark.postgres
def test_worker_verify_asks_the_status_check(pg: PostgresStore, pg_url: str, tmp_path: Path) -> None:
    gw = gateway_on(pg)
    key = approved(gw, "verified")
    pending = approved(gw, "unrun")
    assert run_loop(gw, max_operations=1).claimed == 1
    done, waiting = (key, pending) if status(pg, key) == "succeeded" else (pending, key)
    env = env_for(tmp_path, pg_url)

    row = kv_lines(toolgate(["worker", "verify", "--operation-key", done], env).stdout)[0]
    assert (
        row["verification"] == "active" and row["status"] == "completed" and "verification_reason" not in row
    )

    row = kv_lines(toolgate(["worker", "verify", "--operation-key", waiting], env, check=False).stdout)[0]
    assert row["verification"] == "passive" and row["verification_reason"] == "status_approved"

    with pg.transaction() as tx:  # the effect vanished from the system of record
        tx.execute("DELETE FROM wr_effects WHERE operation_key = ?", (done,))
    checked = toolgate(["worker", "verify", "--operation-key", done], env, check=False)
    row = kv_lines(checked.stdout)[0]
    assert checked.returncode == 1
    assert row["verification"] == "mismatch" and row["verification_reason"] == "effect_absent"
