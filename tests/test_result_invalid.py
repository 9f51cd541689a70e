"""A read result that cannot be bounded and serialized (not UTF-8, cyclic, 50,000 levels deep, a
plain object) fails its own call with ``result_invalid``, never the run: the other reads of the
batch still answer, the thread finishes, the failure is audited, and nothing of the result
reaches the model (issue 27, item 2)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Any, ClassVar

import pytest
from support import Harness

from toolgate.policy.retry import ReadRetry
from toolgate.store import SQLiteStore
from toolgate.tools import Registry
from toolgate.tools.spec import ToolResult


class Loose(ToolResult):
    """A result contract that accepts any value, as a third-party tool's may."""

    value: Any = None


def _cyclic() -> dict[str, Any]:
    found: dict[str, Any] = {"marker": "cyclic-result-text"}
    found["self"] = found
    return found


def _deep() -> list[Any]:
    outer: list[Any] = []
    inner = outer
    for _ in range(50_000):
        inner.append([])
        inner = inner[0]
    return outer


HOSTILE = {
    "bytes": lambda: b"\xff\xfe not utf-8 result-text",
    "cyclic": _cyclic,
    "deep": _deep,
    "object": object,
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_an_unserializable_read_result_fails_only_its_own_call(kind: str, tmp_path: Any) -> None:
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    status = harness.registry.tools["get_service_status"]
    calls: list[str] = []

    def hostile(args: Any, ctx: Any) -> Any:
        calls.append(args.service_alias)
        if args.service_alias == "web":
            return Loose(value=HOSTILE[kind]())
        return Loose(value=status.handler(args, ctx).model_dump(mode="json"))

    # a timeout far beyond the work: at load 15 the 50,000-level result once took longer than the
    # tool's 5 s, was retried as a timed-out read and ran twice; this test is about its result
    answers, state = harness.two_status_reads(hostile, f"t-result-{kind}", result_model=Loose, timeout_s=120)

    assert sorted(calls) == ["web", "worker"]  # each handler ran once
    assert answers["c-worker"]["status"] == "completed"
    assert answers["c-web"]["status"] == "failed" and answers["c-web"]["error"] == "result_invalid"
    assert "result-text" not in json.dumps(answers)
    assert state["status"] == "done"
    failed = [e for e in harness.store.audit.events() if e.event == "call.failed"]
    assert [(e.tool, e.code) for e in failed] == [("get_service_status", "result_invalid")]


def test_a_write_whose_result_cannot_be_serialized_is_unknown_never_failed(tmp_path: Any) -> None:
    """The handler returned, so its effect may well be done: the operation is ``unknown`` (the
    status check settles it), never ``failed``, which would invite a second effect."""
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    refund = harness.registry.tools["issue_refund"]

    def effect_then_garbage(args: Any, ctx: Any) -> Any:
        refund.handler(args, ctx)
        return Loose(value=_cyclic())

    hostile = replace(refund, handler=effect_then_garbage, result_model=Loose)
    specs = [hostile if s.name == "issue_refund" else s for s in harness.registry.tools.values()]
    registry = Registry.of(harness.registry.release, specs, harness.system)
    proposal, gateway = harness.approved_refund(registry, "t-write-garbage")
    delivery = gateway.executor.deliver(proposal["operation_key"], worker_id="w1")

    assert delivery.status == "unknown" and delivery.error is not None
    assert delivery.error["kind"] == "result_invalid" and "cyclic-result-text" not in json.dumps(
        delivery.error
    )
    assert harness.refunds() == 1 and harness.payments() == 1
    op = harness.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "unknown"


# ---- results whose own methods are hostile: they run where the handler ran -------------------


class Dumps(Loose):
    """A result whose ``model_dump`` is its handler's code (held on ``gate``, or raising)."""

    gate: ClassVar[threading.Event | None] = None
    abort: ClassVar[bool] = False

    def model_dump(self, *args: Any, **kwargs: Any) -> Any:
        if type(self).abort:
            raise SystemExit(f"{PLANTED}")
        assert type(self).gate is not None and type(self).gate.wait(120)
        return super().model_dump(*args, **kwargs)


PLANTED = "password=hunter2-result-dump"


@pytest.mark.parametrize("behaviour", ["hangs", "exits"])
def test_a_read_result_whose_own_dump_hangs_or_exits_fails_only_its_own_call(
    behaviour: str, tmp_path: Any
) -> None:
    """A result's methods ran in the caller's thread: a ``model_dump`` that hung held the run past
    every deadline, one that raised ``SystemExit`` ended it. Both now run on the handler's
    worker, under its timeout: the call fails alone, the run goes on."""
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    status = harness.registry.tools["get_service_status"]
    gate = threading.Event()

    class Hostile(Dumps):
        pass

    Hostile.gate, Hostile.abort = gate, behaviour == "exits"

    def hostile(args: Any, ctx: Any) -> Any:
        if args.service_alias == "web":
            return Hostile(value="x")
        return Loose(value=status.handler(args, ctx).model_dump(mode="json"))

    try:
        answers, state = harness.two_status_reads(
            hostile, f"t-dump-{behaviour}", result_model=Loose, read_retry=ReadRetry(max_attempts=1), timeout_s=0.5
        )
    finally:
        gate.set()
    assert answers["c-worker"]["status"] == "completed" and state["status"] == "done"
    expected = "timeout" if behaviour == "hangs" else "server_error"
    assert answers["c-web"]["status"] == "failed" and answers["c-web"]["error"] == expected, answers
    assert PLANTED not in json.dumps(answers) and PLANTED not in repr(harness.store.audit.events())
    failed = [e for e in harness.store.audit.events() if e.event == "call.failed"]
    assert [(e.tool, e.code) for e in failed] == [("get_service_status", expected)]
