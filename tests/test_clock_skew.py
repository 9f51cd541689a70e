"""Workers with wrong clocks cannot bend expiry or leases: every time decision is the database's.

What is proven (PostgreSQL, real child processes whose wall clock is shifted by libfaketime):

a. **Expiry holds.** A refund approved inside a short approval window, then expired by the
   DATABASE clock, is not executed by a worker whose own clock is 1 h SLOW (by its clock the
   proposal is still valid for almost an hour): ``toolgate worker execute`` reports ``expired``,
   the operation is ``expired``, nothing was claimed, 0 payment requests.
b. **A fast clock expires nothing early.** A worker 1 h FAST (by its clock the 15-minute window
   has long passed) executes a valid, approved refund exactly once: ``succeeded``, one claim,
   one ``handler.started``, 1 payment request; its audit events carry database times.
c. **Leases hold.** A worker 1 h SLOW claims a refund; its handler blocks (before the effect)
   until the test releases it. Its claim's lease is on the database clock (a local lease would
   be an hour in the past), and renewals keep it alive past the first lease's expiry. Meanwhile
   ``toolgate worker recover --grace 0`` in a child 1 h FAST (by its clock every lease expired an
   hour ago) recovers, reconciles and redelivers nothing. Released, the handler finishes:
   ``succeeded``, exactly 1 payment request and 1 refund.
d. **An overrunning handler keeps its lease.** Same, with the handler's timeout at 0.5 s: the
   delivery reports ``unknown``; the lease keeper renews on the database clock while the thread
   lives; a concurrent ``worker recover --grace 0`` 1 h FAST reconciles the operation as
   ``in_flight`` (effect absent, lease live) and redelivers and dead-letters nothing. Released,
   the late success is recorded (``unknown -> succeeded``) with exactly 1 payment request.
e. **A deadline is the store's, also without a round trip.** A process 1 h FAST runs a task whose
   deadline is 30 minutes away on the database clock (by its own clock it passed half an hour
   ago): the model node and dispatch judge it by `Store.calibrated_now` (the store's last reading
   of its clock plus monotonic time since, no round trip of its own), so the task runs: the read
   call is answered and the model speaks; no judgment saw the child's own time.

How: children run with ``LD_PRELOAD=libfaketime.so.1``, ``FAKETIME=-1h|+1h`` and
``FAKETIME_DONT_FAKE_MONOTONIC=1`` (timeouts and sleeps keep real durations). Every child first
prints its own ``datetime.now(UTC)`` and the test checks it is really an hour off the database's
clock, so no test can pass because the skew silently did not apply. Cross-process events are
files written atomically (the handler signals ``started``, the worker ``delivered``; the test
creates ``release``); waits poll those files or ``store.now()`` against a stored time, never a
fixed sleep. The database clock here is the same host's, but nothing in the system may read the
children's clocks for a decision, and the children's clocks are an hour away from it.
Children replace ``time.sleep`` by an equal ``select`` sleep first: libfaketime 0.9.10 (Debian
12's) breaks ``time.sleep`` on Python >= 3.11 when the monotonic clock is not faked (`SLEEP_FIX`).

libfaketime comes from Debian's ``faketime`` package (``scripts/ensure-test-tools.sh``, run by
``make test``, installs it as root). Missing, these tests skip locally and fail under CI=true.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support import REFUND_REQUEST, TEST_KEY, Harness, cli_env, kv_lines, principal, start

from toolgate.clock import parse_iso
from toolgate.graph.review.decisions import decide
from toolgate.store import PostgresStore
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.credentials import HmacCredentialProvider
from toolgate.tools.demo import REFUND_RELEASE

pytestmark = pytest.mark.postgres

SLOW = "-1h"
"""FAKETIME for a worker whose clock runs an hour behind the database's."""
FAST = "+1h"
"""FAKETIME for a worker whose clock runs an hour ahead of the database's."""
OFFSET = {SLOW: timedelta(hours=-1), FAST: timedelta(hours=1)}
CLOCK_TOLERANCE = timedelta(minutes=5)
"""How far a child's clock may be from (database clock + skew): far below the hour of skew."""
WAIT_S = 180.0
"""Upper bound of any wait for a child's signal (a hung child fails the test, never hangs it)."""
LEASE_S = 4.0
"""Claim lease of the blocking worker (renewed every lease/3): short enough that the test sees
the first lease lapse by the database clock, long enough to survive a loaded machine."""
WINDOW_S = 8.0
"""Approval window of test (a): covers proposing and approving on a loaded machine."""


# ---- libfaketime ----------------------------------------------------------------------------


def find_libfaketime() -> str | None:
    """Path of libfaketime.so.1 (Debian multiarch, other layouts, or what dpkg says), or None."""
    patterns = (
        "/usr/lib/*/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
        "/usr/local/lib/faketime/libfaketime.so.1",
        "/usr/lib64/faketime/libfaketime.so.1",
    )
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    try:
        listed = subprocess.run(
            ["dpkg", "-L", "libfaketime"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in listed.splitlines():
        if line.endswith("/libfaketime.so.1") and os.path.exists(line):
            return line
    return None


@pytest.fixture(scope="module")
def libfaketime() -> str:
    """libfaketime's path; missing: skip locally, fail under CI=true (like the PostgreSQL harness)."""
    path = find_libfaketime()
    if path is None:
        reason = "libfaketime is not installed (Debian package `faketime`; `make test` installs it as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: clock-skew tests must not be skipped)", pytrace=False)
        pytest.skip(reason)
    return path


def skewed(env: dict[str, str], lib: str, skew: str) -> dict[str, str]:
    """``env`` for a child whose wall clock is moved by ``skew`` (monotonic time stays real)."""
    env = dict(env)
    env["LD_PRELOAD"] = f"{lib}:{env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else lib
    env["FAKETIME"] = skew
    env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    env["NO_FAKE_STAT"] = "1"  # file times stay real
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no .pyc written by a process with a moved clock
    return env


def assert_skewed(child_clock: str, db_now: datetime, skew: str) -> None:
    """The child really saw its clock ``skew`` away from the database's (no vacuous pass)."""
    seen = datetime.fromisoformat(child_clock)
    off = seen - db_now
    assert abs(off - OFFSET[skew]) < CLOCK_TOLERANCE, (
        f"child clock {seen.isoformat()} is {off} off the database clock {db_now.isoformat()}, "
        f"expected about {OFFSET[skew]}: libfaketime did not apply"
    )


# ---- children ---------------------------------------------------------------------------------

SLEEP_FIX = """
import select, time


def _sleep(seconds):
    # libfaketime 0.9.10 (Debian 12) breaks time.sleep on Python >= 3.11 when the monotonic clock is
    # left alone: clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) fails with EINVAL
    # (wolfcw/libfaketime#426). select() sleeps the same real duration through an unfaked path.
    if seconds > 0:
        select.select([], [], [], seconds)


time.sleep = _sleep
"""
"""Prepended to every child before anything imports toolgate (so every ``time.sleep`` is this one)."""

CLI = (
    SLEEP_FIX
    + """
import sys
from datetime import UTC, datetime

print("clock=" + datetime.now(UTC).isoformat(), flush=True)
sys.argv = ["toolgate", *sys.argv[1:]]
from toolgate.cli.app import main

main()
"""
)
"""``python -m toolgate ARGS`` that first prints the process's own clock."""

WORKER = (
    SLEEP_FIX
    + """
import json, os, sys, threading, time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from toolgate.policy import PolicyRules
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.store import PostgresStore
from toolgate.testing import ScriptedChatModel, open_test_app
from toolgate.tools import Registry
from toolgate.tools.demo import REFUND_RELEASE, DemoSystem, demo_specs

key, signals, timeout_s, lease_s = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
store = PostgresStore(os.environ["TOOLGATE_DATABASE_URL"], key=os.environ["TOOLGATE_AUDIT_KEY"].encode())
print(json.dumps({"clock": datetime.now(UTC).isoformat(), "store_clock": store.now().isoformat()}), flush=True)
system = DemoSystem(store)


def signal(name, text=""):
    tmp = signals / (name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, signals / name)


def blocking(handler):
    def run(args, ctx):
        signal("started")
        deadline = time.monotonic() + 300
        while not (signals / "release").exists():  # blocks before the effect until the test releases it
            if time.monotonic() > deadline:
                raise RuntimeError("never released")
            time.sleep(0.01)
        return handler(args, ctx)
    return run


specs = [
    replace(s, handler=blocking(s.handler), timeout_s=timeout_s) if s.name == "issue_refund" else s
    for s in demo_specs(system)
]
gateway = open_test_app(tools=Registry.of(REFUND_RELEASE, specs, system),
                        policy=DEMO_RELEASES[REFUND_RELEASE].policy, store=store, start=False).gateway
delivery = gateway.executor.deliver(key, worker_id="slow-worker", lease_s=lease_s, wait_s=1)
signal("delivered", json.dumps({"status": delivery.status, "claim": delivery.claim}))
# an overrunning handler lives on; its lease keeper records the late outcome when it ends
for thread in threading.enumerate():
    if thread.name.startswith("toolgate-lease-"):
        thread.join(timeout=300)
print(json.dumps({"final": store.operations.get(key).status}), flush=True)
store.close()
"""
)
"""A worker (clock skewed by its environment) delivering one refund whose handler blocks on a file.

argv: operation key, signal directory, the handler's timeout, the claim lease."""


DEADLINE = (
    SLEEP_FIX
    + """
import json, os, sys
from datetime import UTC, datetime

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from toolgate.graph import Context
from toolgate.graph.state import gateway_state
from toolgate.store import PostgresStore
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry
from toolgate.tools.demo import REFUND_RELEASE, DemoSystem, demo_specs
from toolgate.tools.demo.identities import demo_principals
from toolgate.tools.demo.release import DEMO_RELEASES

deadline_s = float(sys.argv[1])
store = PostgresStore(os.environ["TOOLGATE_DATABASE_URL"], key=os.environ["TOOLGATE_AUDIT_KEY"].encode())
system = DemoSystem(store)
model = ScriptedChatModel(
    responses=[
        ai("Hello, how can I help?"),
        ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")),
        ai("It is on its way."),
    ]
)
app = open_test_app(tools=Registry.of(REFUND_RELEASE, demo_specs(system), system),
                    policy=DEMO_RELEASES[REFUND_RELEASE].policy, model=model, store=store, start=False)
judged = []
calibrated = store.calibrated_now


def counted():
    mark = store._clock_mark
    value = calibrated()
    judged.append({"at": value.isoformat(), "reused": store._clock_mark is mark})
    return value


store.calibrated_now = counted
graph = app.compiled(checkpointer=InMemorySaver())
store_clock = store.now()
turns = []
for text in ("Hello", "Where is my order O-5512?"):  # the first turn sets the deadline, the second judges it
    final = graph.invoke(
        {"messages": [HumanMessage(text)]},
        {"configurable": {"thread_id": "t-skew-deadline"}},
        context=Context(principal=demo_principals()["cust-ada"], deadline_s=deadline_s),
    )
    turns.append(gateway_state(final)["deadline_at"])  # a grouped key: read through the flat view
print(json.dumps({
    "clock": datetime.now(UTC).isoformat(),
    "store_clock": store_clock.isoformat(),
    "deadlines": turns,
    "judged": judged,
    "status": final.get("status"),
    "reason": final.get("status_reason"),
    "answer": final["messages"][-1].content,
    "tool": [m.status for m in final["messages"] if getattr(m, "tool_call_id", None) == "c1"],
}), flush=True)
model.assert_complete()
store.close()
"""
)
"""A process (clock skewed by its environment) running two turns of one thread with a task deadline
of argv[1] seconds: the first sets it, the second is judged by it (a read call)."""


CREDENTIAL = (
    SLEEP_FIX
    + """
import json, os
from dataclasses import replace
from datetime import UTC, datetime

from toolgate.graph.delivery.handler_scope import handler_context
from toolgate.store import PostgresStore
from toolgate.tools.credentials import ServiceScope
from toolgate.tools.demo import DemoSystem, demo_specs

store = PostgresStore(os.environ["TOOLGATE_DATABASE_URL"], key=os.environ["TOOLGATE_AUDIT_KEY"].encode())
status = next(s for s in demo_specs(DemoSystem(store)) if s.name == "get_service_status")
spec = replace(status, service_credential=ServiceScope("status-api", frozenset({"status:read"})))
ctx = handler_context(
    spec, store=store, provider=None, tenant_id="acme", user_id="cust-ada", credentials=None, deadline=None
)
credential = ctx.service_credential
print(json.dumps({
    "clock": datetime.now(UTC).isoformat(),
    "issued_at": credential.issued_at.isoformat(),
    "expires_at": credential.expires_at.isoformat(),
    "token": credential.token,
}), flush=True)
store.close()
"""
)
"""A process (clock skewed by its environment) handing a handler the built-in service credential."""


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> tuple[str, list[dict[str, str]]]:
    """Run the ``toolgate`` CLI in a child; its own clock and its ``key=value`` output lines."""
    proc = subprocess.run(
        [sys.executable, "-c", CLI, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=WAIT_S
    )
    assert proc.returncode == 0, f"toolgate {args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    first, _, rest = proc.stdout.partition("\n")
    assert first.startswith("clock="), proc.stdout
    return first.removeprefix("clock="), kv_lines(rest)


def wait_for(condition: Callable[[], bool], what: str, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``condition`` until true; fail if ``proc`` exits first or after `WAIT_S`."""
    deadline = time.monotonic() + WAIT_S
    delay = 0.005
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the worker exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class BlockingWorker:
    """The `WORKER` child: started skewed, released by the test, its output kept in files."""

    def __init__(self, tmp: Path, env: dict[str, str], key: str, *, timeout_s: float) -> None:
        self.signals = tmp / "signals"
        self.signals.mkdir()
        self.out, self.err = tmp / "worker.out", tmp / "worker.err"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", WORKER, key, str(self.signals), str(timeout_s), str(LEASE_S)],
                env=env,
                cwd=tmp,
                stdout=out,
                stderr=err,
            )

    def signalled(self, name: str) -> bool:
        return (self.signals / name).exists()

    def wait_signal(self, name: str) -> str:
        wait_for(lambda: self.signalled(name), f"the worker's {name!r} signal ({self.output()})", self.proc)
        return (self.signals / name).read_text()

    def release(self) -> None:
        (self.signals / "release").touch()

    def finish(self) -> list[dict[str, Any]]:
        """Release the handler, wait for the worker to exit cleanly, return its JSON output lines."""
        self.release()
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the worker did not finish after its release: {self.output()}") from None
        assert self.proc.returncode == 0, self.output()
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.startswith("{")]

    def output(self) -> str:
        return f"stdout={self.out.read_text()!r} stderr={self.err.read_text()[-3000:]!r}"


# ---- fixtures and helpers -----------------------------------------------------------------------


@pytest.fixture
def harness(pg_url: str) -> Iterator[Harness]:
    """The test's own view of the store (its clock is the real one)."""
    h = Harness(PostgresStore(pg_url, key=TEST_KEY))
    yield h
    h.store.close()


@pytest.fixture
def env(tmp_path: Path, pg_url: str) -> dict[str, str]:
    """Environment of every child: the test database, the refund release, quick status checks."""
    return cli_env(
        tmp_path, pg_url, TOOLGATE_RELEASE=REFUND_RELEASE, TOOLGATE_RECONCILE_DELAYS="0.05,0.05,0.05"
    )


def approved_refund(harness: Harness, thread: str) -> tuple[str, str]:
    """Propose a refund as cust-ada and approve it as fiona (finance); (operation key, proposal id)."""
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call(
                    "issue_refund", {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}, "c1"
                ),
            ),
        ]
    )
    facts = start(harness.graph(model), REFUND_REQUEST, "cust-ada", thread)["__interrupt__"][0].value
    proposal = facts["toolgate"]["proposals"][0]
    decide(harness.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    op = harness.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "approved"
    return str(proposal["operation_key"]), str(proposal["proposal_id"])


def events(harness: Harness, key: str) -> list[tuple[str, str]]:
    """(event, result) of every audit event of the operation, in order."""
    return [(e.event, e.result) for e in harness.store.audit.events(operation_key=key)]


def count(harness: Harness, key: str, event: str) -> int:
    return sum(name == event for name, _ in events(harness, key))


def lease_of(harness: Harness, key: str) -> datetime:
    op = harness.store.operations.get(key)
    assert op is not None and op.lease_expires_at is not None
    return parse_iso(op.lease_expires_at)


def wait_past_first_lease(harness: Harness, key: str, worker: BlockingWorker) -> None:
    """Wait until the lease held now has lapsed by the database clock; the claim must still be
    held then, by a renewal computed on the database clock (a renewal from a clock an hour slow
    would have put the lease an hour in the past)."""
    first = lease_of(harness, key)
    assert first > harness.store.now(), "the lease was not set from the database clock"
    wait_for(lambda: harness.store.now() > first, "the first lease to lapse (database clock)", worker.proc)
    wait_for(lambda: lease_of(harness, key) != first, "a lease renewal", worker.proc)
    assert lease_of(harness, key) > harness.store.now(), "the renewed lease is not live by the database clock"


# ---- the tests ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_slow_worker_clock_cannot_execute_an_expired_approval(
    libfaketime: str, harness: Harness, env: dict[str, str], tmp_path: Path
) -> None:
    harness.policy = replace(harness.policy, approval_minutes=WINDOW_S / 60)
    key, proposal_id = approved_refund(harness, "t-skew-expiry")
    proposal = harness.store.proposals.get(proposal_id)
    assert proposal is not None
    expires = parse_iso(proposal.expires_at)
    assert expires - parse_iso(proposal.created_at) == timedelta(seconds=WINDOW_S)

    wait_for(lambda: harness.store.now() >= expires, "the approval to expire by the database clock")
    op = harness.store.operations.get(key)
    assert op is not None and op.status == "approved"  # nobody has decided its expiry yet: the worker will

    clock, rows = run_cli(
        ["worker", "execute", "--operation-key", key, "--worker", "slow-worker"],
        skewed(env, libfaketime, SLOW),
        tmp_path,
    )
    assert_skewed(clock, harness.store.now(), SLOW)
    assert datetime.fromisoformat(clock) < expires, "by its own clock the worker must see a valid approval"

    assert rows[-1]["status"] == "expired" and rows[-1]["claim"] == "NOT_ATTEMPTED", rows
    op = harness.store.operations.get(key)
    assert op is not None and op.status == "expired" and op.owner is None and op.attempts == 0
    assert harness.payments() == 0 and harness.refunds() == 0
    assert count(harness, key, "proposal.expired") == 1
    assert count(harness, key, "operation.claimed") == 0 and count(harness, key, "handler.started") == 0


@pytest.mark.slow
def test_a_fast_worker_clock_executes_a_valid_approval_exactly_once(
    libfaketime: str, harness: Harness, env: dict[str, str], tmp_path: Path
) -> None:
    key, proposal_id = approved_refund(harness, "t-skew-fast")
    proposal = harness.store.proposals.get(proposal_id)
    assert proposal is not None
    expires = parse_iso(proposal.expires_at)
    assert harness.store.now() < expires

    clock, rows = run_cli(
        ["worker", "execute", "--operation-key", key, "--worker", "fast-worker"],
        skewed(env, libfaketime, FAST),
        tmp_path,
    )
    db_now = harness.store.now()
    assert_skewed(clock, db_now, FAST)
    assert datetime.fromisoformat(clock) > expires, "by its own clock the worker must see an expired approval"

    assert rows[-1]["status"] == "succeeded" and rows[-1]["claim"] == "ACQUIRED", rows
    op = harness.store.operations.get(key)
    assert op is not None and op.status == "succeeded" and op.owner == "fast-worker" and op.attempts == 1
    assert op.result is not None and op.result["amount_cents"] == 4999
    assert harness.payments() == 1 and harness.refunds() == 1
    assert count(harness, key, "operation.claimed") == 1 and count(harness, key, "handler.started") == 1
    assert count(harness, key, "proposal.expired") == 0
    for event in harness.store.audit.events(operation_key=key):  # audit times are the database's too
        assert abs(parse_iso(event.occurred_at) - db_now) < CLOCK_TOLERANCE, (event.event, event.occurred_at)


@pytest.mark.slow
def test_a_fast_recovery_clock_cannot_steal_a_live_lease_of_a_slow_worker(
    libfaketime: str, harness: Harness, env: dict[str, str], tmp_path: Path
) -> None:
    key, _ = approved_refund(harness, "t-skew-lease")
    worker = BlockingWorker(tmp_path, skewed(env, libfaketime, SLOW), key, timeout_s=300)
    try:
        worker.wait_signal("started")
        op = harness.store.operations.get(key)
        assert op is not None and op.status == "executing" and op.owner == "slow-worker"
        wait_past_first_lease(harness, key, worker)

        clock, rows = run_cli(["worker", "recover", "--grace", "0"], skewed(env, libfaketime, FAST), tmp_path)
        assert_skewed(clock, harness.store.now(), FAST)
        assert rows == [{"recovered": "0", "reconciled": "0", "redelivered": "0", "dead_letters_open": "0"}]
        op = harness.store.operations.get(key)
        assert op is not None and op.status == "executing" and op.owner == "slow-worker" and op.attempts == 1
        assert not worker.signalled("delivered") and harness.payments() == 0
    finally:
        lines = worker.finish()

    assert_skewed(lines[0]["clock"], parse_iso(op.updated_at), SLOW)
    assert abs(datetime.fromisoformat(lines[0]["store_clock"]) - parse_iso(op.updated_at)) < CLOCK_TOLERANCE
    assert json.loads((worker.signals / "delivered").read_text()) == {
        "status": "succeeded",
        "claim": "ACQUIRED",
    }
    final = harness.store.operations.get(key)
    assert final is not None and final.status == "succeeded" and final.attempts == 1
    assert harness.payments() == 1 and harness.refunds() == 1
    assert count(harness, key, "operation.claimed") == 1 and count(harness, key, "handler.started") == 1
    assert count(harness, key, "operation.recovered") == 0 and harness.store.operations.dead_letters() == []


@pytest.mark.slow
def test_an_overrunning_handler_keeps_its_lease_against_a_fast_recovery_clock(
    libfaketime: str, harness: Harness, env: dict[str, str], tmp_path: Path
) -> None:
    key, _ = approved_refund(harness, "t-skew-overrun")
    worker = BlockingWorker(tmp_path, skewed(env, libfaketime, SLOW), key, timeout_s=0.5)
    try:
        worker.wait_signal("started")
        delivered = json.loads(worker.wait_signal("delivered"))
        assert delivered == {"status": "unknown", "claim": "ACQUIRED"}, worker.output()
        op = harness.store.operations.get(key)
        assert op is not None and op.status == "unknown" and op.owner == "slow-worker"
        assert op.error is not None and op.error["kind"] == "timeout"
        wait_past_first_lease(harness, key, worker)  # the overrun's lease keeper renews on the database clock

        clock, rows = run_cli(["worker", "recover", "--grace", "0"], skewed(env, libfaketime, FAST), tmp_path)
        assert_skewed(clock, harness.store.now(), FAST)
        assert rows[0]["operation_key"] == key and rows[0]["reconciled"] == "in_flight", rows
        assert rows[0]["found"] == "false" and rows[0]["status"] == "unknown", rows
        assert rows[-1] == {"recovered": "0", "reconciled": "1", "redelivered": "0", "dead_letters_open": "0"}
        assert len(rows) == 2
        op = harness.store.operations.get(key)
        assert op is not None and op.status == "unknown" and op.attempts == 1 and harness.payments() == 0
    finally:
        lines = worker.finish()

    assert_skewed(lines[0]["clock"], parse_iso(op.updated_at), SLOW)
    assert lines[-1] == {"final": "succeeded"}
    final = harness.store.operations.get(key)
    assert final is not None and final.status == "succeeded" and final.attempts == 1
    assert final.result is not None and final.result["amount_cents"] == 4999
    assert harness.payments() == 1 and harness.refunds() == 1
    assert count(harness, key, "operation.claimed") == 1 and count(harness, key, "handler.started") == 1
    finished = [result for name, result in events(harness, key) if name == "handler.finished"]
    assert finished == ["unknown", "completed_late"]
    assert ("operation.reconciled", "in_flight") in events(harness, key)
    assert (
        count(harness, key, "operation.recovered") == 0
        and count(harness, key, "operation.dead_lettered") == 0
    )
    assert harness.store.operations.dead_letters(open_only=False) == []


def test_a_fast_process_judges_a_task_deadline_by_the_store_clock_without_a_round_trip(
    libfaketime: str, harness: Harness, env: dict[str, str], tmp_path: Path
) -> None:
    started = harness.store.now()
    proc = subprocess.run(
        [sys.executable, "-c", DEADLINE, str(30 * 60)],
        env=skewed(env, libfaketime, FAST),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-3000:]}"
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    db_now = harness.store.now()
    assert_skewed(seen["clock"], db_now, FAST)

    deadline = parse_iso(seen["deadlines"][0])
    assert seen["deadlines"] == [seen["deadlines"][0]] * 2  # set once, by the first turn
    # 30 minutes from the store's time, not from the child's an hour ahead
    assert started + timedelta(minutes=30) <= deadline <= db_now + timedelta(minutes=30)
    assert datetime.fromisoformat(seen["clock"]) > deadline, "by its own clock the deadline has passed"
    assert seen["status"] != "needs_review", seen  # neither the model node nor dispatch saw it passed
    assert seen["tool"] == ["success"]  # the read ran and was answered, then the model spoke
    assert "lookup_order [c1]: completed" in seen["answer"] and "It is on its way." in seen["answer"]
    judged = seen["judged"]
    assert len(judged) >= 4  # the model's three turns and dispatch
    for judgment in judged:  # each the store's time, none the child's an hour ahead
        assert started <= datetime.fromisoformat(judgment["at"]) <= db_now, judged
    assert any(j["reused"] for j in judged), "no judgment was made without a round trip of its own"


@pytest.mark.parametrize("skew", [SLOW, FAST])
def test_a_skewed_process_issues_service_credentials_by_the_store_clock(
    libfaketime: str, harness: Harness, env: dict[str, str], tmp_path: Path, skew: str
) -> None:
    """f. A handler's service credential is issued and expires by the database clock (redteam8):
    minted by a process an hour fast it lived an hour past its five minutes (a handler, loaded
    code, could keep using it), an hour slow it was expired on arrival (every downstream refused)."""
    started = harness.store.now()
    proc = subprocess.run(
        [sys.executable, "-c", CREDENTIAL],
        env=skewed(env, libfaketime, skew),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-3000:]}"
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    db_now = harness.store.now()
    assert_skewed(seen["clock"], db_now, skew)
    issued, expires = datetime.fromisoformat(seen["issued_at"]), datetime.fromisoformat(seen["expires_at"])
    assert started - timedelta(seconds=1) <= issued <= db_now, (issued, started, db_now)  # iat: whole seconds
    assert expires - issued == timedelta(minutes=5) and expires <= db_now + timedelta(minutes=5)
    # a downstream on the database's time accepts it now (not expired, not signed by a future key)
    on_store_time = HmacCredentialProvider(harness.store.keys.secret, clock=harness.store.now)
    assert on_store_time.verify(seen["token"], "status-api")["scope"] == "status:read"
