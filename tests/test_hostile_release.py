"""A release whose loaded code does everything it should not, run through the graph on both
backends (issue 27, item 1 and its first acceptance check).

Its read handler raises ``KeyboardInterrupt``, ``SystemExit`` and a ``BaseException`` of its own,
makes up a failure kind, puts a password and an API key into what it raises, and returns results
that cannot be serialized; its ownership check raises, hangs past its deadline and answers with an
object that claims to equal every status; its write handler makes its effect and then raises a
``BaseException`` or breaks its result contract; its review lookup raises, hangs and returns a
cycle; its status check raises ``SystemExit``; and a real shutdown interrupts a write mid-call.

Each time: no run crashes, each call gets its own code in its own ToolMessage, an approved write
makes at most one effect, nothing is left ``executing`` waiting for a lease, and the planted
secret is in no log, audit event, checkpoint, ToolMessage, stored operation or server response.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from starlette.testclient import TestClient
from support import Harness, log_text, principal, start, tool_messages

import toolgate.graph.server.http as http
from toolgate.clock import parse_iso
from toolgate.errors import ToolExecutionError
from toolgate.graph import Context
from toolgate.graph.delivery import claimed_write
from toolgate.graph.delivery.recovery import reconcile, reconciled_or_error
from toolgate.graph.review.decisions import decide
from toolgate.store import Store
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry, loaded_code
from toolgate.tools.demo.identities import demo_token
from toolgate.tools.spec import ToolResult

PLANTED = "password=hunter2 api_key=sk-live-planted-0001"
SECRETS = ("hunter2", "sk-live-planted-0001")


class OwnAbort(BaseException):
    """A `BaseException` of the handler's own, neither an `Exception` nor the process's."""


class Liar:
    """An ownership answer that claims to equal every status ("owned" included)."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


class Loose(ToolResult):
    """A result contract that takes any value, as a third-party tool's may."""

    value: Any = None


def _cycle() -> dict[str, Any]:
    found: dict[str, Any] = {"planted": PLANTED}
    found["self"] = found
    return found


def _raise(exc: BaseException) -> Callable[[], Any]:
    def act() -> Any:
        raise exc

    return act


READS: dict[str, tuple[Callable[[], Any], str]] = {
    # what the read handler does on its call, and the code that call must get
    "keyboard": (_raise(KeyboardInterrupt(PLANTED)), "server_error"),
    "system_exit": (_raise(SystemExit(PLANTED)), "server_error"),
    "own_abort": (_raise(OwnAbort(PLANTED)), "server_error"),
    "crash": (_raise(ValueError(PLANTED)), "server_error"),
    "made_up_kind": (_raise(ToolExecutionError(PLANTED, PLANTED, retryable=True)), "server_error"),
    "classified": (_raise(ToolExecutionError("caller_error", f"no such alias ({PLANTED})")), "caller_error"),
    "bytes": (lambda: Loose(value=b"\xff\xfe" + PLANTED.encode()), "result_invalid"),
    "cycle": (lambda: Loose(value=_cycle()), "result_invalid"),
    "object": (lambda: Loose(value=object()), "result_invalid"),
}
OWNERS = ("raises", "hangs", "lies")
"""What the ownership check of ``lookup_order`` does; each call is refused ``resolver_failed``."""


class HostileRelease:
    """The demo's refund release with every piece of loaded code replaced by a hostile one. Reads
    of the ``worker`` service and ownership checks take their behaviour from a queue, one per call
    ("ok" once it is empty); the others do what their attribute says."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.reads: list[str] = []
        self.owners: list[str] = []
        self.write = "ok"
        self.review = "ok"
        self.check = "ok"
        self.read_calls: list[str] = []
        """The behaviour of each read handler call, in order."""
        self.write_calls: list[str] = []
        self.unblock = threading.Event()  # what a hanging lookup waits for (set at teardown)
        self.started = threading.Event()  # a write handler made its effect (the shutdown test waits on it)
        tools = harness.registry.tools
        status, lookup, refund = tools["get_service_status"], tools["lookup_order"], tools["issue_refund"]
        assert lookup.resource is not None and lookup.resource.owner is not None and refund.reconcile
        owner, refund_handler, refund_check = lookup.resource.owner, refund.handler, refund.reconcile

        def read(args: Any, ctx: Any) -> Any:
            behaviour = self.reads.pop(0) if self.reads and args.service_alias == "worker" else "ok"
            self.read_calls.append(behaviour)
            if behaviour in READS:
                return READS[behaviour][0]()
            return Loose(value=status.handler(args, ctx).model_dump(mode="json"))

        def ownership(resource_id: str, ctx: Any) -> Any:
            behaviour = self.owners.pop(0) if self.owners else "ok"
            if behaviour == "raises":
                raise RuntimeError(f"ownership database down ({PLANTED})")
            if behaviour == "hangs":
                self.unblock.wait(60)
            if behaviour == "lies":
                return Liar()
            return owner(resource_id, ctx)

        def write(args: Any, ctx: Any) -> Any:
            self.write_calls.append(self.write)
            if self.write == "fails_first":
                raise ToolExecutionError(PLANTED, f"payments refused ({PLANTED})")
            done = refund_handler(args, ctx)  # the effect is made
            self.started.set()  # after the effect: a shutdown test then knows there is one to find
            if self.write == "then_aborts":
                raise OwnAbort(PLANTED)
            if self.write == "then_times_out":  # the downstream's own timeout, after the effect
                raise ToolExecutionError("timeout", "payments gateway timed out after 30 s", retryable=True)
            if self.write == "then_breaks_contract":
                return {"refund_id": 12, "planted": PLANTED}
            if self.write == "then_waits":
                self.unblock.wait(60)
            return done

        def review(args: Any, ctx: Any) -> Any:
            if self.review == "raises":
                raise RuntimeError(PLANTED)
            if self.review == "hangs":
                self.unblock.wait(60)
            if self.review == "cycle":
                return _cycle()
            return {"order_id": args.order_id, "note": PLANTED}  # shown, but redacted

        def check(args: Any, ctx: Any) -> Any:
            if self.check == "exits":
                raise SystemExit(PLANTED)
            return refund_check(args, ctx)

        changed = {
            status.name: replace(status, handler=read, result_model=Loose),
            lookup.name: replace(lookup, resource=replace(lookup.resource, owner=ownership)),
            refund.name: replace(refund, handler=write, review_details=review, reconcile=check),
        }
        specs = [changed.get(s.name, s) for s in tools.values()]
        self.registry = Registry.of(harness.registry.release, specs, harness.system)
        self.saver = InMemorySaver()

    def graph(self, *responses: Any) -> Any:
        model = ScriptedChatModel(responses=list(responses))
        app = open_test_app(
            model=model,
            tools=self.registry,
            policy=self.harness.policy,
            store=self.harness.store,
            start=False,
        )
        return app.compiled(checkpointer=self.saver)

    def gateway(self) -> Any:
        return open_test_app(
            model=ScriptedChatModel(responses=[]),
            tools=self.registry,
            policy=self.harness.policy,
            store=self.harness.store,
            start=False,
        ).gateway

    def propose_refund(self, thread: str, amount_cents: int) -> tuple[Any, dict[str, Any]]:
        """Ada asks for a refund of O-5512 on ``thread``: (its graph, the proposal it paused at)."""
        args = {"order_id": "O-5512", "amount_cents": amount_cents, "reason": "damaged"}
        graph = self.graph(ai("", tool_call("issue_refund", args, f"c-{thread}")), ai("asked for it"))
        state = start(graph, "refund O-5512", "cust-ada", thread)
        return graph, state["__interrupt__"][0].value["toolgate"]["proposals"][0]

    def resume(self, graph: Any, thread: str) -> dict[str, Any]:
        """Wake ``thread`` after its proposal was decided: the approval node sees it, execute runs."""
        result: dict[str, Any] = graph.invoke(
            Command(resume={"wake": True}),
            {"configurable": {"thread_id": thread}},
            context=Context(principal=principal("cust-ada"), reconcile_delays=(0.0,)),
        )
        return result

    def everything_shown(self, caplog: pytest.LogCaptureFixture, api: list[str]) -> list[str]:
        """Every place a secret could have gone: logs, audit, checkpoints, operations, the API."""
        checkpoints = [repr(c) for c in self.saver.list(None)]
        operations = [repr(op) for status in STATUSES for op in self.harness.store.operations.list(status)]
        return [log_text(caplog), repr(self.harness.store.audit.events()), *checkpoints, *operations, *api]


STATUSES = ("approved", "executing", "succeeded", "failed", "unknown", "dead_lettered", "pending_approval")


@pytest.fixture
def hostile(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostileRelease]:
    monkeypatch.setattr(loaded_code, "LOOKUP_TIMEOUT_S", 0.3)  # a hanging lookup is refused quickly
    release = HostileRelease(Harness(store))
    yield release
    release.unblock.set()  # hung lookups and handlers end with the test


def _nowhere(texts: list[str]) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


def _answers(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}


def test_hostile_reads_and_owner_checks_fail_their_own_calls_never_the_run(
    hostile: HostileRelease, caplog: pytest.LogCaptureFixture
) -> None:
    """Each hostile read and each hostile ownership answer, asked for beside an honest read in
    one turn: that call gets its code, the honest one is answered, the run finishes."""
    answers: dict[str, dict[str, Any]] = {}
    for name in (*READS, *OWNERS):
        hostile.reads = [name] if name in READS else []
        hostile.owners = [name] if name in OWNERS else []
        call = (
            tool_call("get_service_status", {"service_alias": "worker"}, f"c-{name}")
            if name in READS
            else tool_call("lookup_order", {"order_id": "O-5512"}, f"c-{name}")
        )
        honest = tool_call("get_service_status", {"service_alias": "web"}, f"honest-{name}")
        user = "omar" if name in READS else "cust-ada"
        turn = [call, honest] if name in READS else [call]
        state = start(hostile.graph(ai("", *turn), ai("done")), "look", user, f"t-{name}")
        assert state["status"] == "done", name  # the run finished: nothing it loaded crashed it
        answers.update(_answers(state))

    for name, (_, code) in READS.items():
        assert answers[f"c-{name}"]["status"] == "failed", name
        assert answers[f"c-{name}"]["error"] == code, name
        assert answers[f"honest-{name}"]["status"] == "completed", name  # the batch went on
    for name in OWNERS:
        assert answers[f"c-{name}"]["error"] == "resolver_failed", name
        assert answers[f"c-{name}"]["retryable"] is True
    hostile.owners = []
    state = start(
        hostile.graph(ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c-ok")), ai("done")),
        "look",
        "cust-ada",
        "t-ok",
    )
    assert _answers(state)["c-ok"]["status"] == "completed"  # the next honest check is answered
    assert [c for c in hostile.read_calls if c != "ok"] == list(READS)  # each hostile read ran once
    assert hostile.harness.counter.calls.get("lookup_order", 0) == 1  # only after an honest check
    events = hostile.harness.store.audit.events()
    failed = sorted(e.code or "" for e in events if e.event == "call.failed")
    assert failed == sorted(code for _, code in READS.values())
    rejected = [e.code for e in events if e.event == "call.rejected"]
    assert rejected.count("resolver_failed") == len(OWNERS)
    _nowhere([json.dumps(answers), *hostile.everything_shown(caplog, [])])


def test_a_hostile_write_makes_one_effect_and_its_outcome_is_reconciled(
    hostile: HostileRelease, caplog: pytest.LogCaptureFixture
) -> None:
    """The review lookup raises, hangs and returns a cycle: the proposal is still shown and
    decided. The handler makes its effect then raises a `BaseException` of its own: the operation
    is ``unknown`` (never executing, never failed), the run goes on; the status check exits the
    process (in its thread) right after, and once more when recovery asks (the operation stays
    unknown, the failure is reported), then finds the one refund."""
    store, harness = hostile.harness.store, hostile.harness
    shown: list[str] = []
    for review, said in (
        ("raises", "see the server log"),
        ("hangs", "in time"),
        ("cycle", "cannot be shown"),
    ):
        hostile.review = review
        graph, proposal = hostile.propose_refund(f"t-review-{review}", 1000 + len(shown))
        assert proposal["details"] is None and said in proposal["details_error"], review
        shown.append(json.dumps(proposal))
    hostile.review = "ok"
    graph, proposal = hostile.propose_refund("t-write", 1500)
    assert proposal["details"] == {"order_id": "O-5512", "note": "[REDACTED] api_key=[REDACTED]"}
    decide(hostile.gateway(), proposal["proposal_id"], principal("fiona"), "approve")

    hostile.write, hostile.check = "then_aborts", "exits"
    before = harness.refunds()
    state = hostile.resume(graph, "t-write")

    key = proposal["operation_key"]
    op = store.operations.get(key)
    assert op is not None and op.status == "unknown" and op.error and op.error["kind"] == "server_error"
    assert harness.refunds() == before + 1  # the effect happened once
    assert hostile.write_calls == ["then_aborts"]
    assert _answers(state)["c-t-write"]["status"] == "unknown"
    finished = [
        e.code for e in store.audit.events() if e.event == "handler.finished" and e.operation_key == key
    ]
    assert finished == ["handler_crash"]

    first = reconciled_or_error(hostile.gateway().executor, key, delays=(0.0,), sleep=lambda _: None)
    assert first.status == "error"  # the check exited (in its thread): reported, nothing decided
    assert store.operations.get(key).status == "unknown"  # type: ignore[union-attr]
    hostile.check = "ok"
    second = reconcile(hostile.gateway().executor, key, delays=(0.0,), sleep=lambda _: None)
    assert second.status == "succeeded" and second.found
    assert harness.refunds() == before + 1 and hostile.write_calls == ["then_aborts"]  # never again

    client = TestClient(http.create_app(hostile.gateway, waker_interval_s=None))
    headers = {"Authorization": f"Bearer {demo_token('fiona')}"}
    api = [
        client.get(f"/toolgate/proposals/{proposal['proposal_id']}", headers=headers).text,
        client.get(f"/toolgate/operations/{key}", headers=headers).text,
    ]
    assert '"status":"succeeded"' in api[1].replace(" ", "")
    _nowhere([*shown, json.dumps(_answers(state)), *hostile.everything_shown(caplog, api)])


@pytest.mark.parametrize(
    ("behaviour", "status", "kind"),
    [
        ("then_breaks_contract", "unknown", "server_error"),  # it returned: the effect may be done
        ("fails_first", "failed", "server_error"),  # its own made-up kind, with a secret in it
    ],
)
def test_a_write_that_returns_garbage_or_lies_about_its_failure(
    hostile: HostileRelease, caplog: pytest.LogCaptureFixture, behaviour: str, status: str, kind: str
) -> None:
    harness = hostile.harness
    graph, proposal = hostile.propose_refund(f"t-{behaviour}", 1200)
    decide(hostile.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    hostile.write, hostile.check = behaviour, "exits"  # the outcome stays as the handler left it
    before = harness.refunds()

    state = hostile.resume(graph, f"t-{behaviour}")

    op = harness.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == status and op.error is not None and op.error["kind"] == kind
    assert harness.refunds() == before + (behaviour != "fails_first")
    assert _answers(state)[f"c-t-{behaviour}"]["status"] == status
    _nowhere([json.dumps(_answers(state)), *hostile.everything_shown(caplog, [])])


def test_a_shutdown_during_a_write_leaves_it_unknown_and_reconcilable_at_once(
    hostile: HostileRelease, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process's own shutdown (a ``KeyboardInterrupt`` in the thread that waits for the
    handler) is not swallowed: it goes on. The operation is left ``unknown`` with its lease given
    up, so recovery reconciles it without waiting for the lease to lapse."""
    harness, store = hostile.harness, hostile.harness.store
    _, proposal = hostile.propose_refund("t-shutdown", 1300)
    gateway = hostile.gateway()
    decide(gateway, proposal["proposal_id"], principal("fiona"), "approve")
    hostile.write = "then_waits"
    real_wait = loaded_code.wait

    def interrupted_wait(future: Any, timeout_s: float, **kwargs: Any) -> Any:
        if kwargs.get("heartbeat") is None:  # a lookup's wait (the ownership check before the claim)
            return real_wait(future, timeout_s, **kwargs)
        assert hostile.started.wait(30)  # the claimed handler made its effect: now the signal arrives
        raise KeyboardInterrupt

    monkeypatch.setattr(claimed_write.loaded_code, "wait", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        gateway.executor.deliver(proposal["operation_key"], worker_id="w-shutdown", lease_s=600)
    monkeypatch.setattr(claimed_write.loaded_code, "wait", real_wait)
    hostile.unblock.set()  # the handler thread ends (in a real shutdown, with the process)

    key = proposal["operation_key"]
    op = store.operations.get(key)
    assert (
        op is not None
        and op.status == "unknown"
        and op.error
        == {
            "kind": "interrupted",
            "message": "the worker shut down during the call",
            "retryable": False,
        }
    )
    assert op.lease_expires_at is not None and parse_iso(op.lease_expires_at) <= store.now()  # no 600 s wait
    interrupted = [
        e for e in store.audit.events() if e.event == "handler.finished" and e.code == "interrupted"
    ]
    assert len(interrupted) == 1
    settled = reconcile(gateway.executor, key, delays=(0.0,), sleep=lambda _: None)
    assert settled.status == "succeeded"  # the status check found the one refund
    assert harness.refunds("O-5512") >= 1 and hostile.write_calls == ["then_waits"]


def test_a_write_whose_downstream_timed_out_is_unknown_reconciled_and_never_run_again(
    hostile: HostileRelease,
) -> None:
    """A write handler's own classified ``timeout`` (its downstream did not answer in time, so
    the effect may have happened) leaves the outcome ``unknown``, never ``failed`` (which would
    invite a second effect), and the status check settles it: here at once, by execute's own
    reconciliation. Before, it was recorded ``failed`` and never reconciled."""
    store, harness = hostile.harness.store, hostile.harness
    graph, proposal = hostile.propose_refund("t-downstream-timeout", 1700)
    decide(hostile.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    hostile.write = "then_times_out"
    before = harness.refunds()
    state = hostile.resume(graph, "t-downstream-timeout")

    key = proposal["operation_key"]
    trail = [(e.event, e.code) for e in store.audit.events(operation_key=key)]
    assert trail[-2:] == [("handler.finished", "timeout"), ("operation.reconciled", None)]
    op = store.operations.get(key)
    assert op is not None and op.status == "succeeded"
    assert _answers(state)["c-t-downstream-timeout"]["status"] == "completed"
    assert harness.refunds() == before + 1 and hostile.write_calls == ["then_times_out"]

    again = hostile.gateway().executor.deliver(key, worker_id="w2")
    assert again.duplicate and again.claim == "NOT_ATTEMPTED"
    assert harness.refunds() == before + 1 and hostile.write_calls == ["then_times_out"]  # never again
