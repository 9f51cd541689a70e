"""A handler that raises ``SystemExit``, ``KeyboardInterrupt`` or a `BaseException` of its own
fails its own call, never the run or the process: a read answers ``server_error`` and the batch
goes on; a write that made its effect first is ``unknown`` (its status check settles it), never
left ``executing`` until a lease lapses (issue 27, item 1)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from support import Harness

from toolgate.store import SQLiteStore
from toolgate.tools import Registry, loaded_code


class OwnAbort(BaseException):
    """A third-party library's own non-Exception signal."""


ABORTS: dict[str, type[BaseException]] = {
    "SystemExit": SystemExit,
    "KeyboardInterrupt": KeyboardInterrupt,
    "OwnAbort": OwnAbort,
}


@pytest.mark.parametrize("kind", sorted(ABORTS))
def test_the_worker_thread_turns_a_base_exception_into_that_calls_failure(kind: str) -> None:
    def abort() -> None:
        raise ABORTS[kind]("planted-detail")

    with pytest.raises(loaded_code.HandlerAborted, match=f"raised {kind}"):
        loaded_code.run_with_timeout(abort, 10.0)
    assert loaded_code.run_with_timeout(lambda: "still serving", 10.0) == "still serving"


@pytest.mark.parametrize("kind", sorted(ABORTS))
def test_a_read_that_raises_a_base_exception_answers_its_own_call(kind: str, tmp_path: Any) -> None:
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    status = harness.registry.tools["get_service_status"]

    def aborting(args: Any, ctx: Any) -> Any:
        if args.service_alias == "web":
            raise ABORTS[kind]("planted-detail")
        return status.handler(args, ctx)

    answers, state = harness.two_status_reads(aborting, f"t-abort-{kind}")

    assert answers["c-worker"]["status"] == "completed"
    assert answers["c-web"]["status"] == "failed" and answers["c-web"]["error"] == "server_error"
    assert "planted-detail" not in json.dumps(answers)
    assert state["status"] == "done"


@pytest.mark.parametrize("kind", sorted(ABORTS))
def test_a_write_that_raises_a_base_exception_after_its_effect_is_unknown(kind: str, tmp_path: Any) -> None:
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    refund = harness.registry.tools["issue_refund"]

    def effect_then_abort(args: Any, ctx: Any) -> Any:
        refund.handler(args, ctx)
        raise ABORTS[kind]("planted-detail")

    specs = [
        replace(refund, handler=effect_then_abort) if s.name == "issue_refund" else s
        for s in harness.registry.tools.values()
    ]
    registry = Registry.of(harness.registry.release, specs, harness.system)
    proposal, gateway = harness.approved_refund(registry, f"t-abort-write-{kind}")
    delivery = gateway.executor.deliver(proposal["operation_key"], worker_id="w1")

    assert delivery.status == "unknown"
    op = harness.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "unknown"  # not `executing` until the lease lapses
    assert harness.refunds() == 1 and harness.payments() == 1
    assert "planted-detail" not in json.dumps(delivery.error)
