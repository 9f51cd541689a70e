"""kill -9 of the executing process, (a) after the claim and before the effect, (b) after the
effect and before the outcome is stored: recovery ends with exactly one effect and the right
status, never two (PostgreSQL, real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from support import REFUND_REQUEST, TEST_KEY, Harness, principal, start

from toolgate.graph.delivery.recovery import recover
from toolgate.graph.review.decisions import decide
from toolgate.store import PostgresStore
from toolgate.testing import ScriptedChatModel, ai, tool_call

WORKER = """
import os, signal, sys
from dataclasses import replace
from toolgate.policy import PolicyRules
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.store import PostgresStore
from toolgate.testing import ScriptedChatModel, open_test_app
from toolgate.tools import Registry
from toolgate.tools.demo import REFUND_RELEASE
from toolgate.tools.demo import DemoSystem, demo_specs

url, key, point = sys.argv[1], sys.argv[2], sys.argv[3]
store = PostgresStore(url, key=KEY_LITERAL)
system = DemoSystem(store)

def crashing(handler):
    def run(args, ctx):
        if point == "after_claim":
            os.kill(os.getpid(), signal.SIGKILL)
        result = handler(args, ctx)
        if point == "after_effect":
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    return run

specs = [replace(s, handler=crashing(s.handler)) if s.name == "issue_refund" else s for s in demo_specs(system)]
gateway = open_test_app(tools=Registry.of(REFUND_RELEASE, specs, system),
                        policy=DEMO_RELEASES[REFUND_RELEASE].policy, store=store, start=False).gateway
gateway.executor.deliver(key, worker_id="doomed-worker", lease_s=0.5)
print("survived")
""".replace("KEY_LITERAL", repr(TEST_KEY))


def approved_refund(harness: Harness, thread: str) -> str:
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
    return str(proposal["operation_key"])


@pytest.mark.postgres
@pytest.mark.parametrize("point", ["after_claim", "after_effect"])
def test_killed_worker_is_recovered_with_exactly_one_effect(pg_url: str, point: str) -> None:
    harness = Harness(PostgresStore(pg_url, key=TEST_KEY))
    key = approved_refund(harness, f"t-crash-{point}")
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, pg_url, key, point], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    op = harness.store.operations.get(key)
    assert op is not None and op.status == "executing" and op.owner == "doomed-worker"
    assert harness.payments() == (1 if point == "after_effect" else 0)

    in_flight = harness.gateway().executor.deliver(key, worker_id="impatient", wait_s=0.1)
    assert in_flight.status == "executing" and not in_flight.duplicate  # reported in flight, never re-run
    time.sleep(0.6)  # the dead worker's lease lapses
    report = recover(harness.gateway().executor, worker_id="recovery", grace_s=0, delays=(0.01,))
    assert report.recovered == [key]
    final = harness.store.operations.get(key)
    assert final is not None and final.status == "succeeded"
    assert final.result is not None and final.result["amount_cents"] == 4999
    assert harness.refunds() == 1, "never two effects"
    assert harness.payments() == 1  # (a) delivered again with the same key once proven absent; (b) found
    events = [e.event for e in harness.store.audit.events(operation_key=key)]
    assert "operation.recovered" in events and "operation.reconciled" in events
    again = recover(harness.gateway().executor, worker_id="recovery", grace_s=0, delays=(0.01,))
    assert again.recovered == [] and harness.refunds() == 1
    harness.store.close()


@pytest.mark.postgres
def test_an_undeterminable_outcome_goes_to_the_dead_letter_list(pg_url: str) -> None:
    harness = Harness(PostgresStore(pg_url, key=TEST_KEY))
    key = approved_refund(harness, "t-dead")
    refund = harness.registry.tools["issue_refund"]
    harness.registry = replace(
        harness.registry, tools={**harness.registry.tools, refund.name: replace(refund, reconcile=None)}
    )
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, pg_url, key, "after_claim"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL
    time.sleep(0.6)
    report = recover(harness.gateway().executor, worker_id="recovery", grace_s=0, delays=(0.01,))
    assert [r.status for r in report.reconciled] == ["dead_lettered"] and report.redelivered == []
    letters = harness.store.operations.dead_letters()
    assert [d.operation_key for d in letters] == [key] and letters[0].context["tool"] == "issue_refund"
    op = harness.store.operations.get(key)
    assert op is not None and op.status == "dead_lettered" and harness.payments() == 0
    assert harness.gateway().executor.deliver(key, worker_id="w").claim == "NOT_ATTEMPTED"
    harness.store.close()


PAUSING_WORKER = WORKER.replace(
    """        if point == "after_claim":
            os.kill(os.getpid(), signal.SIGKILL)""",
    """        if point == "paused":  # SIGSTOP: the whole process, its lease heartbeat too, stands still
            os.kill(os.getpid(), signal.SIGSTOP)""",
).replace('print("survived")', "")
PAUSING_WORKER = PAUSING_WORKER.replace(
    'gateway.executor.deliver(key, worker_id="doomed-worker", lease_s=0.5)',
    'delivery = gateway.executor.deliver(key, worker_id="doomed-worker", lease_s=0.5)\nprint(delivery.status)',
)


@pytest.mark.postgres
def test_a_paused_worker_that_lost_its_claim_has_its_late_effect_audited(pg_url: str, tmp_path: Path) -> None:
    """A worker stopped (SIGSTOP) inside its handler past its lease is recovered and its write
    dead-lettered; resumed (SIGCONT), its handler makes the effect. Its outcome can no longer be
    stored (the claim is gone), but the effect is never unseen: ``handler.finished`` with
    ``outcome_not_stored`` says what the handler did, for the person holding the dead letter, and the worker
    goes on (on the base the outcome's InvalidTransitionError escaped the delivery, unaudited)."""
    harness = Harness(PostgresStore(pg_url, key=TEST_KEY))
    key = approved_refund(harness, "t-paused")
    refund = harness.registry.tools["issue_refund"]
    harness.registry = replace(
        harness.registry, tools={**harness.registry.tools, refund.name: replace(refund, reconcile=None)}
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSING_WORKER, pg_url, key, "paused"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,  # never the checkout's own folders ahead of the tree under test
    )
    try:
        _, status = os.waitpid(proc.pid, os.WUNTRACED)  # the handler stopped itself, claim held
        assert os.WIFSTOPPED(status), proc.stderr.read() if proc.stderr else status
        stale = threading.Event()
        for _ in range(200):  # until the store's clock says its lease lapsed (no heartbeat renews it)
            if harness.store.operations.stale_executing(0):
                break
            stale.wait(0.05)
        report = recover(harness.gateway().executor, worker_id="recovery", grace_s=0, delays=(0.01,))
        assert report.recovered == [key] and [r.status for r in report.reconciled] == ["dead_lettered"]
        assert harness.payments() == 0
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.split() == ["dead_lettered"]  # the stored status stands: the late outcome overwrote nothing
    assert harness.payments() == 1, "the resumed handler made its effect, once"
    op = harness.store.operations.get(key)
    assert op is not None and op.status == "dead_lettered" and op.owner == "doomed-worker"
    late = [e for e in harness.store.audit.events(operation_key=key) if e.event == "handler.finished"]
    assert [(e.result, e.code) for e in late] == [("not_stored", "outcome_not_stored")]
    assert late[0].detail == {"outcome": "succeeded", "status": "dead_lettered", "worker": "doomed-worker"}
    harness.store.close()


OVERRUNNING_WORKER = WORKER.replace(
    """        if point == "after_claim":
            os.kill(os.getpid(), signal.SIGKILL)""",
    """        sys.stdin.readline()  # past its timeout: until the test lets it go on""",
).replace(
    "specs = [replace(s, handler=crashing(s.handler))",
    "specs = [replace(s, handler=crashing(s.handler), timeout_s=0.2)",
).replace(
    'gateway.executor.deliver(key, worker_id="doomed-worker", lease_s=0.5)\nprint("survived")',
    """import threading
delivery = gateway.executor.deliver(key, worker_id="doomed-worker", lease_s=0.5)
print(delivery.status, flush=True)
for watcher in threading.enumerate():  # the overrunning handler's lease keeper, to its end
    if watcher.name.startswith("toolgate-lease-"):
        watcher.join()""",
)


@pytest.mark.postgres
def test_an_overrunning_handler_paused_past_its_lease_has_its_late_effect_audited(
    pg_url: str, tmp_path: Path
) -> None:
    """A handler past its timeout (the operation ``unknown``, its lease kept alive by the
    overrun's keeper) whose process is stopped (SIGSTOP) long enough for recovery to dead-letter
    it, then resumed (SIGCONT) to make its effect: the late success cannot be stored over the
    dead letter, and is audited ``outcome_not_stored`` (on the base it was dropped unseen)."""
    harness = Harness(PostgresStore(pg_url, key=TEST_KEY))
    key = approved_refund(harness, "t-overrun-paused")
    refund = harness.registry.tools["issue_refund"]
    harness.registry = replace(
        harness.registry, tools={**harness.registry.tools, refund.name: replace(refund, reconcile=None)}
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", OVERRUNNING_WORKER, pg_url, key, "overrun"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().split() == ["unknown"]  # timed out; its handler still runs
        os.kill(proc.pid, signal.SIGSTOP)
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        lapsed, executor = threading.Event(), harness.gateway().executor
        for _ in range(200):  # in flight until the store's clock says the keeper's last lease lapsed
            report = recover(executor, worker_id="recovery", grace_s=0, delays=(0.01,))
            if [r.status for r in report.reconciled] == ["dead_lettered"]:
                break
            lapsed.wait(0.05)
        assert harness.store.operations.get(key).status == "dead_lettered"  # type: ignore[union-attr]
        assert harness.payments() == 0
        proc.stdin.write("go\n")
        proc.stdin.flush()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert harness.payments() == 1, "the resumed handler made its effect, once"
    op = harness.store.operations.get(key)
    assert op is not None and op.status == "dead_lettered"
    late = [e for e in harness.store.audit.events(operation_key=key) if e.event == "handler.finished"]
    assert [(e.result, e.code) for e in late] == [("unknown", "timeout"), ("not_stored", "outcome_not_stored")]
    assert late[1].detail == {"outcome": "succeeded", "status": "dead_lettered", "worker": "doomed-worker"}
    harness.store.close()


@pytest.mark.postgres
def test_a_paused_worker_resumed_after_its_write_was_delivered_again_makes_no_second_effect(
    pg_url: str, tmp_path: Path
) -> None:
    """Stopped (SIGSTOP) after its claim, before its effect, past its lease: recovery proves the
    refund absent and delivers it again under the same operation key. Resumed (SIGCONT), the first
    worker's handler reaches the payment system with that key: one refund, never two, and its
    outcome overwrites nothing (audited ``outcome_not_stored``)."""
    harness = Harness(PostgresStore(pg_url, key=TEST_KEY))
    key = approved_refund(harness, "t-paused-again")
    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSING_WORKER, pg_url, key, "paused"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        stale = threading.Event()
        for _ in range(200):
            if harness.store.operations.stale_executing(0):
                break
            stale.wait(0.05)
        report = recover(harness.gateway().executor, worker_id="recovery", grace_s=0, delays=(0.01,))
        assert report.recovered == [key] and report.redelivered == [key]
        assert harness.refunds() == 1 and harness.payments() == 1
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.split() == ["succeeded"]  # the record recovery's delivery stored
    assert harness.refunds() == 1, "never two effects"
    assert harness.payments() == 2  # the resumed handler's request, deduplicated by the operation key
    op = harness.store.operations.get(key)
    assert op is not None and op.status == "succeeded" and op.owner == "recovery" and op.attempts == 2
    late = [e for e in harness.store.audit.events(operation_key=key) if e.event == "handler.finished"]
    assert [(e.result, e.code) for e in late] == [("completed", None), ("not_stored", "outcome_not_stored")]
    assert late[1].detail == {"outcome": "succeeded", "status": "succeeded", "worker": "doomed-worker"}
    harness.store.close()
