"""Tool choice as a release setting (auto, required, none, a named tool): validated when the
registry is built, in the reviewed manifest, sent to both providers as their wire format, and
applied per step (the last turn the budget allows is ``none``; a named tool only when offered)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from provider_flows import ANTHROPIC, OPENAI, Provider
from replay_anthropic import message, text_block
from replay_anthropic import usage as anthropic_usage
from replay_openai import Reply, message_item, response
from replay_openai import usage as openai_usage
from support import TEST_KEY, Harness, audit_events, start

from toolgate.errors import RegistryError
from toolgate.graph.nodes.tool_offer import offer_for, step_choice
from toolgate.graph.rollout.manifest import release_manifest, verified_release
from toolgate.models.selection import load_chat_model
from toolgate.policy.principal import Principal
from toolgate.releases.bundle import ReleaseEnv
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools.demo.release import DEMO_RELEASES

REFUND = DEMO_RELEASES["ops-tools/1.0.0"]


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "toolgate.sqlite", key=TEST_KEY)
    try:
        yield store
    finally:
        store.close()


# --------------------------------------------------------------------------- the release setting


@pytest.mark.parametrize("choice", ["auto", "required", "none", "lookup_order"])
def test_a_valid_tool_choice_builds_and_is_in_the_manifest(sqlite: SQLiteStore, choice: str) -> None:
    release = dataclasses.replace(REFUND, tool_choice=choice)
    registry = release.registry(ReleaseEnv(store=sqlite, secret=TEST_KEY))
    assert release_manifest(release, registry)["tool_choice"] == choice


@pytest.mark.parametrize("choice", ["sometimes", "get_inventory", "", "AUTO"])
def test_an_unknown_tool_choice_refuses_the_release(sqlite: SQLiteStore, choice: str) -> None:
    release = dataclasses.replace(REFUND, tool_choice=choice)
    with pytest.raises(RegistryError) as refused:
        release.registry(ReleaseEnv(store=sqlite, secret=TEST_KEY))
    assert str(refused.value) == (
        f"release ops-tools/1.0.0: tool_choice {choice!r} is not one of auto, required, none "
        "nor the name of one of its tools"
    )


def test_the_reviewed_manifest_pins_the_tool_choice(sqlite: SQLiteStore) -> None:
    """The demo's reviewed manifest says ``auto``; a bundle changed to ``required`` drifts and
    refuses to start until the manifest is rewritten and reviewed. A manifest written before the
    setting existed reviewed the default."""
    env = ReleaseEnv(store=sqlite, secret=TEST_KEY)
    assert REFUND.manifest is not None and REFUND.manifest["tool_choice"] == "auto"
    verified_release(REFUND, REFUND.registry(env), "offline")
    changed = dataclasses.replace(REFUND, tool_choice="required")
    with pytest.raises(RegistryError, match="tool_choice: reviewed 'auto' != effective 'required'"):
        verified_release(changed, changed.registry(env), "offline")
    older = dataclasses.replace(
        REFUND, manifest={k: v for k, v in REFUND.manifest.items() if k != "tool_choice"}
    )
    verified_release(older, older.registry(env), "offline")


# --------------------------------------------------------------------------- per step


def test_step_rules() -> None:
    class Spec:
        def __init__(self, name: str) -> None:
            self.name = name

    tools: list[Any] = [Spec("lookup_order")]
    assert step_choice("required", tools, new_turn=True, last_turn=False) == ("required", None)
    assert step_choice("required", tools, new_turn=False, last_turn=False) == ("auto", None)
    assert step_choice("required", tools, new_turn=True, last_turn=True) == ("none", None)
    assert step_choice("auto", tools, new_turn=True, last_turn=True) == ("none", None)
    assert step_choice("none", tools, new_turn=True, last_turn=False) == ("none", None)
    assert step_choice("lookup_order", tools, new_turn=True, last_turn=False) == ("lookup_order", None)
    assert step_choice("issue_refund", tools, new_turn=True, last_turn=False) == ("auto", "issue_refund")


def test_a_principal_offered_no_tool_gets_a_plain_request_recorded_as_none(sqlite: SQLiteStore) -> None:
    registry = REFUND.registry(ReleaseEnv(store=sqlite, secret=TEST_KEY))
    nobody = Principal.from_dict({"user_id": "u", "tenant_id": "acme", "roles": [], "scopes": []})
    offer = offer_for(
        registry,
        nobody,
        {"messages": []},
        limit=8,
        setting="lookup_order",
        new_turn=True,
        last_turn=False,
        now=sqlite.now(),
    )
    assert (offer.offered, offer.tool_choice, offer.fallback_from) == ([], "none", "lookup_order")


def _graph(harness: Harness, model: Any, choice: str) -> Any:
    app = open_test_app(
        model=model,
        tools=harness.registry,
        policy=harness.policy,
        store=harness.store,
        tool_choice=choice,
        start=False,
    )
    return app.compiled(checkpointer=InMemorySaver())


def test_a_named_tool_is_forced_on_the_request_then_auto_and_none_on_the_last_turn(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")),
            ai("", tool_call("lookup_order", {"order_id": "O-5513"}, "c2")),
            ai("Order O-5512 was delivered."),
        ]
    )
    final = start(
        _graph(harness, model, "lookup_order"), "where is O-5512?", "cust-ada", "t-named", max_model_turns=3
    )
    assert final["status"] == "done"
    assert [r.options["tool_choice"] for r in model.requests] == ["lookup_order", "auto", "none"]
    details = [e.detail for e in audit_events(harness.store, "model.response")]
    assert [d["tool_choice"] for d in details] == ["lookup_order", "auto", "none"]
    assert all("tool_choice_fallback" not in d for d in details)


def test_a_named_tool_the_principal_may_not_see_falls_back_to_auto_audited(harness: Harness) -> None:
    """omar may not see issue_refund: it is neither offered nor forced; the step is ``auto`` and
    the fallback is in the audit event."""
    model = ScriptedChatModel(responses=[ai("Nothing to do.")])
    final = start(_graph(harness, model, "issue_refund"), "is web up?", "omar", "t-fallback")
    assert final["status"] == "done"
    assert "issue_refund" not in model.requests[0].tool_names
    assert model.requests[0].options["tool_choice"] == "auto"
    (event,) = audit_events(harness.store, "model.response")
    assert event.detail["tool_choice"] == "auto"
    assert event.detail["tool_choice_fallback"] == {
        "configured": "issue_refund",
        "code": "named_tool_not_offered",
    }


def test_required_applies_to_the_request_only_and_the_budgets_last_turn_is_none(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")), ai("ok")]
    )
    start(_graph(harness, model, "required"), "where is O-5512?", "cust-ada", "t-req", max_model_turns=2)
    assert [r.options["tool_choice"] for r in model.requests] == ["required", "none"]


# --------------------------------------------------------------------------- the wire


def _openai_answer() -> list[Reply]:
    return [
        response(
            "resp_choice", [message_item("msg_choice", "ok")], model="gpt-5-mini", tokens=openai_usage(3, 1)
        )
    ]


def _anthropic_answer() -> list[Reply]:
    return [message("msg_choice", [text_block("ok")], stop_reason="end_turn", tokens=anthropic_usage(3, 1))]


WIRE = [
    (OPENAI, _openai_answer, "required", {}, "required"),
    (OPENAI, _openai_answer, "lookup_order", {}, {"type": "function", "name": "lookup_order"}),
    (OPENAI, _openai_answer, "auto", {"max_model_turns": 1}, "none"),
    (ANTHROPIC, _anthropic_answer, "required", {}, {"type": "any", "disable_parallel_tool_use": True}),
    (
        ANTHROPIC,
        _anthropic_answer,
        "lookup_order",
        {},
        {"type": "tool", "name": "lookup_order", "disable_parallel_tool_use": True},
    ),
    (ANTHROPIC, _anthropic_answer, "auto", {"max_model_turns": 1}, {"type": "none"}),
]


@pytest.mark.parametrize(("provider", "script", "choice", "context", "expected"), WIRE)
def test_the_request_body_carries_the_tool_choice(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: Provider,
    script: Any,
    choice: str,
    context: dict[str, Any],
    expected: Any,
) -> None:
    """The real client's request body against the replay server (thinking off for Anthropic: the
    API refuses a forced tool with extended thinking, and ``ChatAnthropic`` drops it)."""
    provider.local_only_here(monkeypatch)
    store = SQLiteStore(tmp_path / "toolgate.sqlite", key=TEST_KEY)
    try:
        harness = Harness(store)
        with provider.serve(script()) as replay:
            model = load_chat_model(provider.settings(provider.base_url(replay), model_thinking_tokens=0))
            start(
                _graph(harness, model, choice), "where is my order O-5512?", "cust-ada", "t-wire", **context
            )
        (body,) = replay.bodies()
    finally:
        store.close()
    assert body["tool_choice"] == expected
    names = sorted(t.get("name") or t.get("function", {}).get("name") for t in body["tools"])
    assert names == ["issue_refund", "lookup_order"]


def test_anthropic_with_thinking_is_sent_auto_for_a_forced_choice_and_it_is_audited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Messages API refuses a forced tool with extended thinking on: the step is sent as
    ``auto`` (with the parallel flag) and the audit event says why."""
    ANTHROPIC.local_only_here(monkeypatch)
    store = SQLiteStore(tmp_path / "toolgate.sqlite", key=TEST_KEY)
    try:
        harness = Harness(store)
        with ANTHROPIC.serve(_anthropic_answer()) as replay:
            model = ANTHROPIC.model_on(replay)  # thinking on (1024 tokens)
            start(_graph(harness, model, "required"), "where is my order O-5512?", "cust-ada", "t-think")
        (body,) = replay.bodies()
        (event,) = audit_events(store, "model.response")
    finally:
        store.close()
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert event.detail["tool_choice"] == "auto"
    assert event.detail["tool_choice_fallback"] == {
        "configured": "required",
        "code": "forced_choice_unsupported",
    }
