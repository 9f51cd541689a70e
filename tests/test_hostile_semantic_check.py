"""A tool's own semantic check, and its argument model's validators, are loaded code: whatever
they raise, however long the check blocks and whatever it returns, the call they judge is refused
``check_failed`` (fail closed, retryable) at dispatch, the run goes on, the other calls of the
turn are answered, nothing is proposed and nothing of its message reaches the model, the state or
the audit log. Run inline, a check that raised failed the whole run with its message, and one that
hung held dispatch with no deadline; so did a validator of the argument model that hung, which
now runs as loaded code too when the model brings code of its own
(`toolgate.tools.argument_code`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, ClassVar

import pytest
from pydantic import field_validator
from support import Harness, principal, start, tool_messages

from toolgate.errors import ToolExecutionError
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools import Registry, loaded_code

PLANTED = "password=hunter2 api_key=sk-live-planted-0002"
REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}


class Shouting(str):
    """Text whose own methods raise: only its characters may be read."""

    def __str__(self) -> str:
        raise RuntimeError(PLANTED)

    def __len__(self) -> int:
        raise RuntimeError(PLANTED)

    def __bool__(self) -> bool:
        raise RuntimeError(PLANTED)


@pytest.fixture
def released() -> Iterator[threading.Event]:
    """Set at the end of the test: a check held on it returns (its abandoned thread ends)."""
    event = threading.Event()
    yield event
    event.set()


def _refund_with_check(harness: Harness, check: Callable[[Any, Any], Any]) -> dict[str, Any]:
    """Ada's refund (``c-refund``) and her order's lookup (``c-order``) in one turn, with ``check``
    as the refund's semantic check; the thread's final state."""
    return _refund_turn(harness, semantic_check=check)


def _refund_turn(harness: Harness, refund_args: dict[str, Any] = REFUND, **changed: Any) -> dict[str, Any]:
    """Ada's refund (``c-refund``, ``refund_args``) and her order's lookup (``c-order``) in one
    turn, the refund tool ``changed`` (`dataclasses.replace`); the thread's final state."""
    refund = harness.registry.tools["issue_refund"]
    harness.registry = replace(
        harness.registry, tools={**harness.registry.tools, refund.name: replace(refund, **changed)}
    )
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call("issue_refund", refund_args, "c-refund"),
                tool_call("lookup_order", {"order_id": "O-5512"}, "c-order"),
            ),
            ai("done"),
        ]
    )
    return start(harness.graph(model), "refund O-5512", "cust-ada", "t-semantic")


def _raises(args: Any, ctx: Any) -> Any:
    raise RuntimeError(f"balance service down ({PLANTED})")


def _answers_a_number(args: Any, ctx: Any) -> Any:
    return 42


def _answers_a_mapping(args: Any, ctx: Any) -> Any:
    return {"problem": PLANTED}


def _aborts(args: Any, ctx: Any) -> Any:
    raise SystemExit(3)


@pytest.mark.parametrize("check", [_raises, _answers_a_number, _answers_a_mapping, _aborts])
def test_a_check_that_fails_refuses_its_call_only(harness: Harness, check: Any) -> None:
    state = _refund_with_check(harness, check)
    _refused_alone(harness, state)


def test_a_check_that_hangs_is_refused_at_its_deadline(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, released: threading.Event
) -> None:
    monkeypatch.setattr(loaded_code, "LOOKUP_TIMEOUT_S", 0.3)
    entered = threading.Event()

    def hangs(args: Any, ctx: Any) -> Any:
        entered.set()
        released.wait(120)
        return None

    state = _refund_with_check(harness, hangs)
    assert entered.is_set()
    _refused_alone(harness, state)


def test_a_problem_text_of_a_hostile_str_subclass_is_read_as_its_characters(harness: Harness) -> None:
    state = _refund_with_check(harness, lambda args, ctx: Shouting("amount too high; " + PLANTED))
    answers = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}
    assert answers["c-refund"]["error"] == "semantic_invalid"
    assert "amount too high" in answers["c-refund"]["message"]
    assert "hunter2" not in json.dumps(answers) and "sk-live-planted" not in json.dumps(answers)
    assert answers["c-order"]["status"] == "completed"
    assert harness.store.proposals.list() == []


def _refused_alone(harness: Harness, state: dict[str, Any]) -> None:
    answers = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}
    assert answers["c-refund"]["error"] == "check_failed" and answers["c-refund"]["retryable"] is True
    assert answers["c-order"]["status"] == "completed"  # the turn's other call, answered on its own
    assert state["status"] == "done"
    assert harness.store.proposals.list() == [] and harness.counter.calls.get("issue_refund", 0) == 0
    rejected = [e for e in harness.store.audit.events() if e.event == "call.rejected"]
    assert [(e.tool, e.code) for e in rejected] == [("issue_refund", "check_failed")]
    assert PLANTED not in json.dumps([str(m.content) for m in state["messages"]])
    assert PLANTED not in repr(harness.store.audit.events()) and PLANTED not in repr(state)


def test_an_argument_model_whose_validator_raises_refuses_its_call_only(harness: Harness) -> None:
    """The argument model is the tool's code too: a validator that raises anything but what
    Pydantic turns into a validation error (here for one crafted value) refused nothing and
    failed the whole run with its message."""
    refund = harness.registry.tools["issue_refund"]

    class TrippedArgs(refund.args_model):  # type: ignore[name-defined,misc]
        @field_validator("reason")
        @classmethod
        def trips(cls, value: str) -> str:
            if value == "other":
                raise RuntimeError(f"reason table unreachable ({PLANTED})")
            return value

    state = _refund_turn(harness, {**REFUND, "reason": "other"}, args_model=TrippedArgs)
    _refused_alone(harness, state)


def test_a_read_whose_arguments_cannot_be_built_at_execute_fails_that_call(harness: Harness) -> None:
    """At execute the handler's arguments are built again from the kept ones: an argument model
    that raises there (a stateful validator) fails the read ``server_error``, handler not run."""
    lookup = harness.registry.tools["lookup_order"]

    class TrippedArgs(lookup.args_model):  # type: ignore[name-defined,misc]
        @field_validator("order_id")
        @classmethod
        def trips(cls, value: str) -> str:
            raise RuntimeError(f"order table unreachable ({PLANTED})")

    tripped = replace(lookup, args_model=TrippedArgs)
    with pytest.raises(ToolExecutionError) as caught:
        harness.gateway().executor.run_read(tripped, {"order_id": "O-5512"}, principal("cust-ada"))
    assert caught.value.kind == "server_error" and PLANTED not in str(caught.value)
    assert harness.counter.calls.get("lookup_order", 0) == 0


def test_an_argument_model_whose_validator_hangs_is_refused_at_its_deadline(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, released: threading.Event
) -> None:
    """A validator that hung (for one crafted value) held dispatch, and so the run, for as long
    as it hung."""
    monkeypatch.setattr(loaded_code, "LOOKUP_TIMEOUT_S", 0.3)
    refund = harness.registry.tools["issue_refund"]
    entered = threading.Event()

    class HangingArgs(refund.args_model):  # type: ignore[name-defined,misc]
        @field_validator("reason")
        @classmethod
        def hangs(cls, value: str) -> str:
            if value == "other":
                entered.set()
                released.wait(120)
            return value

    state = _refund_turn(harness, {**REFUND, "reason": "other"}, args_model=HangingArgs)
    assert entered.is_set()
    _refused_alone(harness, state)


def test_a_read_whose_argument_model_hangs_at_execute_fails_that_call_at_its_deadline(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, released: threading.Event
) -> None:
    monkeypatch.setattr(loaded_code, "LOOKUP_TIMEOUT_S", 0.3)
    lookup = harness.registry.tools["lookup_order"]

    class HangingArgs(lookup.args_model):  # type: ignore[name-defined,misc]
        @field_validator("order_id")
        @classmethod
        def hangs(cls, value: str) -> str:
            released.wait(120)
            return value

    hanging = replace(lookup, args_model=HangingArgs)
    with pytest.raises(ToolExecutionError) as caught:
        harness.gateway().executor.run_read(hanging, {"order_id": "O-5512"}, principal("cust-ada"))
    assert caught.value.kind == "server_error" and not released.is_set()
    assert harness.counter.calls.get("lookup_order", 0) == 0


def test_a_write_whose_arguments_cannot_be_built_at_execute_fails_and_never_runs(harness: Harness) -> None:
    """The handler never started, so nothing can have happened: the write is ``failed``, never
    ``unknown`` (which sent it to reconciliation and a person for an effect that cannot exist)."""
    refund = harness.registry.tools["issue_refund"]

    class ArmedArgs(refund.args_model):  # type: ignore[name-defined,misc]
        armed: ClassVar[bool] = False

        @field_validator("reason")
        @classmethod
        def trips(cls, value: str) -> str:
            if cls.armed:
                raise RuntimeError(f"reason table unreachable ({PLANTED})")
            return value

    armed = replace(refund, args_model=ArmedArgs)
    specs = [armed if s.name == refund.name else s for s in harness.registry.tools.values()]
    registry = Registry.of(harness.registry.release, specs, harness.system)
    proposal, gateway = harness.approved_refund(registry, "t-armed")
    ArmedArgs.armed = True
    delivery = gateway.executor.deliver(proposal["operation_key"], worker_id="w1")
    assert delivery.status == "failed" and delivery.error is not None
    assert delivery.error["kind"] == "server_error" and PLANTED not in json.dumps(delivery.error)
    assert harness.counter.calls.get("issue_refund", 0) == 0 and harness.payments() == 0
    op = harness.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "failed"
