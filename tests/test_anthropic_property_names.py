"""Property names Anthropic refuses, sent as wire keys and mapped back before validation.

Anthropic refuses a whole request when any tool's ``input_schema`` has a property key outside
``^[a-zA-Z0-9_.-]{1,64}$``. The export renames such keys at every depth (the declared name in the
description), the real ``ChatAnthropic`` against the local Messages API replay sends only valid
keys, and the tool calls that come back reach the handler with the declared names and exact values.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

from langchain_core.messages import ToolMessage
from provider_flows import ANTHROPIC, local_harness
from replay_anthropic import message, text_block, tool_use_block, usage
from support import Harness, audit_events, start, tool_messages

from toolgate.models.anthropic_property_keys import wire_payload
from toolgate.policy import PolicyRules
from toolgate.releases.bundle import NoResources
from toolgate.testing import open_test_app
from toolgate.tools import Registry
from toolgate.tools.shapes.definitions import from_openai
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.wire import PROPERTY_KEY, declared_args, key_map, wire_args, wire_schema

POLICY = OperatorPolicy(risk="read-only", owner="t", scopes=frozenset({"ops:read"}), max_output_bytes=2048)
RULES = PolicyRules(policy_version="t", sha256="0" * 64, approval_minutes=15, rules=())
LONG = "k" * 70
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sort by": {"type": "string", "enum": ["price", "name"], "description": "Order of results."},
        "größe": {"type": "string"},
        LONG: {"type": "integer"},
        "a.b": {"type": "integer"},
        "a b": {"type": "integer"},
        "a_b": {"type": "integer"},
        "filter": {
            "type": "object",
            "properties": {
                "max price": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["max price"],
            "additionalProperties": False,
        },
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}},
    },
    "required": ["sort by"],
    "additionalProperties": False,
    "$defs": {
        "line": {
            "type": "object",
            "properties": {"item no": {"type": "string"}, "qty": {"type": "integer"}},
            "required": ["item no", "qty"],
            "additionalProperties": False,
        }
    },
}
DECLARED = {
    "sort by": "price",
    "größe": "M",
    LONG: 7,
    "a.b": 1,
    "a b": 2,
    "a_b": 3,
    "filter": {"max price": 19.99, "tags": ["x y"]},
    "lines": [{"item no": "SKU 1", "qty": 2}, {"item no": "SKU 2", "qty": 1}],
}


class Handler:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **arguments: Any) -> str:
        self.calls.append(arguments)
        return "found"


def definition(schema: dict[str, Any] = SCHEMA) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": "search_catalog", "description": "Search.", "parameters": schema},
    }


def keys_at_every_depth(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                found += list(value)
                for sub in value.values():
                    found += keys_at_every_depth(sub)
            elif key == "required" and isinstance(value, list):
                found += value
            elif key not in ("enum", "const", "default", "examples"):
                found += keys_at_every_depth(value)
    elif isinstance(node, list):
        for item in node:
            found += keys_at_every_depth(item)
    return found


# --------------------------------------------------------------------------- the mapping


def test_the_exported_schema_has_only_valid_keys_and_names_the_declared_ones() -> None:
    spec = from_openai(definition(), Handler(), POLICY)
    [tool] = Registry.of("t/1.0.0", [spec], NoResources()).anthropic_tools([spec])
    schema = tool["input_schema"]
    keys = keys_at_every_depth(schema)
    assert keys and all(PROPERTY_KEY.match(k) for k in keys), keys
    top = key_map(SCHEMA["properties"])
    assert set(top) == {"sort by", "größe", LONG, "a b"}  # the valid ones are sent as they are
    assert {"a.b", "a_b", "filter", "lines"} <= set(schema["properties"])
    for declared, wire in top.items():
        assert (
            f"Declared name: {json.dumps(declared, ensure_ascii=False)}."
            in schema["properties"][wire]["description"]
        )
    assert schema["properties"][top["sort by"]]["description"].startswith("Order of results.")
    assert schema["required"] == [top["sort by"]]
    nested = schema["properties"]["filter"]
    assert nested["required"] == [key_map(SCHEMA["properties"]["filter"]["properties"])["max price"]]
    line = schema["$defs"]["line"]
    assert sorted(line["required"]) == sorted([key_map(["item no", "qty"])["item no"], "qty"])
    assert 'Declared name: "item no".' in line["properties"][key_map(["item no"])["item no"]]["description"]
    # what OpenAI is sent is unchanged
    [openai] = Registry.of("t/1.0.0", [spec], NoResources()).openai_tools([spec])
    assert "sort by" in openai["function"]["parameters"]["properties"]


def test_colliding_stems_stay_distinct_and_never_take_a_valid_key() -> None:
    names = ["a b", "a/b", "a  b", "a_b", "a_b_" + "0" * 8]
    mapping = key_map(names)
    assert set(mapping) == {"a b", "a/b", "a  b"}
    wires = list(mapping.values())
    assert len(set(wires)) == 3 and not set(wires) & set(names)
    assert all(PROPERTY_KEY.match(w) and w.startswith("a_b_") for w in wires)
    # a valid key equal to what a name would become pushes that name to a longer suffix
    clash = key_map(["a b", mapping["a b"]])
    assert (
        clash["a b"] != mapping["a b"]
        and clash["a b"].startswith("a_b_")
        and PROPERTY_KEY.match(clash["a b"])
    )
    assert len(key_map([LONG])[LONG]) <= 64


def test_the_mapping_round_trips_and_leaves_unknown_keys_alone() -> None:
    wired = wire_args(SCHEMA, DECLARED)
    assert all(PROPERTY_KEY.match(k) for k in keys_of_value(wired))
    assert declared_args(SCHEMA, wired) == DECLARED
    assert declared_args(SCHEMA, {"nope key": 1, "a_c": 2}) == {"nope key": 1, "a_c": 2}
    assert declared_args(SCHEMA, {"sort by": "name"}) == {"sort by": "name"}  # a declared name stays


def keys_of_value(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [*value, *(k for v in value.values() for k in keys_of_value(v))]
    if isinstance(value, list):
        return [k for v in value for k in keys_of_value(v)]
    return []


def test_the_mapping_is_the_same_in_another_process() -> None:
    code = (
        "import json,sys; from toolgate.tools.wire import wire_schema;"
        "print(json.dumps(wire_schema(json.loads(sys.stdin.read())), sort_keys=True))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(SCHEMA),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert json.loads(out.stdout) == wire_schema(SCHEMA)
    assert key_map(["sort by"]) == {"sort by": "sort_by_9731e5a1"}  # pinned: sha256, never hash()


# --------------------------------------------------------------------------- the real client


harness = local_harness(ANTHROPIC)


def graph_on(harness: Harness, replay: Any, handler: Handler) -> Any:
    spec = from_openai(definition(), handler, POLICY)
    registry = Registry.of("t/1.0.0", [spec], NoResources())
    model = ANTHROPIC.model_on(replay)
    return open_test_app(
        model=model, tools=registry, policy=RULES, store=harness.store, start=False
    ).compiled()


def turn(tool_input: dict[str, Any], call_id: str) -> Any:
    return message(
        "msg_01PropKeysTurnA1",
        [text_block("Searching."), tool_use_block(call_id, "search_catalog", tool_input)],
        stop_reason="tool_use",
        tokens=usage(500, 40),
    )


ANSWER = message(
    "msg_01PropKeysAnswerB2", [text_block("Found it.")], stop_reason="end_turn", tokens=usage(600, 5)
)


def test_a_round_trip_through_chat_anthropic_sends_wire_keys_and_hands_declared_ones(
    harness: Harness,
) -> None:
    handler = Handler()
    wired = wire_args(SCHEMA, DECLARED)
    with ANTHROPIC.serve([turn(wired, "toolu_01PropKeysCallOk"), ANSWER]) as replay:
        final = start(graph_on(harness, replay, handler), "find it", "sam", "t-prop-keys")
    first, second = replay.bodies()
    for body in (first, second):
        [tool] = body["tools"]
        keys = keys_at_every_depth(tool["input_schema"])
        assert keys and all(PROPERTY_KEY.match(k) for k in keys), keys
    assert handler.calls == [DECLARED]  # declared names, exact values
    [result] = tool_messages(final)
    assert json.loads(str(result.content))["status"] == "completed"
    uses = [
        b
        for m in second["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "tool_use"
    ]
    assert [u["input"] for u in uses] == [wired]  # the history is sent back in wire keys
    # toolgate's own records hold the declared names only
    ai = next(m for m in final["messages"] if getattr(m, "tool_calls", None))
    assert ai.tool_calls[0]["args"] == DECLARED
    assert [b["input"] for b in ai.content if b["type"] == "tool_use"] == [DECLARED]  # the checkpoint too
    recorded = json.dumps([e.detail for e in harness.store.audit.events()], ensure_ascii=False)
    assert all(w not in recorded for w in key_map(SCHEMA["properties"]).values())


def test_an_unknown_key_is_still_refused_and_the_handler_never_runs(harness: Harness) -> None:
    handler = Handler()
    with ANTHROPIC.serve(
        [turn({"sort_by": "price", "colour x": "red"}, "toolu_01PropKeysCallBad"), ANSWER]
    ) as replay:
        final = start(graph_on(harness, replay, handler), "find it", "sam", "t-prop-keys-bad")
    assert handler.calls == []
    [result] = tool_messages(final)
    assert isinstance(result, ToolMessage)
    assert json.loads(str(result.content))["error"] == "schema_invalid"
    [rejected] = audit_events(harness.store, "call.rejected")
    assert rejected.code == "schema_invalid"


def test_a_call_of_a_tool_no_longer_offered_goes_back_in_wire_keys() -> None:
    tool = {"name": "search_catalog", "description": "Search.", "input_schema": SCHEMA}
    use = {"type": "tool_use", "id": "toolu_1", "name": "search_catalog", "input": DECLARED}
    known: dict[str, Any] = {}
    first = wire_payload(
        {"tools": [tool], "messages": [{"role": "assistant", "content": [dict(use)]}]}, known
    )
    assert first["tools"][0]["input_schema"] == wire_schema(SCHEMA) and tool["input_schema"] is SCHEMA
    later = wire_payload({"tools": [], "messages": [{"role": "assistant", "content": [dict(use)]}]}, known)
    assert later["messages"][0]["content"][0]["input"] == wire_args(SCHEMA, DECLARED)
    alone = wire_payload({"messages": [{"role": "assistant", "content": [dict(use)]}]})
    assert alone["messages"][0]["content"][0]["input"] == DECLARED  # never bound: nothing to map with


def test_combinator_branches_name_the_same_wire_keys_as_their_object() -> None:
    schema = {
        "type": "object",
        "properties": {"city name": {"type": "string"}, "lat lon": {"type": "string"}},
        "anyOf": [{"required": ["city name"]}, {"required": ["lat lon"]}],
        "dependentRequired": {"city name": ["lat lon"]},
        "oneOf": [{"properties": {"zip code": {"type": "string"}}, "required": ["zip code"]}],
    }
    top = key_map(schema["properties"])
    wired = wire_schema(schema)
    assert wired["anyOf"] == [{"required": [top["city name"]]}, {"required": [top["lat lon"]]}]
    assert wired["dependentRequired"] == {top["city name"]: [top["lat lon"]]}
    assert all(PROPERTY_KEY.match(k) for k in keys_at_every_depth(wired))
    sent = {"city name": "Oslo", "zip code": "0150"}
    assert all(PROPERTY_KEY.match(k) for k in wire_args(schema, sent))
    assert declared_args(schema, wire_args(schema, sent)) == sent


def test_only_anthropic_keys_need_renaming() -> None:
    assert wire_schema({"type": "object", "properties": {"ok-key.1": {}}}) == {
        "type": "object",
        "properties": {"ok-key.1": {}},
    }
    assert re.fullmatch(r"gr_e_[0-9a-f]{8}", key_map(["größe"])["größe"])
