"""Tool specs fail closed; schemas export in strict provider form; the scripted model is strict."""

from __future__ import annotations

import dataclasses

import pytest
from langchain_core.messages import HumanMessage
from pydantic import BaseModel, ConfigDict
from support import Harness

from toolgate.errors import DirectInvocationError, RegistryError
from toolgate.testing import ScriptedChatModel, UnexpectedModelCallError, ai, tool_call
from toolgate.tools import (
    ApprovalClass,
    NoRollback,
    anthropic_tool,
    openai_tool,
    strict_json_schema,
    to_structured_tool,
)
from toolgate.tools.demo.models import IssueRefundArgs, RestartServiceArgs


class Nested(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sku: str
    quantity: int


class WithOptional(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    note: str | None = None
    items: list[Nested]


def spec_of(harness: Harness, name: str):  # type: ignore[no-untyped-def]
    spec = harness.registry.get(name)
    assert spec is not None
    return spec


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_a_write_without_approval_class_is_refused_at_load(harness: Harness) -> None:
    refund = spec_of(harness, "issue_refund")
    with pytest.raises(RegistryError, match="write needs an approval class"):
        dataclasses.replace(refund, approval=ApprovalClass.none())
    with pytest.raises(RegistryError, match="no-rollback statement needs its reason"):
        dataclasses.replace(refund, rollback=NoRollback(""))
    with pytest.raises(RegistryError, match="owner is required"):
        dataclasses.replace(refund, owner=" ")
    read = spec_of(harness, "lookup_order")
    with pytest.raises(RegistryError, match="read-only tool must not declare an approval class"):
        dataclasses.replace(read, approval=ApprovalClass.role("operator"))


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_argument_models_must_forbid_extra_fields(harness: Harness) -> None:
    class Loose(BaseModel):
        order_id: str

    with pytest.raises(RegistryError, match="extra='forbid'"):
        dataclasses.replace(
            spec_of(harness, "lookup_order"), args_model=Loose, resource=None, audit_fields=frozenset()
        )


def test_strict_schema_closes_every_object_and_requires_every_property() -> None:
    schema = strict_json_schema(WithOptional)
    assert schema["additionalProperties"] is False and schema["required"] == ["name", "note", "items"]
    assert {"type": "null"} in schema["properties"]["note"]["anyOf"] and "default" not in schema[
        "properties"
    ]["note"]
    nested = schema["$defs"]["Nested"]
    assert nested["additionalProperties"] is False and nested["required"] == ["sku", "quantity"]
    assert "title" not in schema and "title" not in nested


def test_provider_forms() -> None:
    tool = openai_tool("restart_service", "Restart one service.", RestartServiceArgs)
    assert tool["type"] == "function" and tool["function"]["strict"] is True
    assert tool["function"]["parameters"]["properties"]["service_alias"]["enum"] == [
        "web",
        "worker",
        "scheduler",
    ]
    claude = anthropic_tool("issue_refund", "Refund.", IssueRefundArgs)
    assert set(claude) == {"name", "description", "input_schema"}
    assert claude["input_schema"]["additionalProperties"] is False


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_structured_tools_carry_the_pydantic_schema_and_refuse_direct_calls(harness: Harness) -> None:
    tools = {t.name: t for t in harness.registry.structured_tools()}
    assert tools["issue_refund"].args_schema is IssueRefundArgs
    with pytest.raises(DirectInvocationError):
        tools["issue_refund"].invoke({"order_id": "O-5512", "amount_cents": 1, "reason": "damaged"})
    assert harness.total_handler_calls() == 0
    assert to_structured_tool(spec_of(harness, "lookup_order")).description.startswith("Look up one")


def test_scripted_model_records_requests_and_is_strict() -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", {"order_id": "O-1"}, "c1"))])
    bound = model.bind_tools(
        [{"type": "function", "function": {"name": "lookup_order"}}],
        tool_choice="auto",
        parallel_tool_calls=False,
    )
    reply = bound.invoke([HumanMessage("hi")])
    assert reply.tool_calls[0]["id"] == "c1"
    assert model.requests[0].tool_names == ["lookup_order"]
    assert model.requests[0].options == {"tool_choice": "auto", "parallel_tool_calls": False}
    model.assert_complete()
    with pytest.raises(UnexpectedModelCallError):
        model.invoke([HumanMessage("again")])


def test_scripted_model_reports_unused_responses() -> None:
    model = ScriptedChatModel(responses=[ai("one"), ai("two")])
    model.invoke([HumanMessage("hi")])
    with pytest.raises(AssertionError, match="1 scripted response"):
        model.assert_complete()
