"""Any tool name works end to end: the model calls a provider-safe wire name, and people read the
tool's own name everywhere (proposal, interrupt, ToolMessage, audit). An argument the operator
declared is not an identity (a loan's ``principal``) passes dispatch; an identity-like key that is
no declared argument is still refused as ``identity_in_arguments``."""

from __future__ import annotations

import json
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict
from support import Harness, principal, start, tool_messages

from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.policy import PolicyRules
from toolgate.releases.bundle import NoResources
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import ApprovalClass, NoRollback, Registry
from toolgate.tools.shapes.thirdparty import spec_from_tool_definition


class Posted(BaseModel):
    model_config = ConfigDict(extra="ignore")
    posted: bool
    principal: int


CALLS: list[dict[str, Any]] = []


def post(args: Any, ctx: Any) -> Posted:
    CALLS.append(dict(args))
    return Posted(posted=True, principal=args["principal"])


LEDGER = {
    "name": "Ledger.post",
    "description": "Post a loan to the ledger.",
    "input_schema": {
        "type": "object",
        "properties": {"loan_id": {"type": "string"}, "principal": {"type": "integer", "minimum": 1}},
        "required": ["loan_id", "principal"],
        "additionalProperties": False,
    },
}


def test_people_read_the_real_name_and_a_declared_non_identity_passes(harness: Harness) -> None:
    CALLS.clear()
    spec = spec_from_tool_definition(
        LEDGER,
        handler=post,
        result_model=Posted,
        version="1.0.0",
        owner="lending",
        risk="caution",
        effect="Posts the loan.",
        timeout_s=5,
        max_output_bytes=1024,
        approval=ApprovalClass.role("finance"),
        required_scopes=frozenset({"orders:read"}),
        handler_revision="ledger-post/1.0.0",
        rollback=NoRollback("a posting is reversed by a new posting"),
        identity_exempt=frozenset({"principal"}),
    )
    assert spec.name == "Ledger.post" and spec.wire_name != spec.name
    registry = Registry.of("lending/1.0.0", [spec], NoResources())
    rules = PolicyRules(policy_version="t", sha256="0" * 64, approval_minutes=15, rules=())
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call(spec.wire_name, {"loan_id": "L-1", "principal": 25000}, "ok"),
                tool_call(
                    spec.wire_name, {"loan_id": "L-2", "principal": 9, "approved_by": "boss"}, "smuggled"
                ),
            ),
            ai("posted"),
        ]
    )
    app = open_test_app(model=model, tools=registry, policy=rules, store=harness.store, start=False)
    gateway = app.gateway
    graph = app.compiled(checkpointer=InMemorySaver())
    waiting = start(graph, "post the loan", "rita", "t-wire")
    assert [t["function"]["name"] for t in model.requests[0].tools] == [spec.wire_name]
    value = waiting["__interrupt__"][0].value
    [proposal] = value["toolgate"]["proposals"]
    assert proposal["tool"] == "Ledger.post" and value["action_requests"][0]["name"] == "Ledger.post"
    assert value["action_requests"][0]["args"] == {"loan_id": "L-1", "principal": 25000}
    decide(gateway, proposal["proposal_id"], principal("fiona"), "approve")
    done = graph.invoke(
        Command(resume={"wake": True}), {"configurable": {"thread_id": "t-wire"}}, context=Context()
    )
    answers = {m.tool_call_id: (m.name, json.loads(str(m.content))) for m in tool_messages(done)}
    assert answers["ok"][1]["status"] == "completed" and answers["ok"][0] == "Ledger.post"
    assert answers["smuggled"][1]["error"] == "identity_in_arguments"
    assert CALLS == [{"loan_id": "L-1", "principal": 25000}]
    [(stored, operation)] = harness.store.proposals.list()
    assert stored.tool == "Ledger.post" and operation.status == "succeeded"
    tools = {e.tool for e in harness.store.audit.events() if e.tool}
    assert tools == {"Ledger.post"}, tools  # never the wire name
