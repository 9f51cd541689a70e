"""A read result that cannot be bounded and serialized (not UTF-8, cyclic, 50,000 levels deep, a
plain object) fails its own call with ``result_invalid``, never the run: the other reads of the
batch still answer, the thread finishes, the failure is audited, and nothing of the result
reaches the model (issue 27, item 2)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from support import Harness

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
