"""The offline demo model honours ``tool_choice`` like a provider: ``none`` answers in text,
a named tool calls only that tool, ``required`` calls some offered tool, ``auto`` decides.

It reads the choice from the same input the providers do (``bind_tools(tools, tool_choice=...)``
from `Gateway.model_for`), so the release setting and the per-step rule (the budget's last turn
is ``none``) reach it through the graph."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from support import Harness, audit_events, start

from toolgate.models.offline import OfflineDemoModel
from toolgate.models.offline_choice import fill_args, normalise_choice
from toolgate.testing import open_test_app

REFUND = "My blender arrived broken, order O-5512. Please refund it."


def _graph(harness: Harness, choice: str) -> Any:
    app = open_test_app(
        model=OfflineDemoModel(),
        tools=harness.registry,
        policy=harness.policy,
        store=harness.store,
        tool_choice=choice,
        start=False,
    )
    return app.compiled(checkpointer=InMemorySaver())


def _proposed(state: dict[str, Any]) -> list[str]:
    return [str(c["name"]) for m in state["messages"] if isinstance(m, AIMessage) for c in m.tool_calls]


def _choices(harness: Harness) -> list[str]:
    return [e.detail["tool_choice"] for e in audit_events(harness.store, "model.response")]


def test_a_release_set_to_none_answers_in_text_and_runs_no_handler(harness: Harness) -> None:
    final = start(_graph(harness, "none"), REFUND, "cust-ada", "t-none")
    assert final["status"] == "done"
    assert _proposed(final) == []
    assert harness.total_handler_calls() == 0
    assert harness.payments() == 0 and harness.refunds() == 0
    assert _choices(harness) == ["none"]
    answer = final["messages"][-1]
    assert isinstance(answer, AIMessage) and "no tool may be called" in str(answer.content)


def test_the_budgets_last_turn_is_none_and_the_offline_model_proposes_nothing(harness: Harness) -> None:
    """An ``auto`` release with one model turn left: the step is ``none`` and nothing runs."""
    final = start(_graph(harness, "auto"), REFUND, "cust-ada", "t-last", max_model_turns=1)
    assert _proposed(final) == []
    assert harness.total_handler_calls() == 0
    assert _choices(harness) == ["none"]


def test_a_step_that_is_none_after_a_read_reports_what_ran(harness: Harness) -> None:
    """Two turns: the lookup runs on the first, the refund the model wanted is not proposed on
    the last (``none``), and the answer says what ran."""
    final = start(_graph(harness, "auto"), REFUND, "cust-ada", "t-two", max_model_turns=2)
    assert _proposed(final) == ["lookup_order"]
    assert dict(harness.handler_calls) == {"lookup_order": 1}
    assert harness.payments() == 0
    assert _choices(harness) == ["auto", "none"]
    assert str(final["messages"][-1].content).endswith(
        "lookup_order: completed. I would use issue_refund next, but no tool may be called on this turn."
    )


def test_a_named_tool_is_called_instead_of_what_the_model_would_choose(harness: Harness) -> None:
    """Under ``auto`` this request checks the web service; named ``lookup_order`` calls the
    lookup with the order id from the request, and never the status tool."""
    text = "What is the status of web? Also order O-5512."
    final = start(_graph(harness, "lookup_order"), text, "rita", "t-named")
    first = next(m for m in final["messages"] if isinstance(m, AIMessage))
    assert [(c["name"], c["args"]) for c in first.tool_calls] == [("lookup_order", {"order_id": "O-5512"})]
    assert harness.handler_calls["lookup_order"] == 1
    assert harness.handler_calls["get_service_status"] == 0
    assert _choices(harness)[0] == "lookup_order"


def test_a_named_tool_it_cannot_fill_is_not_replaced_by_another_tool(harness: Harness) -> None:
    """No order id in the request: it answers in text instead of calling the status tool."""
    final = start(_graph(harness, "lookup_order"), "What is the status of web?", "rita", "t-unfilled")
    assert _proposed(final) == []
    assert harness.total_handler_calls() == 0
    assert str(final["messages"][-1].content).endswith(
        "I cannot fill the arguments of lookup_order from this request."
    )


def test_required_calls_an_offered_tool_where_auto_would_answer(harness: Harness) -> None:
    text = "Hello, a question about O-5512."
    assert _proposed(start(_graph(harness, "auto"), text, "cust-ada", "t-auto")) == []
    assert harness.total_handler_calls() == 0
    final = start(_graph(harness, "required"), text, "cust-ada", "t-required")
    assert _proposed(final) == ["lookup_order"]
    assert dict(harness.handler_calls) == {"lookup_order": 1}


# --------------------------------------------------------------------------- the model alone


def _tools(harness: Harness) -> list[dict[str, Any]]:
    return harness.registry.openai_tools(list(harness.registry.tools.values()))


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "auto"),
        ("auto", "auto"),
        ("none", "none"),
        ({"type": "none"}, "none"),
        ("required", "required"),
        ("any", "required"),
        (True, "required"),
        ({"type": "any"}, "required"),
        ("lookup_order", "lookup_order"),
        ({"type": "tool", "name": "lookup_order"}, "lookup_order"),
        ({"type": "function", "function": {"name": "lookup_order"}}, "lookup_order"),
        ({"type": "function", "name": "lookup_order"}, "lookup_order"),
    ],
)
def test_the_provider_forms_of_tool_choice(given: Any, expected: str) -> None:
    assert normalise_choice(given, ["lookup_order", "issue_refund"]) == expected


@pytest.mark.parametrize("given", ["restart_service", {"type": "sometimes"}, 3, {"type": "tool"}])
def test_a_choice_it_cannot_honour_is_refused_at_bind_time(harness: Harness, given: Any) -> None:
    with pytest.raises(ValueError):
        OfflineDemoModel().bind_tools(
            harness.registry.openai_tools([harness.registry.tools["lookup_order"]]), tool_choice=given
        )


def test_arguments_are_filled_from_enums_patterns_and_results(harness: Harness) -> None:
    tools = _tools(harness)
    assert fill_args("lookup_order", tools, "order O-5512 please") == {"order_id": "O-5512"}
    assert fill_args("lookup_order", tools, "order XO-5512X") is None
    assert fill_args("restart_service", tools, "restart worker") == {
        "service_alias": "worker",
        "reason": "requested by the user",
    }
    assert fill_args("issue_refund", tools, "refund O-5512") is None  # the amount is unknown
    assert fill_args("not_a_tool", tools, "O-5512") is None


def test_direct_calls_under_a_named_choice_keep_only_that_tool(harness: Harness) -> None:
    model = OfflineDemoModel().bind_tools(_tools(harness), tool_choice="lookup_order")
    text = 'call get_service_status {"service_alias": "web"}\ncall lookup_order {"order_id": "O-5513"}'
    answer = model.invoke([HumanMessage(text)])
    assert [(c["name"], c["args"]) for c in answer.tool_calls] == [("lookup_order", {"order_id": "O-5513"})]
    none = OfflineDemoModel().bind_tools(_tools(harness), tool_choice="none").invoke([HumanMessage(text)])
    assert none.tool_calls == [] and "get_service_status, lookup_order" in str(none.content)


def test_required_with_nothing_to_fill_still_calls_and_the_gateway_refuses_the_arguments(
    harness: Harness,
) -> None:
    """A provider forced to call always calls: with nothing to fill, the first offered tool is
    called with ``{}``; the gateway's argument check refuses it and no handler runs."""
    final = start(_graph(harness, "required"), "Hello there.", "cust-ada", "t-required-empty")
    first = next(m for m in final["messages"] if isinstance(m, AIMessage))
    (call,) = first.tool_calls
    assert call["args"] == {}
    offered = audit_events(harness.store, "model.response")[0].detail["tools_offered"]
    assert call["name"] in offered
    assert harness.total_handler_calls() == 0
    assert final["status"] == "done"
