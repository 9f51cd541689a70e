"""Provider refusals by class, with the real clients against the local replay servers.

A refusal in content (OpenAI Responses ``refusal`` part, Chat Completions ``message.refusal``,
Anthropic ``stop_reason="refusal"``, output stopped by a content filter) and a refusal raised as an
error (a policy 400 from either provider, ``ModelRefusalError``, ``ContentFilterFinishReasonError``)
never crash the run and never become an answer: the task ends ``needs_review``, ``model.refused``
is audited with provider, kind and a bounded reason, the request is sent once, and no tool of the
refused turn runs or is proposed, even when the refused response also carried a tool call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from langchain_core.exceptions import ModelRefusalError
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from openai.types.responses import ResponseOutputMessage, ResponseOutputRefusal
from provider_flows import ANTHROPIC, OPENAI, Cli, local_harness, run_task
from replay_anthropic import error_reply as anthropic_error
from replay_anthropic import message, text_block, tool_use_block
from replay_anthropic import usage as anthropic_usage
from replay_openai import (
    CHAT_PATH,
    ReplayServer,
    Reply,
    chat_completion,
    error_reply,
    function_call_item,
    response,
    usage,
)
from support import REFUND_REQUEST, Harness, audit_events, kv_lines, open_test_store, seed_people, start

from toolgate.models.selection import load_chat_model
from toolgate.policy.refusals import MAX_REASON_CHARS, refusal_in_error
from toolgate.policy.retry import call_with_retry

harness = local_harness(OPENAI)
REFUND_ARGS = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
REFUSED_TEXT = "I'm sorry, but I can't help with that request."


def refusal_item(item_id: str, text: str) -> dict[str, Any]:
    """An assistant message output item holding one ``refusal`` part (Responses API)."""
    item = ResponseOutputMessage(
        id=item_id, type="message", role="assistant", status="completed",
        content=[ResponseOutputRefusal(type="refusal", refusal=text)],
    )  # fmt: skip
    return item.model_dump(mode="json", exclude_none=True)


RESPONSES_REFUSAL = response(
    "resp_refused",
    [
        function_call_item("fc_refused", "call_refused", "issue_refund", REFUND_ARGS),
        refusal_item("msg_refused", REFUSED_TEXT),
    ],
    model="gpt-5-mini",
    tokens=usage(300, 20),
)
_filtered = dict(response("resp_filtered", [], model="gpt-5-mini", tokens=usage(300, 0)).body)
_filtered.update(status="incomplete", incomplete_details={"reason": "content_filter"})
RESPONSES_FILTERED = Reply(200, _filtered)
OPENAI_POLICY_ERROR = error_reply(
    400,
    "Invalid prompt: your prompt was flagged as potentially violating our usage policy. Please try again.",
    "invalid_request_error",
    "invalid_prompt",
)
CHAT_REFUSAL = chat_completion(
    {"role": "assistant", "content": None, "refusal": REFUSED_TEXT},
    "stop", prompt_tokens=200, completion_tokens=12, suffix="refused",
)  # fmt: skip
CHAT_FILTERED = chat_completion(
    {"role": "assistant", "content": None}, "content_filter", prompt_tokens=200, completion_tokens=0,
    suffix="filtered",
)  # fmt: skip
AZURE_FILTER_ERROR = error_reply(
    400,
    "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
    "invalid_request_error",
    "content_filter",
)
_anthropic_refusal = dict(
    message(
        "msg_01RefusedK2m4",
        [
            text_block("I can start on that, but"),
            tool_use_block("toolu_01Refused", "issue_refund", REFUND_ARGS),
        ],
        stop_reason="refusal",
        tokens=anthropic_usage(300, 20),
    ).body
)
_anthropic_refusal["stop_details"] = {"type": "refusal", "category": "cyber", "explanation": "x" * 900}
ANTHROPIC_REFUSAL = Reply(200, _anthropic_refusal)
ANTHROPIC_POLICY_ERROR = anthropic_error(
    400, "invalid_request_error", "Output blocked by content filtering policy"
)


def check_refused(
    harness: Harness, final: dict[str, Any], sent: int, provider: str, kind: str, raised: bool
) -> None:
    """The task ended for review, explained; one ``model.refused``; nothing ran or was proposed."""
    assert sent == 1  # never retried
    assert final["status"] == "needs_review"
    assert final["status_reason"].startswith(f"model refused ({provider} {kind})")
    shown = final["messages"][-1].content
    assert "Task stopped for human review: model refused" in shown
    assert not any(isinstance(m, AIMessage) and m.tool_calls for m in final["messages"])
    [refused] = audit_events(harness.store, "model.refused")
    assert (refused.code, refused.detail["provider"], refused.detail["kind"]) == (kind, provider, kind)
    assert refused.detail["raised"] is raised and len(refused.detail["reason"]) <= MAX_REASON_CHARS
    assert (
        audit_events(harness.store, "model.failed") == [] and audit_events(harness.store, "model.retry") == []
    )
    assert harness.total_handler_calls() == 0 and harness.store.proposals.list() == []
    assert harness.payments() == 0 and harness.refunds() == 0


@pytest.mark.parametrize(
    ("reply", "kind", "raised"),
    [(RESPONSES_REFUSAL, "refusal", False), (RESPONSES_FILTERED, "content_filter", False),
     (OPENAI_POLICY_ERROR, "policy_error", True)],
    ids=["refusal-part", "content-filter", "policy-error"],
)  # fmt: skip
def test_openai_responses_refusals_end_for_review(
    harness: Harness, reply: Reply, kind: str, raised: bool
) -> None:
    final, replay = run_task(OPENAI, harness, [reply], REFUND_REQUEST, "t-refused")
    check_refused(harness, final, len(replay.bodies()), "openai", kind, raised)
    if kind == "refusal":
        assert REFUSED_TEXT.rstrip(".") in final["status_reason"]


@pytest.mark.parametrize(
    ("reply", "kind", "raised"),
    [(CHAT_REFUSAL, "refusal", False), (CHAT_FILTERED, "content_filter", False),
     (AZURE_FILTER_ERROR, "policy_error", True)],
    ids=["message-refusal", "finish-content-filter", "content-filter-error"],
)  # fmt: skip
def test_openai_chat_completions_refusals_end_for_review(
    harness: Harness, reply: Reply, kind: str, raised: bool
) -> None:
    with ReplayServer([reply], path=CHAT_PATH) as replay:
        model = load_chat_model(
            OPENAI.settings(replay.base_url, model="openai:gpt-4.1-mini", openai_api="chat")
        )
        final = start(harness.graph(model), REFUND_REQUEST, "cust-ada", "t-chat-refused")
    check_refused(harness, final, len(replay.bodies()), "openai", kind, raised)


@pytest.mark.parametrize(
    ("reply", "kind", "raised"),
    [(ANTHROPIC_REFUSAL, "refusal", False), (ANTHROPIC_POLICY_ERROR, "policy_error", True)],
    ids=["stop-reason-refusal", "policy-error"],
)
def test_anthropic_refusals_end_for_review(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, reply: Reply, kind: str, raised: bool
) -> None:
    ANTHROPIC.local_only_here(monkeypatch)
    final, replay = run_task(ANTHROPIC, harness, [reply], REFUND_REQUEST, "t-anthropic-refused")
    check_refused(harness, final, len(replay.bodies()), "anthropic", kind, raised)
    if not raised:  # the explanation is kept bounded, not whole
        assert audit_events(harness.store, "model.refused")[0].detail["reason"].endswith("...")


def test_a_refusal_raised_by_langchain_ends_for_review_not_in_a_crash(harness: Harness) -> None:
    class Refusing(GenericFakeChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            raise ModelRefusalError("declined: sk-live-0123456789abcdef0123456789abcdef")

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    final = start(harness.graph(Refusing(messages=iter([]))), REFUND_REQUEST, "cust-ada", "t-raised")
    check_refused(harness, final, 1, "unknown", "refusal", True)
    [refused] = audit_events(harness.store, "model.refused")
    assert "sk-live-0123456789abcdef" not in refused.detail["reason"]  # redacted


def test_refusal_errors_are_classified_and_never_retried() -> None:
    filtered = openai.ContentFilterFinishReasonError()
    found = refusal_in_error(filtered)
    assert found is not None and (found.provider, found.kind, found.raised) == (
        "openai",
        "content_filter",
        True,
    )
    assert (
        refusal_in_error(ValueError("Output blocked by content filtering policy")) is None
    )  # no body, no code

    class QuotaWorded(Exception):  # a transient status: its wording never makes it a refusal
        status_code = 429
        body = {"error": {"code": "rate_limit_exceeded", "message": "see our usage policy for limits"}}

    assert refusal_in_error(QuotaWorded()) is None

    class PolicyRateLimited(Exception):  # a refusal carrying a retryable status still never retries
        status_code = 429
        body = {"error": {"code": "content_policy_violation", "message": "blocked"}}

    calls = []

    def refused() -> None:
        calls.append(1)
        raise PolicyRateLimited()

    with pytest.raises(PolicyRateLimited):
        call_with_retry(refused, sleep=lambda _s: None)
    assert len(calls) == 1


def test_the_cli_prints_needs_review_for_a_replayed_refusal(tmp_path: Path) -> None:
    """``toolgate run`` in its own process, ``ChatOpenAI`` on the replay: the refusal ends the
    task ``needs_review``, explained, and ``model.refused`` is in the store's audit log."""
    seed_people(tmp_path)
    with OPENAI.serve([RESPONSES_REFUSAL]) as replay:
        ran = Cli(OPENAI.cli_env(tmp_path, None, replay))(
            "run", REFUND_REQUEST, "--as", "cust-ada", "--thread", "t-cli"
        )
    assert kv_lines(ran.stdout)[0]["status"] == "needs_review", ran.stdout
    assert f"Task stopped for human review: model refused (openai refusal): {REFUSED_TEXT}\n" in ran.stdout
    store = open_test_store(tmp_path, None)
    try:
        [refused] = audit_events(store, "model.refused")
        assert (refused.code, refused.detail["provider"], refused.detail["raised"]) == (
            "refusal",
            "openai",
            False,
        )
        assert store.proposals.list() == []
    finally:
        store.close()


def test_a_refused_case_never_counts_as_success_in_evals() -> None:
    """The same dataset case, scripted (passes) and with a model that refuses (fails: needs_review)."""
    from toolgate.evals.fixtures import DEFAULT_DATASET, load_dataset
    from toolgate.evals.runner import CaseRunner
    from toolgate.evals.scoring import score_case

    case = next(
        c for c in load_dataset(DEFAULT_DATASET).cases if c.expected.status == "done" and c.expected.tool
    )
    refusing = GenericFakeChatModel(
        messages=iter([AIMessage("", additional_kwargs={"refusal": REFUSED_TEXT})])
    )
    refusing.__dict__["bind_tools"] = lambda *_a, **_k: refusing  # the fake binds no tools
    with CaseRunner("ops-tools/1.1.0", cases=[case]) as runner:
        assert score_case(case, runner.run_case(case)).passed
        refused = runner.run_case(case, model=refusing)
    score = score_case(case, refused)
    assert refused.status == "needs_review" and not score.passed
    assert "status: expected done, got needs_review" in score.reasons
    assert sum(refused.handler_calls.values()) == 0
