"""The optional cluster-wide cap per tenant: slots held in the store, shared by every process.

A child process (a real ``python`` subprocess on the same store) takes a slot inside `admitted`
and holds it until the test writes a line to its stdin; it says ``held`` on stdout once it holds
the slot, so every step waits on a pipe, a barrier or an event, never on a sleep. Each test runs
on embedded SQLite and on a real PostgreSQL server (the `store` fixture).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import typer
from support import TEST_KEY, audit_events, shift_store_clock

import toolgate.clock
from toolgate.cli.common import EXIT_OVERLOADED, invoke
from toolgate.policy.admission import AdmissionLimits, Overloaded, admitted, process_admission
from toolgate.settings import InvalidSetting
from toolgate.store import PostgresStore, SQLiteStore, Store
from toolgate.store.audit import Auditor

RELEASE = "ops-tools/1.0.0"
WAIT = 60.0
"""Upper bound of every event wait (a failure, not a pace: each wait ends when its event fires)."""
CLUSTER_VARIABLES = (
    "TOOLGATE_CLUSTER_MODEL_REQUESTS_PER_TENANT",
    "TOOLGATE_CLUSTER_TOOL_EXECUTIONS_PER_TENANT",
    "TOOLGATE_CLUSTER_SLOT_TTL_S",
)

CHILD = r"""
import sys
from toolgate.policy.admission import admitted
from toolgate.store import PostgresStore, SQLiteStore
from toolgate.store.audit import Auditor

backend, target, key, kind, tenant = sys.argv[1:6]
opened = PostgresStore if backend == "postgres" else SQLiteStore
store = opened(target, key=bytes.fromhex(key))
with admitted(Auditor(store=store, release="ops-tools/1.0.0"), kind, tenant):
    print("held", flush=True)
    sys.stdin.readline()  # the test's signal to give the slot back
print("released", flush=True)
store.close()
"""


def _cluster(monkeypatch: pytest.MonkeyPatch, *, model: int = 0, tool: int = 0, ttl_s: float = 300.0) -> None:
    """Cluster caps for this process (and the children it starts); process caps well above them."""
    monkeypatch.setenv("TOOLGATE_CLUSTER_MODEL_REQUESTS_PER_TENANT", str(model))
    monkeypatch.setenv("TOOLGATE_CLUSTER_TOOL_EXECUTIONS_PER_TENANT", str(tool))
    monkeypatch.setenv("TOOLGATE_CLUSTER_SLOT_TTL_S", str(ttl_s))
    monkeypatch.setenv("TOOLGATE_MAX_CONCURRENT_MODEL_REQUESTS_PER_TENANT", "16")
    monkeypatch.setenv("TOOLGATE_MAX_CONCURRENT_TOOL_EXECUTIONS_PER_TENANT", "16")
    monkeypatch.setenv("TOOLGATE_ADMISSION_WAIT_S", "0.2")


class Holder:
    """A child process holding a cluster slot of ``kind`` for ``tenant`` (once started)."""

    def __init__(self, store: Store, request: pytest.FixtureRequest, kind: str, tenant: str = "acme") -> None:
        if isinstance(store, PostgresStore):
            backend, target = "postgres", str(request.getfixturevalue("pg_migrated_url"))
        else:
            assert isinstance(store, SQLiteStore)
            backend, target = "sqlite", str(store.path)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, backend, target, TEST_KEY.hex(), kind, tenant],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        line = self.proc.stdout.readline()  # blocks until the child holds its slot (or died)
        if line != "held\n":
            self.proc.kill()
            pytest.fail(f"the child never held its slot: {line!r} {self.proc.communicate()[1]}")

    def release(self) -> None:
        """Let the child leave its block; returns once it gave the slot back and exited."""
        out, err = self.proc.communicate("\n", timeout=WAIT)
        assert (self.proc.returncode, out) == (0, "released\n"), err

    def kill(self) -> None:
        """SIGKILL while it holds the slot: nothing gives it back."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=WAIT)
        assert self.proc.returncode == -signal.SIGKILL


def _refused(store: Store) -> list[tuple[Any, ...]]:
    return [
        (e.tenant_id, e.code, e.result, e.detail["kind"], e.detail["scope"], e.detail["limit"])
        for e in audit_events(store, "admission.overloaded")
    ]


def test_a_tenants_cluster_cap_holds_across_processes(
    store: Store, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cluster(monkeypatch, model=1)
    auditor = Auditor(store=store, release=RELEASE)
    child = Holder(store, request, "model")
    [held] = store.slots.held("model:acme")
    assert held.slot == 0 and held.holder.split(":")[1] == str(child.proc.pid)

    ran: list[str] = []
    with pytest.raises(Overloaded) as refused, admitted(auditor, "model", "acme"):
        ran.append("acme")
    assert ran == []  # the block never ran
    exc = refused.value
    assert (exc.code, exc.kind, exc.scope, exc.limit, exc.tenant_id) == (
        "overloaded",
        "model",
        "cluster",
        1,
        "acme",
    )
    assert exc.retry_after_s >= 1.0
    assert _refused(store) == [("acme", "overloaded", "refused", "model", "cluster", 1)]  # audited once
    assert process_admission().in_flight("model", "acme") == 0  # its process slot was given back
    assert process_admission().refused[("model", "cluster")] >= 1
    assert [r.holder for r in store.slots.held("model:acme")] == [held.holder]  # the child's, untouched

    with admitted(auditor, "model", "beta"):  # another tenant has its own share
        ran.append("beta")
        assert len(store.slots.held("model:beta")) == 1
    with admitted(auditor, "tool", "acme"):  # no cluster cap for tool executions: no slot taken
        ran.append("tool")
        assert store.slots.held("tool:acme") == []
    assert ran == ["beta", "tool"] and store.slots.held("model:beta") == []

    child.release()
    assert store.slots.held("model:acme") == []
    with admitted(auditor, "model", "acme"):
        ran.append("acme")
        [mine] = store.slots.held("model:acme")
        assert mine.holder.startswith(f"{socket.gethostname()}:{os.getpid()}:")
    assert ran[-1] == "acme" and store.slots.held("model:acme") == []  # given back at the end
    assert len(_refused(store)) == 1


def test_a_slot_whose_holder_died_lapses_only_after_its_ttl_on_the_store_clock(
    store: Store, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cluster(monkeypatch, tool=1, ttl_s=300)
    auditor = Auditor(store=store, release=RELEASE)
    child = Holder(store, request, "tool")
    child.kill()
    [dead] = store.slots.held("tool:acme")  # nothing gave it back
    assert dead.holder.split(":")[1] == str(child.proc.pid)
    ran: list[int] = []

    def attempt() -> str:
        try:
            with admitted(auditor, "tool", "acme"):
                ran.append(1)
                return store.slots.held("tool:acme")[0].holder
        except Overloaded as exc:
            return exc.scope

    assert attempt() == "cluster"
    if isinstance(store, PostgresStore):  # a skewed process clock frees nothing: the server's decides
        skewed = datetime.now(UTC) + timedelta(hours=1)
        with monkeypatch.context() as skew:
            skew.setattr(toolgate.clock, "SYSTEM_CLOCK", type("Skewed", (), {"now": lambda self: skewed})())
            assert toolgate.clock.utcnow() == skewed
            assert attempt() == "cluster"
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=240))  # within the TTL: still the dead one's
        assert attempt() == "cluster"
    assert ran == []
    with monkeypatch.context() as later:
        shift_store_clock(later, store, timedelta(seconds=301))  # past it: the slot is free again
        holder = attempt()
        assert holder.startswith(f"{socket.gethostname()}:{os.getpid()}:") and ran == [1]
        assert store.slots.held("tool:acme") == []  # and given back
    refusals = _refused(store)
    assert refusals and set(refusals) == {("acme", "overloaded", "refused", "tool", "cluster", 1)}
    assert len(refusals) == (3 if isinstance(store, PostgresStore) else 2)


def test_cluster_caps_are_off_by_default_and_cost_no_store_call(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    limits = AdmissionLimits.from_settings()
    assert (limits.cluster_model_per_tenant, limits.cluster_tool_per_tenant, limits.cluster_ttl_s) == (
        0,
        0,
        300.0,
    )
    units: list[bool] = []
    real = store.transaction

    def counted(*, write: bool = True) -> Any:
        units.append(write)
        return real(write=write)

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a cluster slot was asked for with no cluster cap")

    monkeypatch.setattr(store, "transaction", counted)
    monkeypatch.setattr(store.slots, "take", forbidden)
    monkeypatch.setattr(store.slots, "release", forbidden)
    auditor = Auditor(store=store, release=RELEASE)
    ran = 0
    with admitted(auditor, "model", "acme"), admitted(auditor, "tool", "acme"):
        ran += 1
    monkeypatch.setenv("TOOLGATE_CLUSTER_MODEL_REQUESTS_PER_TENANT", "0")  # 0 is off too
    monkeypatch.setenv("TOOLGATE_CLUSTER_TOOL_EXECUTIONS_PER_TENANT", "0")
    with admitted(auditor, "model", "acme"), admitted(auditor, "tool", "acme"):
        ran += 1
    assert ran == 2 and units == []  # not one unit of work on the store

    monkeypatch.setenv("TOOLGATE_CLUSTER_MODEL_REQUESTS_PER_TENANT", "-1")  # bad input: a clear refusal
    wrong = "TOOLGATE_CLUSTER_MODEL_REQUESTS_PER_TENANT must be 0 \\(off\\) or an integer >= 1 \\(got '-1'\\)"
    with pytest.raises(InvalidSetting, match=wrong), admitted(auditor, "model", "acme"):
        ran += 1
    monkeypatch.setenv("TOOLGATE_CLUSTER_MODEL_REQUESTS_PER_TENANT", "1")
    monkeypatch.setenv("TOOLGATE_CLUSTER_SLOT_TTL_S", "0")
    wrong = "TOOLGATE_CLUSTER_SLOT_TTL_S must be a number of seconds > 0"
    with pytest.raises(InvalidSetting, match=wrong), admitted(auditor, "model", "acme"):
        ran += 1
    assert ran == 2 and units == []


def test_threads_racing_for_the_last_cluster_slot_get_it_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cluster(monkeypatch, model=3)
    for slot in range(2):  # two of the three are held by other processes
        assert store.slots.take("model:acme", f"other-process-{slot}", 3, 300) == slot
    auditor = Auditor(store=store, release=RELEASE)
    racers = 8
    barrier = threading.Barrier(racers)
    release = threading.Event()
    settled = threading.Semaphore(0)
    outcomes: list[str] = []
    lock = threading.Lock()

    def race() -> None:
        barrier.wait()
        try:
            with admitted(auditor, "model", "acme"):
                with lock:
                    outcomes.append("admitted")
                settled.release()
                assert release.wait(WAIT)
        except Overloaded as exc:
            with lock:
                outcomes.append(exc.scope)
            settled.release()

    threads = [threading.Thread(target=race, daemon=True) for _ in range(racers)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(racers):
            assert settled.acquire(timeout=WAIT), "a racer never settled"
        assert sorted(outcomes) == ["admitted"] + ["cluster"] * (racers - 1)
        held = store.slots.held("model:acme")
        assert [r.slot for r in held] == [0, 1, 2]  # exactly the cap, across processes
    finally:
        release.set()
        for thread in threads:
            thread.join(WAIT)
    assert [r.holder for r in store.slots.held("model:acme")] == ["other-process-0", "other-process-1"]
    assert _refused(store) == [("acme", "overloaded", "refused", "model", "cluster", 3)] * (racers - 1)
    assert process_admission().in_flight("model", "acme") == 0


def test_a_worker_pass_defers_a_tenant_whose_cluster_share_another_process_holds(
    store: Store, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_worker_admission import approved_for_globex, claims, overloaded
    from test_worker_run import approved, effects, gateway_on, status

    from toolgate.graph.worker.loop import LoopOptions, WorkerLoop

    _cluster(monkeypatch, tool=1)
    gw = gateway_on(store)
    acme = [approved(gw, f"cluster-busy-{n}") for n in range(2)]
    globex = approved_for_globex(gw, "cluster-free")
    loop = WorkerLoop(gw.executor, LoopOptions(worker_id="w-cluster", retry_after_s=0.0))
    child = Holder(store, request, "tool")  # another process runs one of acme's tool handlers
    try:
        assert loop.deliver_due() == 1  # globex's only: acme's share of the cluster is taken
        assert (loop.summary.claimed, loop.summary.deferred) == (1, 1)  # the rest of acme skipped
        assert status(store, globex) == "succeeded" and effects(store, globex) == 1
        assert [status(store, k) for k in acme] == ["approved", "approved"]
        assert [claims(store, k) for k in acme] == [0, 0] and [effects(store, k) for k in acme] == [0, 0]
        refused = [e for k in acme for e in overloaded(store, k)]
        assert [(e.tenant_id, e.detail["scope"], e.detail["limit"]) for e in refused] == [
            ("acme", "cluster", 1)
        ]
        assert process_admission().in_flight("tool") == 0
    finally:
        child.release()
    assert loop.deliver_due() == 2  # the share is free again: both delivered, once each
    assert loop.deliver_due() == 0
    assert [status(store, k) for k in acme] == ["succeeded", "succeeded"]
    assert [effects(store, k) for k in [*acme, globex]] == [1, 1, 1]
    assert store.slots.held("tool:acme") == [] and store.slots.held("tool:globex") == []


def test_toolgate_run_refused_by_the_cluster_cap_says_so_and_exits_75(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Busy:
        def invoke(self, *args: Any, **kwargs: Any) -> Any:
            raise Overloaded("model", "cluster", 4, 1.5, "acme")

    with pytest.raises(typer.Exit) as exited:
        invoke(Busy(), {"messages": []}, {"configurable": {"thread_id": "t-c"}})
    assert exited.value.exit_code == EXIT_OVERLOADED
    assert capsys.readouterr().out.strip() == (
        "thread=t-c status=overloaded retry_after_s=1.5 kind=model scope=cluster"
    )
