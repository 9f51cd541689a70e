"""What reaches the model from a handler's result is the contract's fields and nothing else, however
the handler built the result: a subclass of the result model with fields of its own (a richer
internal record returned as it is), a ``model_construct``-ed instance that never met validation (a
nested dict with keys the contract lacks, a value of the wrong type). The allowlist is the result
model's fields, checked by validation every time; an instance's own class says nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel
from support import Harness

from toolgate.store import SQLiteStore
from toolgate.tools.demo.models import ServiceStatusResult
from toolgate.tools.spec import ToolResult


class StaffStatus(ServiceStatusResult):
    """The handler's own richer record: a subclass of the contract with fields the model must not see."""

    on_call_phone: str = "+1 415 555 0199 staff-only"
    internal_note: str = "staff-only-note"


class Owner(BaseModel):
    """A nested part of a contract."""

    team: str


class Owned(ToolResult):
    """A contract with a nested model."""

    owner: Owner


@pytest.fixture
def harness(tmp_path: Any) -> Harness:
    return Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))


def _status(harness: Harness) -> Any:
    return harness.registry.tools["get_service_status"].handler


def test_a_subclass_of_the_result_model_reaches_the_model_as_the_contract_only(harness: Harness) -> None:
    status = _status(harness)
    calls: list[str] = []

    def richer(args: Any, ctx: Any) -> Any:
        calls.append(args.service_alias)
        return StaffStatus(**status(args, ctx).model_dump())

    answers, state = harness.two_status_reads(richer, "t-allowlist-subclass")

    assert sorted(calls) == ["web", "worker"]
    assert answers["c-web"]["status"] == "completed" and answers["c-worker"]["status"] == "completed"
    assert "staff-only" not in json.dumps(answers)
    assert "staff-only" not in json.dumps(state["outcomes"], default=str)
    assert state["status"] == "done"


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # as in production: warned, not raised
def test_a_constructed_result_with_keys_the_contract_lacks_keeps_only_the_contract(harness: Harness) -> None:
    def constructed(args: Any, ctx: Any) -> Any:
        return Owned.model_construct(owner={"team": "platform", "internal_note": "staff-only-note"})

    answers, state = harness.two_status_reads(constructed, "t-allowlist-constructed", result_model=Owned)

    assert answers["c-web"]["status"] == "completed"
    assert "staff-only" not in json.dumps(answers)
    assert "platform" in json.dumps(answers["c-web"])
    assert state["status"] == "done"


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_a_constructed_result_of_the_wrong_type_broke_its_contract(harness: Harness) -> None:
    status = _status(harness)

    def constructed(args: Any, ctx: Any) -> Any:
        if args.service_alias == "web":
            return ServiceStatusResult.model_construct(service_alias="web", state="up", restarts="staff-only-text")
        return status(args, ctx)

    answers, state = harness.two_status_reads(constructed, "t-allowlist-wrong-type")

    assert answers["c-worker"]["status"] == "completed"
    assert answers["c-web"]["status"] == "failed" and answers["c-web"]["error"] == "server_error"
    assert "staff-only" not in json.dumps(answers)
    assert state["status"] == "done"
    failed = [e for e in harness.store.audit.events() if e.event == "call.failed"]
    assert [(e.tool, e.code) for e in failed] == [("get_service_status", "server_error")]
