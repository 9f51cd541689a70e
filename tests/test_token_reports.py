"""Token figures where people read them besides the CLI trace: the approval API's trace view (behind
the same authentication and visibility as before) and the eval reports (per case and summed per
run, unknown where a response did not report a figure)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.messages.ai import UsageMetadata
from langgraph.types import Command
from starlette.testclient import TestClient
from support import REFUND_REQUEST, Harness, principal, start

import toolgate.graph.server.http as http
from toolgate.evals.fixtures import DEFAULT_DATASET, load_dataset
from toolgate.evals.gate import GateResult, run_release
from toolgate.evals.observation import usage
from toolgate.evals.report import build_report, lines
from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.testing import ScriptedChatModel, tool_call
from toolgate.tools.demo.identities import demo_token

REFUND = {"order_id": "O-5512", "amount_cents": 1000, "reason": "damaged"}


def figures(input_tokens: int, output_tokens: int, reasoning: int | None = None) -> UsageMetadata:
    """A ``usage_metadata`` as a provider package fills it (reasoning only when reported)."""
    meta = UsageMetadata(
        input_tokens=input_tokens, output_tokens=output_tokens, total_tokens=input_tokens + output_tokens
    )
    if reasoning is not None:
        meta["output_token_details"] = {"reasoning": reasoning}
    return meta


def test_the_api_trace_shows_the_task_tokens_only_to_those_who_may_see_it(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[
            AIMessage(
                content="",
                tool_calls=[tool_call("issue_refund", REFUND, "c-api")],
                usage_metadata=figures(700, 60, 32),
            ),
            AIMessage(content="Refunded.", usage_metadata=figures(820, 12, 0)),
        ]
    )
    graph = harness.graph(model)
    state = start(graph, REFUND_REQUEST, "cust-ada", "t-api-tokens")
    facts = state["__interrupt__"][0].value["toolgate"]["proposals"][0]
    gw = harness.gateway()
    decide(gw, facts["proposal_id"], principal("fiona"), "approve", seen_digest=facts["digest"])
    graph.invoke(
        Command(resume={"wake": True}), {"configurable": {"thread_id": "t-api-tokens"}}, context=Context()
    )
    client = TestClient(http.create_app(lambda: gw, waker_interval_s=None))
    url = f"/toolgate/operations/{facts['operation_key']}/trace"

    def get(user: str | None) -> Any:
        return client.get(url, headers={"Authorization": f"Bearer {demo_token(user)}"} if user else {})

    shown = get("audrey")  # audit events are for auditors, at this door as on the CLI
    assert shown.status_code == 200 and shown.json()["final"] == "succeeded"
    assert shown.json()["tokens"] == {
        "input": 1520,
        "output": 72,
        "reasoning": 32,
        "model_turns": 2,
        "without_usage": 0,
        "source": "reported",
    }
    missing = get(None)
    assert missing.status_code == 401 and "tokens" not in missing.json()
    reviewer = get("fiona")  # she approved it and may follow it, but reads no audit events
    assert reviewer.status_code == 403 and reviewer.json()["error"] == "not_auditor"
    assert "tokens" not in reviewer.json()
    foreign = get("gina")  # another tenant's reviewer: the operation does not exist for her
    assert foreign.status_code == 404 and "tokens" not in foreign.json()
    other_auditor = get("glen")  # another tenant's auditor: as an unknown id
    assert other_auditor.status_code == 404 and "tokens" not in other_auditor.json()


def test_case_usage_is_summed_from_the_responses_and_unknown_where_not_reported() -> None:
    call = AIMessage(
        content="",
        tool_calls=[tool_call("lookup_order", {"order_id": "O-5512"}, "c1")],
        usage_metadata=figures(400, 30, 20),
    )
    answer = AIMessage(content="Delivered.", usage_metadata=figures(520, 8, 0))
    final = AIMessage(content="Authoritative outcome ...", name="toolgate")  # the gateway's, not the model's
    thread = [HumanMessage("where?"), call, ToolMessage("{}", tool_call_id="c1"), answer, final]
    assert usage(thread, []) == {"input": 920, "output": 38, "reasoning": 20, "source": "reported"}
    silent = answer.model_copy(update={"usage_metadata": figures(520, 8)})  # no reasoning figure
    assert usage([*thread[:3], silent, final], [])["reasoning"] is None


def test_the_eval_report_sums_tokens_per_run() -> None:
    dataset = load_dataset(DEFAULT_DATASET)
    cases = [c for c in dataset.cases if c.id in ("sel-ada-order-status", "none-greeting")]
    run = run_release("ops-tools/1.1.0", cases)
    result = GateResult(dataset=dataset, candidate=run, control=None)
    # the scripted model reports nothing: estimated input and output, reasoning unknown
    estimated = [r.observation.tokens for r in run.records]
    assert {t["source"] for t in estimated} == {"estimated"} and all(t["input"] > 0 for t in estimated)
    cost = next(line for line in lines(result) if line.startswith("release=ops-tools/1.1.0 "))
    assert f"input_tokens={sum(t['input'] for t in estimated)} " in cost
    assert "reasoning_tokens=unknown tokens=estimated" in cost

    for record, tokens in zip(run.records, ((900, 70, 40), (300, 12, 0)), strict=True):
        record.observation.tokens = dict(
            zip(("input", "output", "reasoning"), tokens, strict=True), source="reported"
        )
    cost = next(line for line in lines(result) if line.startswith("release=ops-tools/1.1.0 "))
    assert "input_tokens=1200 output_tokens=82 reasoning_tokens=40 tokens=reported" in cost
    metrics = build_report(result)["candidate"]["metrics"]
    assert (metrics["input_tokens"], metrics["output_tokens"], metrics["reasoning_tokens"]) == (1200, 82, 40)
    assert metrics["tokens_per_task"] == 641.0
