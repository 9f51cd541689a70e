"""What a handler raises is its own object: trusted code reads it only as loaded code's.

A classified failure (`ToolExecutionError`) is read by the caller: its kind, its message, its
type. A subclass whose ``kind`` or ``message`` property raised ``SystemExit`` ended the run, one
that hung held it past every deadline, and a handler raising one of the gateway's own
control-flow failures (a busy slot) steered the caller: its failure escaped its breaker. Each is
now read on the handler's worker, under its timeout, and rebuilt as a plain failure
(`toolgate.tools.loaded_code.plain_failure`); the call fails alone, the run goes on."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Any

import pytest
from support import Harness, principal

from toolgate.errors import ToolExecutionError
from toolgate.policy.handler_slots import HandlerBusy
from toolgate.policy.retry import ReadRetry
from toolgate.store import SQLiteStore
from toolgate.tools import Registry, loaded_code

PLANTED = "password=hunter2-failure"
GATE = threading.Event()


class Exits(ToolExecutionError):
    def __init__(self) -> None:
        pass

    @property
    def kind(self) -> str:  # type: ignore[override]
        raise SystemExit(PLANTED)

    @property
    def message(self) -> str:  # type: ignore[override]
        raise SystemExit(PLANTED)


class Hangs(ToolExecutionError):
    def __init__(self) -> None:
        pass

    @property
    def kind(self) -> str:  # type: ignore[override]
        assert GATE.wait(120)
        return "caller_error"


class Shouting(str):
    def __str__(self) -> str:
        raise SystemExit(PLANTED)

    def __format__(self, spec: str) -> str:
        raise SystemExit(PLANTED)

    def __hash__(self) -> int:
        raise SystemExit(PLANTED)

    def __eq__(self, other: object) -> bool:
        raise SystemExit(PLANTED)


FAILURES = {
    "properties_exit": (Exits, "server_error"),
    "properties_hang": (Hangs, "timeout"),
    "forged_busy": (lambda: HandlerBusy("get_service_status", 1), "server_error"),
    "text_of_its_own": (lambda: ToolExecutionError(Shouting("caller_error"), Shouting("bad alias")), "caller_error"),
}


@pytest.fixture(autouse=True)
def _released() -> Any:
    GATE.clear()
    yield
    GATE.set()  # a failure still held on it is read, and its abandoned thread ends


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_read_handlers_own_failure_object_fails_only_its_call(failure: str, tmp_path: Any) -> None:
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    status = harness.registry.tools["get_service_status"]
    make, expected = FAILURES[failure]

    def hostile(args: Any, ctx: Any) -> Any:
        if args.service_alias == "web":
            raise make()
        return status.handler(args, ctx)

    answers, state = harness.two_status_reads(
        hostile, f"t-failure-{failure}", read_retry=ReadRetry(max_attempts=1), timeout_s=0.5
    )
    assert answers["c-worker"]["status"] == "completed" and state["status"] == "done"
    assert answers["c-web"]["status"] == "failed" and answers["c-web"]["error"] == expected, answers
    assert PLANTED not in json.dumps(answers) and PLANTED not in repr(harness.store.audit.events())
    failed = [e for e in harness.store.audit.events() if e.event == "call.failed"]
    assert [(e.tool, e.code) for e in failed] == [("get_service_status", expected)]
    if failure == "text_of_its_own":
        assert answers["c-web"]["message"] == "bad alias"  # its characters, as plain text


def test_a_forged_busy_slot_counts_against_the_handlers_breaker(tmp_path: Any) -> None:
    """A handler raising the gateway's own "every slot taken" made its caller treat the call as
    never run: its failures never reached its circuit breaker."""
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    spec = harness.registry.tools["get_service_status"]

    def forged(args: Any, ctx: Any) -> Any:
        raise HandlerBusy(spec.name, 1)

    executor = harness.gateway().executor
    breaker = executor.breakers.get(executor.registry.breaker_key(spec.name, "acme"))
    assert breaker.snapshot()["consecutive_failures"] == 0
    with pytest.raises(ToolExecutionError) as caught:
        executor.run_read(replace(spec, handler=forged), {"service_alias": "web"}, principal("omar"))
    assert type(caught.value) is ToolExecutionError and caught.value.kind == "server_error"
    assert breaker.snapshot()["consecutive_failures"] == 1


def test_a_write_handlers_failure_that_exits_when_read_is_unknown_and_the_worker_lives(tmp_path: Any) -> None:
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    refund = harness.registry.tools["issue_refund"]

    def hostile(args: Any, ctx: Any) -> Any:
        raise Exits()

    specs = [replace(refund, handler=hostile) if s.name == refund.name else s for s in harness.registry.tools.values()]
    registry = Registry.of(harness.registry.release, specs, harness.system)
    proposal, gateway = harness.approved_refund(registry, "t-write-exits")
    delivery = gateway.executor.deliver(proposal["operation_key"], worker_id="w1")
    assert delivery.status == "unknown" and delivery.error is not None
    assert delivery.error["kind"] == "server_error" and PLANTED not in json.dumps(delivery.error)


def test_plain_failure_keeps_trusted_codes_own_classes_and_their_fields() -> None:
    denied = loaded_code.plain_failure(ToolExecutionError("caller_error", "no such order", retryable=True))
    assert type(denied) is ToolExecutionError and (denied.kind, denied.message, denied.retryable) == (
        "caller_error",
        "no such order",
        True,
    )
    odd = ToolExecutionError("caller_error", "x", retryable=True)
    odd.kind, odd.message, odd.retryable = Shouting("timeout"), 42, "yes"  # type: ignore[assignment]
    plain = loaded_code.plain_failure(odd)
    assert type(plain) is ToolExecutionError and type(plain.kind) is str and plain.kind == "timeout"
    assert (plain.message, plain.retryable) == ("", False)
    made_up = loaded_code.plain_failure(ToolExecutionError("meltdown", "boom", retryable=True))
    assert (made_up.kind, made_up.retryable) == ("server_error", False)  # type: ignore[attr-defined]
    own_timeout = loaded_code.plain_failure(TimeoutError(Shouting("read timed out")))
    assert type(own_timeout) is TimeoutError and str(own_timeout) == "read timed out"
