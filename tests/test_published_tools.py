"""Public tool definitions load as published (issue 30): closed at every depth at call time and open
only at the operator's paths (``undeclared_argument``), a published default that fails its own schema
dropped with a load warning, identity by meaning (``caller_fields``, ``caller_mismatch``) with the
name filter as a warning, and arguments reaching the handler in the order the model sent them."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from shapes_harness import READ, WRITE, run_read_then_write
from support import Harness, start, tool_messages

from toolgate.canonical import digest
from toolgate.errors import RegistryError
from toolgate.policy import PolicyRules
from toolgate.releases.bundle import NoResources
from toolgate.store import Store
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry
from toolgate.tools.audit import audit_specs
from toolgate.tools.shapes.definitions import from_anthropic, from_openai
from toolgate.tools.shapes.langchain import from_langchain
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.spec import ArgumentsInvalid, HandlerContext

RULES = PolicyRules(policy_version="t", sha256="0" * 64, approval_minutes=15, rules=())
SEND_EMAIL = {
    "type": "function",
    "function": {
        "name": "send_email",
        "description": "Send an email.",
        "parameters": {  # as published: no additionalProperties anywhere
            "type": "object",
            "properties": {
                "to": {"type": "string", "maxLength": 200},
                "subject": {"type": "string", "maxLength": 200},
                "recipient": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "maxLength": 80}},
                },
                "metadata": {"type": "object", "description": "Free-form headers."},
            },
            "required": ["to", "subject"],
        },
    },
}


class Implementation:
    """Records exactly the keywords it is called with."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **arguments: Any) -> str:
        self.calls.append(arguments)
        return "sent"


def test_a_published_schema_without_additional_properties_loads_and_is_closed_at_every_depth() -> None:
    spec = from_openai(SEND_EMAIL, Implementation(), READ)
    ok = {"to": "a@example.com", "subject": "hi", "recipient": {"name": "Al"}, "metadata": {}}
    assert spec.parse_arguments(ok) == ok
    for bad, where in (
        ({**ok, "forward_all_to": "evil@example.com"}, "forward_all_to"),
        ({**ok, "recipient": {"name": "Al", "bcc": "evil@example.com"}}, "recipient.bcc"),
        ({**ok, "metadata": {"x-forward": "evil@example.com"}}, "metadata.x-forward"),
    ):
        with pytest.raises(ArgumentsInvalid) as refused:
            spec.parse_arguments(bad)
        assert refused.value.code == "undeclared_argument"
        assert refused.value.problems == [(where, "is not a declared argument")]


def test_a_nested_free_form_object_is_open_at_its_path_only() -> None:
    implementation = Implementation()
    policy = OperatorPolicy(
        risk="read-only", owner="mail", scopes=frozenset({"ops:read"}), open_paths=frozenset({"metadata"})
    )
    spec = from_openai(SEND_EMAIL, implementation, policy)
    free = {
        "to": "a@example.com",
        "subject": "hi",
        "metadata": {"x-trace": "1", "deep": {"any": [1, {"k": 2}]}},
    }
    assert spec.parse_arguments(free) == free
    with pytest.raises(ArgumentsInvalid) as refused:
        spec.parse_arguments({**free, "forward_all_to": "evil@example.com"})
    assert refused.value.code == "undeclared_argument" and refused.value.problems[0][0] == "forward_all_to"
    with pytest.raises(ArgumentsInvalid, match=r"recipient\.bcc"):
        spec.parse_arguments({**free, "recipient": {"bcc": "evil@example.com"}})
    # the importer's own open_paths work the same way, and an open path must name an argument
    same = from_openai(SEND_EMAIL, implementation, READ, open_paths=("metadata",))
    assert same.parse_arguments(free) == free
    with pytest.raises(RegistryError, match="open path 'meta' names no declared argument"):
        from_openai(SEND_EMAIL, implementation, READ, open_paths=("meta",))
    with pytest.raises(RegistryError, match="open_paths replace open_objects"):
        from_openai(SEND_EMAIL, implementation, READ, open_paths=("metadata",), open_objects="allow")


def test_the_deprecated_per_tool_switch_still_works() -> None:
    with pytest.raises(RegistryError, match="open objects"):
        from_openai(SEND_EMAIL, Implementation(), READ, open_objects="refuse")
    allowed = from_openai(SEND_EMAIL, Implementation(), READ, open_objects="allow")
    assert allowed.parse_arguments({"to": "a", "subject": "b", "other": 1}) == {
        "to": "a",
        "subject": "b",
        "other": 1,
    }


def test_an_undeclared_key_is_refused_through_the_graph_and_the_handler_never_runs(harness: Harness) -> None:
    implementation = Implementation()
    policy = OperatorPolicy(
        risk="caution",
        owner="mail",
        scopes=frozenset({"ops:restart"}),
        approval=WRITE.approval,
        effect="Sends one email.",
        rollback=WRITE.rollback,
        timeout_s=30,
        open_paths=frozenset({"metadata"}),
    )
    spec = from_openai(SEND_EMAIL, implementation, policy)
    registry = Registry.of("mail/1.0.0", [spec], NoResources())
    sent = {"to": "boss@example.com", "subject": "report", "forward_all_to": "attacker@example.com"}
    model = ScriptedChatModel(responses=[ai("", tool_call("send_email", sent, "call_fwd")), ai("Sorry.")])
    graph = open_test_app(
        model=model, tools=registry, policy=RULES, store=harness.store, start=False
    ).compiled()
    state = start(graph, "Email the report.", "sam", "t-forward")
    model.assert_complete()
    [message] = tool_messages(state)
    payload = json.loads(str(message.content))
    assert payload["status"] == "rejected" and payload["error"] == "undeclared_argument"
    assert "forward_all_to" in payload["message"] and "attacker" not in str(message.content)
    assert implementation.calls == [] and harness.store.proposals.list() == []
    events = harness.store.audit.events(call_ids=["call_fwd"])
    assert [(e.event, e.code) for e in events] == [("call.rejected", "undeclared_argument")]


def test_a_published_default_that_fails_its_own_schema_is_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    definition = {
        "name": "list_files",
        "description": "List files.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "maxLength": 200},
                "recursive": {"type": "boolean", "default": "false"},  # common in published definitions
            },
            "required": ["path"],
        },
    }
    implementation = Implementation()
    with caplog.at_level(logging.WARNING, logger="toolgate.tools"):
        spec = from_anthropic(definition, implementation, READ)
    warning = "$.properties.recursive: published default dropped (it does not satisfy its own schema)"
    assert spec.load_warnings == (warning,)
    assert warning in caplog.text
    assert "default" not in spec.contract.json_schema()["properties"]["recursive"]
    assert spec.parse_arguments({"path": "/"}) == {"path": "/"}  # nothing filled in
    assert spec.parse_arguments({"path": "/", "recursive": True}) == {"path": "/", "recursive": True}
    report = audit_specs("files/1.0.0", lambda: [spec])
    assert f"list_files: {warning}" in report.warnings


CALLER = {
    "type": "function",
    "function": {
        "name": "get_user_orders",
        "description": "Orders of a user.",
        "parameters": {
            "type": "object",
            "properties": {
                "user_id": {"type": "string", "maxLength": 40},
                "username": {"type": "string", "maxLength": 40},
            },
            "required": ["user_id"],
        },
    },
}


def test_identity_names_are_a_load_warning_with_a_public_override() -> None:
    spec = from_openai(CALLER, Implementation(), READ)
    assert [w.split(":")[0] for w in spec.load_warnings] == ["user_id", "username"]
    assert list(spec.identity_keys({"user_id": "x", "username": "y"})) == []  # declared: accepted
    exempt = from_openai(CALLER, Implementation(), READ, identity_exempt=("username",))
    assert [w.split(":")[0] for w in exempt.load_warnings] == ["user_id"]
    declared = OperatorPolicy(
        risk="read-only",
        owner="o",
        scopes=frozenset({"ops:read"}),
        caller_fields=frozenset({"user_id"}),
        identity_exempt=frozenset({"username"}),
    )
    assert from_openai(CALLER, Implementation(), declared).load_warnings == ()
    strict = OperatorPolicy(
        risk="read-only", owner="o", scopes=frozenset({"ops:read"}), identity_names="refuse"
    )
    with pytest.raises(RegistryError, match="identity or authority in arguments: user_id"):
        from_openai(CALLER, Implementation(), strict)
    with pytest.raises(RegistryError, match="caller_fields names no declared argument: owner_id"):
        from_openai(
            CALLER,
            Implementation(),
            OperatorPolicy(
                risk="read-only",
                owner="o",
                scopes=frozenset({"ops:read"}),
                caller_fields=frozenset({"owner_id"}),
            ),
        )


def test_a_caller_field_accepts_the_callers_own_id_and_refuses_another(harness: Harness) -> None:
    implementation = Implementation()
    policy = OperatorPolicy(
        risk="read-only", owner="orders", scopes=frozenset({"ops:read"}), caller_fields=frozenset({"user_id"})
    )
    spec = from_openai(CALLER, implementation, policy)
    registry = Registry.of("orders/1.0.0", [spec], NoResources())
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call("get_user_orders", {"user_id": "sam"}, "call_own"),
                tool_call("get_user_orders", {"user_id": "omar", "username": "o"}, "call_other"),
            ),
            ai("Done."),
        ]
    )
    graph = open_test_app(
        model=model, tools=registry, policy=RULES, store=harness.store, start=False
    ).compiled()
    state = start(graph, "My orders, and omar's.", "sam", "t-caller")
    model.assert_complete()
    payloads = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}
    assert payloads["call_own"]["status"] == "completed"
    assert (
        payloads["call_other"]["status"] == "rejected"
        and payloads["call_other"]["error"] == "caller_mismatch"
    )
    assert implementation.calls == [{"user_id": "sam"}]
    events = harness.store.audit.events(call_ids=["call_other"])
    assert [(e.event, e.code) for e in events] == [("call.rejected", "caller_mismatch")]


def test_arguments_reach_the_handler_in_the_order_the_model_sent_them(store: Store) -> None:
    seen: list[list[Any]] = []

    def read_note(**arguments: Any) -> str:
        seen.append(["read", list(arguments), list(arguments["shape"])])
        return "ok"

    def save_note(ctx: HandlerContext, **arguments: Any) -> str:
        seen.append(["write", list(arguments), list(arguments["shape"])])
        return "saved"

    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 40},
            "body": {"type": "string", "maxLength": 400},
            "shape": {
                "type": "object",
                "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}},
            },
        },
        "required": ["title"],
    }
    read = from_openai({"name": "read_note", "description": "Read.", "parameters": schema}, read_note, READ)
    write = from_openai({"name": "save_note", "description": "Save.", "parameters": schema}, save_note, WRITE)
    sent = {"title": "t", "shape": {"zeta": 1, "alpha": 2}, "body": "b"}
    flow = run_read_then_write(
        store, [read, write], ("read_note", sent), ("save_note", sent), write_calls=lambda: len(seen) - 1
    )
    assert seen == [
        ["read", ["title", "shape", "body"], ["zeta", "alpha"]],
        ["write", ["title", "shape", "body"], ["zeta", "alpha"]],
    ]
    [(stored, _)] = store.proposals.list()
    assert stored.arguments_sha256 == digest(sent)  # the digest stays canonical (sorted keys)
    assert flow.proposal["proposal_id"] == stored.proposal_id


def test_langchain_tools_load_as_published_too() -> None:
    from langchain_core.tools import StructuredTool

    def tag(name: str, extra: dict[str, Any] | None = None) -> str:
        """Tag a thing."""
        return name

    tool = StructuredTool.from_function(tag)
    spec = from_langchain(tool, READ, open_paths=("extra",))
    assert spec.parse_arguments({"name": "n", "extra": {"k": "v"}}) == {"name": "n", "extra": {"k": "v"}}
    with pytest.raises(ArgumentsInvalid) as refused:
        spec.parse_arguments({"name": "n", "forward_all_to": "x"})
    assert refused.value.code == "undeclared_argument"
