"""Anthropic errors by class, with the real ``ChatAnthropic`` against the local Messages API replay.

``ChatAnthropic`` is built with ``max_retries=0``, so toolgate's one retry loop decides, from the
status ``langchain-anthropic``'s error classes carry: a 429 (``rate_limit_error``), a 500
(``api_error``) or a 529 (``overloaded_error``) is retried and costs exactly the extra requests
it needs; a 400 or a 401 is sent once and ends the task with a clear status. A retried model turn
after an approved write never runs the write again, and its thinking block still goes back as it
came.
"""

from __future__ import annotations

import json

import pytest
from provider_flows import ANTHROPIC, ModelErrors, approved_write_retried, local_harness
from replay_anthropic import (
    API_ERROR,
    FAKE_KEY,
    INVALID_REQUEST,
    OVERLOADED,
    RATE_LIMITED,
    UNAUTHORIZED,
    blocks_of,
    message,
    text_block,
    thinking_block,
    tool_use_block,
    usage,
)
from replay_openai import Reply
from support import Harness, audit_events, check_each_free_of

ANSWER = message(
    "msg_01ErrAnswerK2m4", [text_block("Order O-5512 was delivered.")], stop_reason="end_turn",
    tokens=usage(300, 12),
)  # fmt: skip
REFUND_ARGS = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
TOOL_USE_ID = "toolu_01ErrRefundP3n5Q8w"
THINKING = thinking_block("Damaged on arrival: refund it in full.", "EqQBCkgIBxABGAIqQGVycm9yLXRlc3Q" * 4)
REFUND_TURN = message(
    "msg_01ErrRefundR6t8",
    [THINKING, tool_use_block(TOOL_USE_ID, "issue_refund", REFUND_ARGS)],
    stop_reason="tool_use",
    tokens=usage(400, 90),
)

harness = local_harness(ANTHROPIC)
errors = ModelErrors(ANTHROPIC, "t-anthropic-errors", ANSWER)
"""Each task as cust-ada with ``ChatAnthropic`` (thinking on) on the replay of its script."""


def test_429_then_200_costs_exactly_one_extra_request(harness: Harness) -> None:
    errors.check_one_retry_after_429(harness, RATE_LIMITED)


def test_529_overloaded_and_500_are_retried_within_the_attempt_cap(harness: Harness) -> None:
    errors.check_retried(harness, [OVERLOADED, API_ERROR], [("http_529", 1), ("http_500", 2)])
    errors.check_attempts_run_out(harness, OVERLOADED, 529)


@pytest.mark.parametrize(("reply", "status"), [(INVALID_REQUEST, 400), (UNAUTHORIZED, 401)])
def test_400_and_401_are_sent_once_and_end_the_task_clearly(
    harness: Harness, reply: Reply, status: int
) -> None:
    recorded, shown = errors.check_sent_once_and_stopped(harness, reply, status)
    check_each_free_of([recorded, shown], [FAKE_KEY, "sk-ant", "x-api-key"])
    assert harness.total_handler_calls() == 0


def test_a_retried_model_turn_after_an_approved_write_never_runs_it_again(harness: Harness) -> None:
    script = [REFUND_TURN, RATE_LIMITED, OVERLOADED, ANSWER]
    last = approved_write_retried(ANTHROPIC, harness, script, "t-anthropic-write-retry", TOOL_USE_ID)
    (assistant,) = blocks_of(last, "assistant")
    assert assistant[0] == THINKING
    (result,) = blocks_of(last, "user")[1]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", TOOL_USE_ID)
    assert [e.code for e in audit_events(harness.store, "model.retry")] == ["http_429", "http_529"]


DEEP = "[" * 3000 + "]" * 3000


def test_a_reply_nested_past_the_parser_ends_the_turn_for_review_never_the_run(harness: Harness) -> None:
    """The OpenAI path screens arguments nested past the parser (issue 29); a tool_use ``input``
    of 3,000 nested arrays (6 KB, well inside the output budget) crashed the Anthropic run inside
    the SDK's own parsing. The reply cannot be read, so no call of it can be judged: the turn ends
    for review, ``model.failed`` (``malformed_reply``, not retried), nothing runs
    (`toolgate.models.malformed_reply`)."""
    turn = message(
        "msg_01ErrDeepT1", [tool_use_block("toolu_01Deep", "lookup_order", {"order_id": "O-5512", "x": "D"})],
        stop_reason="tool_use", tokens=usage(300, 700),
    )  # fmt: skip
    deep = Reply(turn.status, turn.body, text=json.dumps(turn.body).replace('"x": "D"', f'"x": {DEEP}'))
    final, _ = errors.run(harness, [deep, ANSWER], "where is O-5512?")
    assert final["status"] == "needs_review" and "could not be read" in final["status_reason"]
    failed = [(e.code, e.detail) for e in harness.store.audit.events() if e.event == "model.failed"]
    assert failed == [("malformed_reply", {"error": "RecursionError"})]
    assert [e for e in harness.store.audit.events() if e.event == "model.retry"] == []
    assert harness.handler_calls == {}
