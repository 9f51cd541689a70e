"""Model errors by class, with the real ``ChatOpenAI`` (Responses API) against the local replay.

The client makes no retries of its own (``max_retries=0``): toolgate's one retry loop decides.
A 429 or a 5xx is retried with capped, jittered backoff, only while the task deadline allows, and
costs exactly the extra requests it needs; a 400 or a 401 is sent once and ends the task with a
clear status. A retried model turn after an approved write never runs the write again.
"""

from __future__ import annotations

import pytest
from provider_flows import OPENAI, ModelErrors, approved_write_retried, local_harness
from replay_openai import (
    BAD_REQUEST,
    FAKE_KEY,
    RATE_LIMITED,
    SERVER_ERROR,
    UNAUTHORIZED,
    UNAVAILABLE,
    Reply,
    function_call_item,
    message_item,
    reasoning_item,
    response,
    usage,
)
from support import Harness, audit_events, check_each_free_of

ANSWER = response(
    "resp_err_answer", [message_item("msg_err_answer", "Order O-5512 was delivered.")], model="gpt-5-mini",
    tokens=usage(300, 12),
)  # fmt: skip
REFUND_ARGS = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
REFUND_TURN = response(
    "resp_err_refund",
    [
        reasoning_item("rs_err_refund", "gAAAAABoRetryReasoning0123456789"),
        function_call_item("fc_err_refund", "call_err_refund", "issue_refund", REFUND_ARGS),
    ],
    model="gpt-5-mini",
    tokens=usage(400, 90, 64),
)

harness = local_harness(OPENAI)
errors = ModelErrors(OPENAI, "t-errors", ANSWER)
"""Each task as cust-ada with ``ChatOpenAI`` on the replay of its script."""


def test_429_then_200_costs_exactly_one_extra_request(harness: Harness) -> None:
    errors.check_one_retry_after_429(harness, RATE_LIMITED)


def test_500_and_503_are_retried_then_the_attempts_run_out(harness: Harness) -> None:
    retries = errors.check_retried(harness, [SERVER_ERROR, UNAVAILABLE], [("http_500", 1), ("http_503", 2)])
    assert retries[1].detail["delay_ms"] <= 1000  # the cap doubles per retry
    errors.check_attempts_run_out(harness, UNAVAILABLE, 503)


@pytest.mark.parametrize(("reply", "status"), [(BAD_REQUEST, 400), (UNAUTHORIZED, 401)])
def test_400_and_401_are_sent_once_and_end_the_task_clearly(
    harness: Harness, reply: Reply, status: int
) -> None:
    recorded, shown = errors.check_sent_once_and_stopped(harness, reply, status)
    assert f"Task stopped for human review: model request failed (HTTP {status})." in shown
    check_each_free_of([recorded, shown], [FAKE_KEY, "sk-test", "Incorrect API key"])


def test_a_retry_never_waits_past_the_task_deadline(harness: Harness) -> None:
    final, replay = errors.run(harness, [RATE_LIMITED, ANSWER], "where is my order O-5512?", deadline_s=1e-6)
    assert len(replay.bodies()) == 1 and audit_events(harness.store, "model.retry") == []
    assert (final["status"], final["status_reason"]) == ("needs_review", "model request failed (HTTP 429)")


def test_a_retried_model_turn_after_an_approved_write_never_runs_it_again(harness: Harness) -> None:
    script = [REFUND_TURN, RATE_LIMITED, SERVER_ERROR, ANSWER]
    last = approved_write_retried(OPENAI, harness, script, "t-write-retry", "call_err_refund")
    outputs = [i for i in last["input"] if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["call_err_refund"]
    assert [e.code for e in audit_events(harness.store, "model.retry")] == ["http_429", "http_500"]
