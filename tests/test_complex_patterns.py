"""Complex write patterns through the gateway: the preview/confirm pair with a single-use, payload-bound
token, and undoing a completed effect only through its declared rollback proposal."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command
from support import Harness, principal, start, tool_messages
from test_parallel_batches import Wide

from toolgate.errors import ApprovalError
from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.graph.review.rollback import propose_rollback
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call

PO = {
    "vendor_id": "V-100",
    "currency": "USD",
    "line_items": [{"sku": "SKU-7", "quantity": 3, "unit_price_cents": 139900}],
}


def gateway(wide: Wide) -> Any:
    return open_test_app(
        model=ScriptedChatModel(responses=[]),
        tools=wide.registry,
        policy=wide.policy,
        store=wide.store,
        start=False,
    ).gateway


def orders(wide: Wide) -> int:
    with wide.store.transaction(write=False) as tx:
        row = tx.one("SELECT COUNT(*) AS n FROM sor_purchase_orders")
    return int(row["n"]) if row else 0


def test_preview_then_approved_create_uses_the_token_once(tmp_path: Path) -> None:
    wide = Wide(tmp_path / "po.sqlite", latency_s=0)
    preview_model = ScriptedChatModel(
        responses=[ai("", tool_call("preview_purchase_order", PO, "p1")), ai("here")]
    )
    previewed = wide.graph(preview_model).invoke(
        {"messages": [("user", "3 laptops from V-100")]},
        {"configurable": {"thread_id": "t-preview"}},
        context=Context(principal=principal("lee")),
    )
    preview = json.loads(str(tool_messages(previewed)[0].content))["data"]
    assert preview["preview_token"].startswith("pvt_") and preview["total_cents"] > 3 * 139900  # tax included
    token = preview["preview_token"]

    create = ScriptedChatModel(
        responses=[ai("", tool_call("create_purchase_order", {"preview_token": token}, "c1")), ai("ordered")]
    )
    graph = wide.graph(create)
    config: Any = {"configurable": {"thread_id": "t-create"}}
    waiting = graph.invoke(
        {"messages": [("user", "order it")]}, config, context=Context(principal=principal("lee"))
    )
    facts = waiting["__interrupt__"][0].value["toolgate"]["proposals"][0]
    assert (
        facts["details"]["total_cents"] == preview["total_cents"]
    )  # the reviewer sees what the token creates
    assert orders(wide) == 0
    decide(gateway(wide), facts["proposal_id"], principal("paul"), "approve")
    final = graph.invoke(Command(resume={"wake": True}), config, context=Context())
    created = json.loads(str(tool_messages(final)[-1].content))
    assert created["status"] == "completed" and created["data"]["total_cents"] == preview["total_cents"]
    assert orders(wide) == 1

    replay = ScriptedChatModel(
        responses=[ai("", tool_call("create_purchase_order", {"preview_token": token}, "c2")), ai("no")]
    )
    replayed = wide.graph(replay).invoke(
        {"messages": [("user", "order it again")]},
        {"configurable": {"thread_id": "t-replay"}},
        context=Context(principal=principal("lee")),
    )
    refusal = json.loads(str(tool_messages(replayed)[-1].content))
    assert (
        refusal["status"] == "rejected" and refusal["error"] == "semantic_invalid"
    )  # used token: refused, not re-run
    assert orders(wide) == 1 and "__interrupt__" not in replayed


def test_a_completed_effect_is_undone_only_by_an_approved_rollback_proposal(tmp_path: Path) -> None:
    wide = Wide(tmp_path / "rollback.sqlite", latency_s=0)
    gw = gateway(wide)
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("update_inventory", {"sku": "SKU-7", "delta": -4, "reason": "shipped"}, "u1")),
            ai("done"),
        ]
    )
    graph = wide.graph(model)
    config: Any = {"configurable": {"thread_id": "t-undo"}}
    waiting = graph.invoke(
        {"messages": [("user", "ship 4")]}, config, context=Context(principal=principal("lee"))
    )
    facts = waiting["__interrupt__"][0].value["toolgate"]["proposals"][0]
    decide(gw, facts["proposal_id"], principal("wanda"), "approve")
    graph.invoke(Command(resume={"wake": True}), config, context=Context())
    assert wide.on_hand() == 6

    undo = propose_rollback(gw, facts["operation_key"], principal("lee"))
    assert undo.tool == "update_inventory" and undo.arguments["delta"] == 4
    assert propose_rollback(gw, facts["operation_key"], principal("lee")).proposal_id == undo.proposal_id
    assert wide.on_hand() == 6  # nothing happens before approval
    assert gw.executor.deliver(undo.operation_key, worker_id="w").status == "pending_approval"
    decide(gw, undo.proposal_id, principal("wanda"), "approve")
    assert gw.executor.deliver(undo.operation_key, worker_id="w").status == "succeeded"
    assert wide.on_hand() == 10

    with pytest.raises(ApprovalError) as outsider:
        propose_rollback(gw, facts["operation_key"], principal("cust-ada"))
    assert outsider.value.code == "unauthorized"  # the rollback is judged like any call by its requester
    second = ScriptedChatModel(
        responses=[
            ai("", tool_call("update_inventory", {"sku": "SKU-7", "delta": 2, "reason": "received"}, "u2")),
            ai("ok"),
        ]
    )
    pending = wide.graph(second).invoke(
        {"messages": [("user", "receive 2")]},
        {"configurable": {"thread_id": "t-p"}},
        context=Context(principal=principal("lee")),
    )
    key = pending["__interrupt__"][0].value["toolgate"]["proposals"][0]["operation_key"]
    with pytest.raises(ApprovalError) as not_done:
        propose_rollback(gw, key, principal("lee"))
    assert not_done.value.code == "not_completed"


def test_polling_a_long_running_job_is_not_a_loop(tmp_path: Path) -> None:
    wide = Wide(tmp_path / "jobs.sqlite", latency_s=0)
    job = wide.services.reports.submit(
        "acme", "sales_summary", date(2026, 1, 1), date(2026, 1, 31), idempotency_key="idem_poll_test"
    )
    polls = [ai("", tool_call("check_job_status", {"job_id": job["job_id"]}, f"p{i}")) for i in range(4)]
    state = wide.graph(ScriptedChatModel(responses=[*polls, ai("still running")])).invoke(
        {"messages": [("user", "is my report ready?")]},
        {"configurable": {"thread_id": "t-poll"}},
        context=Context(principal=principal("lee")),
    )
    statuses = [json.loads(str(m.content))["status"] for m in tool_messages(state)]
    assert statuses == ["completed"] * 4 and state["status"] == "done"


def test_a_completed_effect_without_a_declared_rollback_cannot_be_rolled_back(harness: Harness) -> None:
    """A restart declares no rollback (`NoRollback`): asking to undo one is refused ``no_rollback``
    and nothing is proposed."""
    restart = {"service_alias": "web", "reason": "stuck"}
    model = ScriptedChatModel(responses=[ai("", tool_call("restart_service", restart, "r1")), ai("done")])
    graph = harness.graph(model)
    waiting = start(graph, "Restart web.", "sam", "t-no-undo")
    facts = waiting["__interrupt__"][0].value["toolgate"]["proposals"][0]
    gw = harness.gateway()
    decide(gw, facts["proposal_id"], principal("omar"), "approve")
    graph.invoke(
        Command(resume={"wake": True}), {"configurable": {"thread_id": "t-no-undo"}}, context=Context()
    )
    assert harness.store.operations.get(facts["operation_key"]).status == "succeeded"  # type: ignore[union-attr]
    with pytest.raises(ApprovalError) as none:
        propose_rollback(gw, facts["operation_key"], principal("sam"))
    assert none.value.code == "no_rollback"
    assert len(harness.store.proposals.list("pending_approval")) == 0
