"""Fixed costs out of the hot path, counted (not timed): a delivery reads its immutable proposal
once, and a tool's exported definition is built once per process, not once per model turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import Harness, principal, start

from toolgate.graph.review import decide
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools import registry as registry_module


def test_an_approved_write_reads_its_proposal_once_per_delivery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call("issue_refund", {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}),
            )
        ]
    )
    proposal = start(harness.graph(model), "refund", "cust-ada", "t-reads")["__interrupt__"][0].value[
        "toolgate"
    ]["proposals"][0]
    gateway = harness.gateway()
    decide(gateway, proposal["proposal_id"], principal("fiona"), "approve")
    reads: list[str] = []
    real = harness.store.get_proposal

    def counted(proposal_id: str) -> Any:
        reads.append(proposal_id)
        return real(proposal_id)

    monkeypatch.setattr(harness.store, "get_proposal", counted)
    first = gateway.executor.deliver(proposal["operation_key"], worker_id="w1")
    again = gateway.executor.deliver(proposal["operation_key"], worker_id="w2")
    assert first.status == "succeeded" and again.duplicate
    assert len(reads) <= 1  # at most once for both deliveries (three reads per delivery before)
    assert harness.refunds() == 1


def test_a_tools_definition_is_built_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    specs = list(harness.registry.tools.values())
    builds: list[str] = []
    real = registry_module.openai_tool

    def counted(name: str, description: str, model: Any) -> Any:
        builds.append(name)
        return real(name, description, model)

    monkeypatch.setattr(registry_module, "openai_tool", counted)
    registry_module._openai_definition.cache_clear()
    first = harness.registry.openai_tools(specs)
    first[0]["function"]["name"] = "changed by a caller"  # the caller's copy, never the cached value
    second = harness.registry.openai_tools(specs)
    assert sorted(builds) == sorted(s.wire_name for s in specs)  # once each, not once per turn
    assert second[0]["function"]["name"] == specs[0].wire_name
