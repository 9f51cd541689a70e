"""Retries for safe reads (issue 32, the chapter's §9.3): an idempotent read whose handler timed out
or reported a 5xx-class failure is tried again with capped, jittered backoff and a bounded attempt
count, each retry audited; a write never is (its retry is the operation key and reconciliation).
Every wait goes to a fake sleep: nothing here sleeps for real.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support import Harness, audit_events, cli_env, run_cli_in_process

from toolgate.errors import ConfigurationError, ToolExecutionError
from toolgate.policy.breaker import BreakerOpenError
from toolgate.policy.handler_slots import HandlerBusy
from toolgate.policy.retry import DEFAULT_READ_RETRY, ReadRetry
from toolgate.store import Store
from toolgate.tools import Registry

UNAVAILABLE = ToolExecutionError("server_error", "HTTP 503 from the status service", retryable=True)


def _failing(*errors: ToolExecutionError) -> tuple[Any, list[int]]:
    """A call that raises ``errors`` in turn, then returns ``"ok"``; and its attempt log."""
    attempts: list[int] = []

    def call() -> str:
        attempts.append(len(attempts) + 1)
        if len(attempts) <= len(errors):
            raise errors[len(attempts) - 1]
        return "ok"

    return call, attempts


def test_retries_only_timeouts_and_retryable_server_errors_with_capped_jittered_waits() -> None:
    sleeps: list[float] = []
    policy = ReadRetry(
        max_attempts=3, base_delay_s=0.5, max_delay_s=0.8, sleep=sleeps.append, rng=random.Random(3)
    )
    timeout = ToolExecutionError("timeout", "no answer in 5 s", retryable=True)
    call, attempts = _failing(UNAVAILABLE, timeout)
    retried: list[tuple[int, str]] = []
    assert policy.call(call, lambda attempt, exc, delay: retried.append((attempt, exc.kind))) == "ok"
    assert attempts == [1, 2, 3] and retried == [(1, "server_error"), (2, "timeout")]
    assert len(sleeps) == 2 and 0 <= sleeps[0] <= 0.5 and 0 <= sleeps[1] <= 0.8  # 2 * 0.5 capped at 0.8
    assert len(set(sleeps)) == 2  # jittered, not a fixed schedule

    call, attempts = _failing(UNAVAILABLE, UNAVAILABLE, UNAVAILABLE, UNAVAILABLE)
    with pytest.raises(ToolExecutionError) as raised:
        policy.call(call)
    assert raised.value is UNAVAILABLE and attempts == [1, 2, 3]  # bounded: the third failure propagates

    never = [
        ToolExecutionError("caller_error", "no such service", retryable=False),
        ToolExecutionError("server_error", "the tool failed (KeyError)", retryable=False),  # a crash
        BreakerOpenError("get_service_status", 30.0),
        HandlerBusy("get_service_status", 2),
        ToolExecutionError("credential_refused", "expired", retryable=False),
    ]
    for error in never:
        sleeps.clear()
        call, attempts = _failing(error)
        with pytest.raises(ToolExecutionError):
            policy.call(call)
        assert attempts == [1] and sleeps == [], error.kind


def test_a_read_retry_policy_out_of_bounds_does_not_load() -> None:
    for bad in ({"max_attempts": 0}, {"max_attempts": 11}, {"base_delay_s": -1.0}):
        with pytest.raises(ConfigurationError):
            ReadRetry(**bad)
    assert DEFAULT_READ_RETRY.max_attempts == 3


def test_a_read_is_retried_after_a_503_then_succeeds(store: Store) -> None:
    harness = Harness(store)
    real = harness.registry.tools["get_service_status"].handler
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def flaky(args: Any, ctx: Any) -> Any:
        with lock:
            calls[args.service_alias] += 1
            first = calls[args.service_alias] == 1
        if args.service_alias == "worker" and first:
            raise ToolExecutionError("server_error", "HTTP 503 from the status service", retryable=True)
        return real(args, ctx)

    sleeps: list[float] = []
    answers, _ = harness.two_status_reads(flaky, "t-read-retry", read_retry=ReadRetry(sleep=sleeps.append))
    assert calls == {"worker": 2, "web": 1}  # the 503 read ran twice, the healthy one once
    assert answers["c-worker"]["status"] == "completed" and answers["c-web"]["status"] == "completed"
    assert len(sleeps) == 1 and 0 <= sleeps[0] <= DEFAULT_READ_RETRY.base_delay_s
    [retried] = audit_events(store, "call.retried")
    assert (retried.code, retried.tool, retried.call_id) == ("server_error", "get_service_status", "c-worker")
    assert retried.detail["attempt"] == 1
    assert [e.call_id for e in audit_events(store, "call.completed")].count("c-worker") == 1


def test_a_read_that_keeps_failing_stops_after_the_attempt_cap(store: Store) -> None:
    harness = Harness(store)
    real = harness.registry.tools["get_service_status"].handler
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def worker_down(args: Any, ctx: Any) -> Any:
        with lock:
            calls[args.service_alias] += 1
        if args.service_alias == "worker":
            raise ToolExecutionError("server_error", "HTTP 502", retryable=True)
        return real(args, ctx)

    sleeps: list[float] = []
    answers, _ = harness.two_status_reads(
        worker_down, "t-read-cap", read_retry=ReadRetry(sleep=sleeps.append)
    )
    assert calls == {"worker": 3, "web": 1} and len(sleeps) == 2  # three attempts, two waits
    assert answers["c-worker"]["status"] == "failed" and answers["c-worker"]["error"] == "server_error"
    assert answers["c-web"]["status"] == "completed"
    assert [e.detail["attempt"] for e in audit_events(store, "call.retried")] == [1, 2]


def test_a_write_after_a_503_is_never_retried(store: Store) -> None:
    harness = Harness(store)
    refund = harness.registry.tools["issue_refund"]
    calls: list[str] = []

    def unavailable(args: Any, ctx: Any) -> Any:
        calls.append(args.order_id)
        raise ToolExecutionError("server_error", "HTTP 503 from the payment service", retryable=True)

    specs = [
        replace(refund, handler=unavailable) if s.name == "issue_refund" else s
        for s in harness.registry.tools.values()
    ]
    proposal, gateway = harness.approved_refund(
        Registry.of(harness.registry.release, specs, harness.system), "t-w"
    )
    sleeps: list[float] = []
    executor = replace(gateway.executor, read_retry=ReadRetry(sleep=sleeps.append))
    delivery = executor.deliver(proposal["operation_key"], worker_id="w1")
    assert calls == ["O-5512"] and sleeps == []  # once: the same key is never sent again blindly
    # the 503 may have followed the effect: unknown, for its status check to settle (writes reconcile)
    assert delivery.status == "unknown" and (delivery.error or {}).get("kind") == "server_error"
    assert audit_events(store, "call.retried") == []
    again = executor.deliver(proposal["operation_key"], worker_id="w2")
    assert calls == ["O-5512"] and again.status == "unknown"  # a second delivery runs nothing


def test_the_cli_prints_the_seeds_retry_check_line(tmp_path: Path) -> None:
    ran = run_cli_in_process(["test-retries", "--all-states"], cli_env(tmp_path))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == (
        "429=retry_with_jitter invalid_arguments=no_retry refusal=no_retry pending_approval=no_retry "
        "handler_timeout=reconcile duplicate_delivery=stored_result max_attempts=3"
    )
    assert "model_429_attempts=3 model_400_attempts=1 read_503=retried read_handler_calls=2 " in lines[1]
    assert "write_503=reconcile write_handler_calls=1 write_status=unknown read_retries_audited=1" in lines[1]
    assert lines[2] == "retries=PASS"
    plain = run_cli_in_process(["test-retries"], cli_env(tmp_path))
    assert plain.returncode == 0 and plain.stdout.splitlines() == lines[:1]
