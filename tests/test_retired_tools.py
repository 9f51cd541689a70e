"""A tool past its deprecation window is not offered to the model; inside the window it is.

The window is judged on the store's clock (never the process clock, never checkpointed state):
a retired tool is absent from the tools the model request binds and named in the
``model.response`` event's ``tools_retired``; a tool inside its window is offered with its
``DEPRECATED until`` notice. A model that calls the retired tool by name anyway is refused
``tool_deprecated``, audited, and its handler never runs.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from support import Harness, audit_events, principal, set_store_now, start, tool_messages

from toolgate.graph.context import Context
from toolgate.graph.nodes.tool_offer import offer_for
from toolgate.graph.rollout.shadow import ask_candidate
from toolgate.policy.tool_selection import Conversation, select_tools
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry
from toolgate.tools.spec import Deprecation

LOOKUP = {"order_id": "O-5512"}
WINDOW = timedelta(days=1)


def deprecated(harness: Harness, since: datetime, name: str = "lookup_order") -> Registry:
    """``harness``'s registry with ``name`` deprecated from ``since`` for `WINDOW`."""
    specs = [
        replace(s, deprecation=Deprecation(since, WINDOW, replacement="issue_refund")) if n == name else s
        for n, s in harness.registry.tools.items()
    ]
    return Registry.of(harness.registry.release, specs, harness.system)


class SkewedClock:
    """A process clock ``skew`` away from the host's."""

    def __init__(self, skew: timedelta) -> None:
        self.skew = skew

    def now(self) -> datetime:
        return datetime.now(UTC) + self.skew


def run(
    harness: Harness, registry: Registry, responses: list[Any], thread: str, clock: Any = None
) -> tuple[ScriptedChatModel, dict[str, Any]]:
    """One task of cust-ada's with a scripted model; the model and the final state."""
    model = ScriptedChatModel(responses=responses)
    extra = {"clock": clock} if clock is not None else {}
    app = open_test_app(
        model=model, tools=registry, policy=harness.policy, store=harness.store, **extra, start=False
    )
    state = start(app.compiled(checkpointer=InMemorySaver()), "where is O-5512?", "cust-ada", thread)
    return model, state


def offered_to_model(harness: Harness, registry: Registry, thread: str, clock: Any = None) -> list[str]:
    """The tool names the (only) model request of a text-answered task bound."""
    model, state = run(harness, registry, [ai("Nothing to do.")], thread, clock)
    assert state["status"] == "done"
    [request] = model.requests
    return sorted(request.tool_names)


def test_a_retired_tool_is_not_offered_and_is_named_in_the_audit(harness: Harness) -> None:
    registry = deprecated(harness, harness.store.now() - 2 * WINDOW)
    assert offered_to_model(harness, registry, "retired") == ["issue_refund"]
    [response] = audit_events(harness.store, "model.response")
    assert response.detail["tools_offered"] == ["issue_refund"]
    assert response.detail["tools_retired"] == ["lookup_order"]
    assert harness.total_handler_calls() == 0


def test_a_tool_inside_its_window_is_offered_with_its_notice(harness: Harness) -> None:
    since = harness.store.now() - timedelta(hours=1)
    registry = deprecated(harness, since)
    model, state = run(harness, registry, [ai("Nothing to do.")], "in-window")
    assert state["status"] == "done"
    [request] = model.requests
    assert sorted(request.tool_names) == ["issue_refund", "lookup_order"]
    [lookup] = [t for t in request.tools if t.get("function", t).get("name") == "lookup_order"]
    description = lookup.get("function", lookup)["description"]
    assert description.startswith(f"DEPRECATED until {(since + WINDOW).isoformat()}; use issue_refund")
    [response] = audit_events(harness.store, "model.response")
    assert "tools_retired" not in response.detail


@pytest.mark.parametrize(
    "skew", [timedelta(days=-3), timedelta(days=3)], ids=["process-slow", "process-fast"]
)
def test_a_skewed_process_clock_does_not_change_the_offer(harness: Harness, skew: timedelta) -> None:
    """The process clock says the opposite of the store's in both cases; the store's decides."""
    now = harness.store.now()
    inside = deprecated(harness, now - timedelta(hours=1))
    after = deprecated(harness, now - 2 * WINDOW)
    clock = SkewedClock(skew)
    assert offered_to_model(harness, inside, "skew-in", clock) == ["issue_refund", "lookup_order"]
    assert offered_to_model(harness, after, "skew-after", clock) == ["issue_refund"]


def test_the_store_clock_crossing_the_sunset_flips_the_offer(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same registry: a second before sunset on the store's clock the tool is offered, a
    second after it is not."""
    since = harness.store.now() - timedelta(hours=1)
    registry = deprecated(harness, since)
    sunset = since + WINDOW
    set_store_now(monkeypatch, harness.store, sunset - timedelta(seconds=1))
    assert offered_to_model(harness, registry, "before-sunset") == ["issue_refund", "lookup_order"]
    set_store_now(monkeypatch, harness.store, sunset)
    assert offered_to_model(harness, registry, "at-sunset") == ["issue_refund"]
    set_store_now(monkeypatch, harness.store, sunset + timedelta(seconds=1))
    assert offered_to_model(harness, registry, "after-sunset") == ["issue_refund"]


def test_a_retired_tool_called_by_name_anyway_is_refused_and_audited(harness: Harness) -> None:
    registry = deprecated(harness, harness.store.now() - 2 * WINDOW)
    model, state = run(
        harness, registry, [ai("", tool_call("lookup_order", LOOKUP, "c-retired")), ai("ok")], "called-anyway"
    )
    assert "lookup_order" not in model.requests[0].tool_names
    [answer] = [json.loads(m.content) for m in state["messages"] if getattr(m, "tool_call_id", None)]
    assert (answer["status"], answer["error"]) == ("rejected", "tool_deprecated")
    assert harness.handler_calls["lookup_order"] == 0 and harness.total_handler_calls() == 0
    assert audit_events(harness.store, "call.accepted") == []
    [rejected] = audit_events(harness.store, "call.rejected")
    assert (rejected.code, rejected.tool, rejected.call_id) == (
        "tool_deprecated",
        "lookup_order",
        "c-retired",
    )


def test_a_conversation_cannot_bring_a_retired_tool_back(harness: Harness) -> None:
    """Checkpointed state is untrusted: a pending proposal or an earlier call of the retired tool
    (the strongest selection signals) does not put it back in the offer, at any limit."""
    now = harness.store.now()
    registry = deprecated(harness, now - 2 * WINDOW)
    ada = principal("cust-ada")
    pushy = Conversation(
        request="lookup_order O-5512", called=frozenset({"lookup_order"}), pending=frozenset({"lookup_order"})
    )
    for limit in (1, 2, 8):
        visible, offered = select_tools(registry, ada, pushy, limit, now=now)
        assert [s.name for s in offered] == ["issue_refund"]
        assert [s.name for s in visible] == ["issue_refund", "lookup_order"]  # visibility is unchanged
    # the same conversation before sunset: offered, first choice at limit 1
    assert [s.name for s in select_tools(registry, ada, pushy, 1, now=now - 2 * WINDOW)[1]] == [
        "lookup_order"
    ]


def test_a_retired_tool_named_as_the_tool_choice_falls_back_to_auto(harness: Harness) -> None:
    now = harness.store.now()
    registry = deprecated(harness, now - 2 * WINDOW)
    offer = offer_for(
        registry,
        principal("cust-ada"),
        {"messages": []},
        limit=8,
        setting="lookup_order",
        new_turn=True,
        last_turn=False,
        now=now,
    )
    assert [s.name for s in offer.offered] == ["issue_refund"]
    assert (offer.tool_choice, offer.fallback_from, offer.retired) == (
        "auto",
        "lookup_order",
        ("lookup_order",),
    )
    inside = offer_for(
        registry,
        principal("cust-ada"),
        {"messages": []},
        limit=8,
        setting="lookup_order",
        new_turn=True,
        last_turn=False,
        now=now - 2 * WINDOW + timedelta(hours=1),
    )
    assert (inside.tool_choice, inside.fallback_from, inside.retired) == ("lookup_order", None, ())


def test_a_shadowed_candidate_is_not_offered_its_retired_tool_either(harness: Harness) -> None:
    """The shadow asks a candidate with the tools its own model node would offer: no retired one."""
    model = ScriptedChatModel(responses=[ai("Nothing to do.")])
    registry = deprecated(harness, harness.store.now() - 2 * WINDOW)
    candidate = open_test_app(
        model=model, tools=registry, policy=harness.policy, store=harness.store, start=False
    ).gateway
    ask_candidate(candidate, principal("cust-ada"), [HumanMessage("where is O-5512?")], Context())
    assert model.requests[0].tool_names == ["issue_refund"]


def test_an_unknown_name_is_never_answered_with_a_retired_tool(harness: Harness) -> None:
    """The "did you mean" of an unknown tool points only at a tool the model may still call."""
    now = harness.store.now()
    inside, retired = deprecated(harness, now - WINDOW / 2), deprecated(harness, now - 2 * WINDOW)
    typo = [ai("", tool_call("lookup_ordr", LOOKUP, "c-typo")), ai("ok")]
    _, offered = run(harness, inside, typo, "typo-inside")
    _, refused = run(harness, retired, list(typo), "typo-retired")
    rejected = [e for e in harness.store.audit.events() if e.code == "unknown_tool"]
    assert len(rejected) == 2  # both refusals audited
    answers = [json.loads(str(tool_messages(state)[0].content)) for state in (offered, refused)]
    assert [a["error"] for a in answers] == ["unknown_tool", "unknown_tool"]
    assert answers[0]["suggested_fix"] == "did you mean 'lookup_order'?"  # inside its window: callable
    assert "lookup_order" not in json.dumps(answers[1])  # retired: never suggested
    assert harness.handler_calls.get("lookup_order", 0) == 0
