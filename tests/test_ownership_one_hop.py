"""The ownership lookups of one call travel to loaded code in one hop (issue 31, item 2): a call
naming several resources is judged at dispatch with one hop for all its lookups, not one each,
in order, each under its own deadline, the worker stopping at the first answer that refuses.
An owner check is loaded code all the same: one that raises, hangs past its deadline, answers
something that is not a status or answers for another tenant refuses that call alone, with its
exact code and one ``call.rejected`` event; the lookups after it are never asked, no handler
runs and the run goes on."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from support import Harness, start, tool_messages

from toolgate.policy import PolicyRules
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import ApprovalClass, NoRollback, Registry, ResourceRef, ToolSpec, loaded_code
from toolgate.tools.spec import HandlerContext, StrictArgs, ToolResult

PLANTED = "password=hunter2 api_key=sk-live-planted-0002"


class Sum(str):
    """An answer that claims to equal every status ("owned" included)."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class Payment(StrictArgs):
    payment_id: str


class ReadArgs(StrictArgs):
    reservation_id: str
    payments: list[Payment]


class Read(ToolResult):
    reservation_id: str
    methods: int


class Reservations:
    """A system of record whose owner check does what each id says: ``R-``/``PM-`` ids of
    cust-ada are owned, ``PM-gina`` is another tenant's, ``PM-raise`` raises with a secret in its
    message, ``PM-hang`` blocks until released, ``PM-sum`` answers no status."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.reads = 0
        self.hanging = threading.Event()
        self.release = threading.Event()

    def owner(self, resource_id: str, ctx: HandlerContext) -> Any:
        self.asked.append(resource_id)
        if resource_id == "PM-raise":
            raise RuntimeError(f"ownership database down ({PLANTED})")
        if resource_id == "PM-hang":
            self.hanging.set()
            self.release.wait(30)
            return "owned"
        if resource_id == "PM-sum":
            return Sum("owned")
        if resource_id == "PM-gina":
            return "foreign"
        return "owned" if ctx.user_id == "cust-ada" else "not_owner"

    def resource_status(self, kind: str, resource_id: str, tenant_id: str) -> Any:
        return "missing"  # never consulted: every resource of the tool has its owner check

    def read(self, args: ReadArgs, ctx: HandlerContext) -> Read:
        self.reads += 1
        return Read(reservation_id=args.reservation_id, methods=len(args.payments))


def read_spec(system: Reservations) -> ToolSpec:
    return ToolSpec(
        name="read_reservation",
        version="1.0.0",
        owner="travel",
        description="Read a reservation and the payment methods it would be paid with.",
        args_model=ReadArgs,
        result_model=Read,
        risk="read-only",
        effect="Reads one reservation.",
        timeout_s=5,
        max_output_bytes=2048,
        approval=ApprovalClass.none(),
        required_scopes=frozenset({"orders:read"}),
        handler=system.read,
        handler_revision="read-reservation/1.0.0",
        rollback=NoRollback("read-only: nothing to undo"),
        resource=ResourceRef(kind="reservation", argument="reservation_id", conflict=False, owner=system.owner),
        resources=(ResourceRef(kind="payment", argument="payments[].payment_id", conflict=False, owner=system.owner),),
    )


def call(payments: list[str], call_id: str) -> Any:
    args = {"reservation_id": "R-1", "payments": [{"payment_id": p} for p in payments]}
    return tool_call("read_reservation", args, call_id)


def run(harness: Harness, system: Reservations, *calls: Any, thread: str) -> dict[str, Any]:
    registry = Registry.of("travel/1.0.0", [read_spec(system)], system)
    policy = PolicyRules(policy_version="test", sha256="0" * 64, approval_minutes=15, rules=())
    model = ScriptedChatModel(responses=[ai("", *calls), ai("done")])
    graph = open_test_app(model=model, tools=registry, policy=policy, store=harness.store, start=False).compiled()
    return start(graph, "read my reservation", "cust-ada", thread)


def answers(state: dict[str, Any]) -> dict[str, Any]:
    return {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}


def rejected(harness: Harness, thread: str) -> list[tuple[str | None, str | None]]:
    return [
        (e.code, e.detail.get("stage"))
        for e in harness.store.audit.events()
        if e.thread_id == thread and e.event == "call.rejected"
    ]


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per hop to a loaded-code worker."""
    counted: list[int] = []
    worker = loaded_code._POOL.worker

    def counting() -> Any:
        counted.append(1)
        return worker()

    monkeypatch.setattr(loaded_code._POOL, "worker", counting)
    return counted


@pytest.fixture
def harness(tmp_path: Any) -> Harness:
    return Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))


def test_a_call_naming_three_resources_is_judged_in_one_hop(harness: Harness, hops: list[int]) -> None:
    system = Reservations()
    state = run(harness, system, call(["PM-ada", "PM-ada2"], "c1"), thread="t-three")

    assert answers(state)["c1"]["data"] == {"reservation_id": "R-1", "methods": 2}
    assert system.reads == 1
    # three lookups at dispatch in one hop, the same three at execute in the handler's hop
    assert system.asked == ["R-1", "PM-ada", "PM-ada2"] * 2
    assert len(hops) == 2
    assert rejected(harness, "t-three") == []


@pytest.mark.parametrize(
    ("hostile", "code", "retryable"),
    [
        ("PM-raise", "resolver_failed", True),
        ("PM-sum", "resolver_failed", True),
        ("PM-gina", "cross_tenant", False),
    ],
)
def test_a_hostile_lookup_among_several_refuses_its_call_alone_at_dispatch(
    harness: Harness, hops: list[int], hostile: str, code: str, retryable: bool
) -> None:
    system = Reservations()
    state = run(
        harness,
        system,
        call(["PM-ada", hostile, "PM-never"], "bad"),
        call(["PM-ada"], "good"),
        thread=f"t-{hostile}",
    )

    got = answers(state)
    assert (got["bad"]["error"], got["bad"]["retryable"]) == (code, retryable)
    assert got["good"]["data"] == {"reservation_id": "R-1", "methods": 1}  # answered on its own
    assert state["status"] == "done" and system.reads == 1  # the good call's handler only
    assert "PM-never" not in system.asked  # the worker stopped at the refusing answer
    assert rejected(harness, f"t-{hostile}") == [(code, None)]  # once, at dispatch
    # dispatch: one hop per call; execute: the good call's lookups with its handler
    assert len(hops) == 3
    assert PLANTED not in json.dumps(got) and PLANTED not in repr(harness.store.audit.events())


def test_a_lookup_hung_past_its_deadline_refuses_its_call_and_the_run_goes_on(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loaded_code, "LOOKUP_TIMEOUT_S", 0.3)
    system = Reservations()
    try:
        state = run(harness, system, call(["PM-ada", "PM-hang", "PM-never"], "hung"), thread="t-hang")
        assert system.hanging.is_set() and not system.release.is_set()  # still hanging
        got = answers(state)
        assert (got["hung"]["error"], got["hung"]["retryable"]) == ("resolver_failed", True)
        assert state["status"] == "done" and system.reads == 0
        assert rejected(harness, "t-hang") == [("resolver_failed", None)]
        assert "PM-never" not in system.asked
    finally:
        system.release.set()
