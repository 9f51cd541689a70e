"""Public-style tool definitions (tests/fixtures/public_tools/*.json) through the gate.

Each fixture is one OpenAI (Chat Completions or flat Responses) or Anthropic definition, written
by hand after what public function-calling suites and popular APIs contain, with what toolgate
must do with it: load, or refuse at registration with a stable code naming the tool and the JSON
path; for a loaded one, the calls that must round-trip (``handler_sees``: exactly the typed values
the implementation receives) and those that must be refused (``problem``: path and words).
Every fixture is loaded as a read with the same operator policy (`POLICY`).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal
from uuid import UUID

import pytest
from jsonschema import Draft202012Validator
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool, tool
from pydantic import BaseModel, ConfigDict, Field
from support import Harness, start, tool_messages

from toolgate.errors import RegistryError
from toolgate.policy import PolicyRules
from toolgate.releases.bundle import NoResources
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry
from toolgate.tools.arguments import ArgumentsInvalid
from toolgate.tools.declared.formats import ASSERTED_FORMATS
from toolgate.tools.model_text import plain_text
from toolgate.tools.schema.export import exported_parameters, strict_problems
from toolgate.tools.schema.shape import BOUNDED_FORMATS, schema_shape
from toolgate.tools.shapes.definitions import from_anthropic, from_openai
from toolgate.tools.shapes.functions import from_function
from toolgate.tools.shapes.langchain import from_langchain
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.spec import HandlerContext, ToolSpec
from toolgate.tools.wire import WIRE_NAME, wire_schema

FIXTURES = Path(__file__).parent / "fixtures" / "public_tools"
CORPUS = {
    path.stem[3:]: json.loads(path.read_text(encoding="utf-8")) for path in sorted(FIXTURES.glob("*.json"))
}
LOADED = sorted(k for k, e in CORPUS.items() if "loads" in e["expect"])
REFUSED = sorted(k for k, e in CORPUS.items() if "refused" in e["expect"])
POLICY = OperatorPolicy(
    risk="read-only", owner="public-tools", scopes=frozenset({"ops:read"}), max_output_bytes=2048
)
"""A read every fixture gets: sam and omar hold ``ops:read``; results bounded to 2 KiB."""
CTX = HandlerContext(tenant_id="acme", user_id="u-1")
RULES = PolicyRules(policy_version="t", sha256="0" * 64, approval_minutes=15, rules=())


class Implementation:
    """The function behind a definition: records exactly the keywords it is called with."""

    def __init__(self, answer: Any = "ok") -> None:
        self.calls: list[dict[str, Any]] = []
        self.answer = answer

    def __call__(self, **arguments: Any) -> Any:
        self.calls.append(arguments)
        return self.answer


def register(key: str, implementation: Implementation | None = None) -> ToolSpec:
    entry = CORPUS[key]
    shape = from_anthropic if entry["shape"] == "anthropic" else from_openai
    policy = replace(POLICY, identity_names=entry["identity_names"]) if "identity_names" in entry else POLICY
    return shape(
        entry["definition"],
        implementation or Implementation(),
        policy,
        open_objects=entry.get("open_objects", "refuse"),
    )


def typed(value: Any) -> Any:
    """``value`` with every scalar tagged by its type, so ``1``, ``1.0`` and ``True`` differ."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


def enum_values(node: Any) -> Iterator[str]:
    """Every ``enum``/``const`` value of a schema, as canonical JSON."""
    if isinstance(node, list):
        for item in node:
            yield from enum_values(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in ("enum", "const"):
                yield json.dumps(value, sort_keys=True)
            else:
                yield from enum_values(value)


def test_the_corpus_covers_every_shape_and_outcome() -> None:
    shapes = {e["shape"] for e in CORPUS.values()}
    flat = [e for e in CORPUS.values() if e["shape"] == "openai" and "function" not in e["definition"]]
    codes = {e["expect"]["refused"] for e in CORPUS.values() if "refused" in e["expect"]}
    assert len(CORPUS) >= 30 and shapes == {"openai", "anthropic"} and flat
    assert codes == {
        "invalid_schema",
        "open_arguments",
        "invalid_name",
        "missing_description",
        "identity_argument",
    }
    assert len(LOADED) >= 25 and all(CORPUS[k]["valid"] for k in LOADED)


@pytest.mark.parametrize("key", REFUSED)
def test_refused_at_registration_with_a_stable_code_naming_tool_and_field(key: str) -> None:
    entry = CORPUS[key]
    implementation = Implementation()
    with pytest.raises(RegistryError) as refused:
        register(key, implementation)
    text = str(refused.value)
    assert entry["expect"]["refused"] in {code for code, _ in refused.value.problems}, refused.value.problems
    assert entry["expect"]["names"] in text
    body = entry["definition"].get("function", entry["definition"])
    if isinstance(body.get("name"), str):
        assert refused.value.tool == body["name"] and repr(body["name"]) in text
    assert "Traceback" not in text and implementation.calls == []


@pytest.mark.parametrize("key", LOADED)
def test_the_exported_schema_is_valid_and_keeps_the_meaning(key: str) -> None:
    entry = CORPUS[key]
    spec = register(key)
    registry = Registry.of("public/1.0.0", [spec], NoResources())
    [openai] = registry.openai_tools([spec])
    [anthropic] = registry.anthropic_tools([spec])
    function = openai["function"]
    parameters, strict = exported_parameters(spec.args_model)
    Draft202012Validator.check_schema(parameters)
    assert function["parameters"] == parameters
    assert anthropic["input_schema"] == wire_schema(parameters)  # property keys Anthropic refuses renamed
    assert function["strict"] is strict is entry["expect"]["strict"]
    if strict:  # OpenAI strict mode: every property required, every object closed, no defaults
        assert strict_problems(parameters) == []
    else:  # sent as declared, so the model may omit: the same schema toolgate validates with
        declared = Draft202012Validator(parameters, format_checker=ASSERTED_FORMATS)
        for call in entry["invalid"]:
            assert not declared.is_valid(call["args"]), call
    for call in entry["valid"]:
        Draft202012Validator(parameters).validate(call["args"])
    assert sorted(enum_values(parameters)) == sorted(enum_values(spec.contract.json_schema()))
    # the name: provider-safe, mapping back to the real one; the description sent whole
    assert WIRE_NAME.match(function["name"]) and function["name"] == anthropic["name"] == spec.wire_name
    assert registry.get(spec.wire_name) is spec and registry.get(spec.name) is spec
    if "wire_renamed" in entry["expect"]:
        assert (spec.wire_name != spec.name) is entry["expect"]["wire_renamed"]
    body = entry["definition"].get("function", entry["definition"])
    assert function["description"] == anthropic["description"] == plain_text(body["description"])


@pytest.mark.parametrize("key", LOADED)
def test_valid_calls_reach_the_handler_exactly_and_invalid_ones_never(key: str) -> None:
    entry = CORPUS[key]
    implementation = Implementation()
    spec = register(key, implementation)
    for call in entry["valid"]:
        kept = spec.parse_arguments(call["args"])
        spec.handler(spec.handler_arguments(kept), CTX)
        assert typed(implementation.calls[-1]) == typed(call["handler_sees"]), call
        assert typed(kept) == typed(call["handler_sees"])
    for call in entry["invalid"]:
        with pytest.raises(ArgumentsInvalid) as invalid:
            spec.parse_arguments(call["args"])
        path, words = call["problem"]
        assert any(p == path and words in problem for p, problem in invalid.value.problems), invalid.value
        for value in _strings(call["args"]):  # problems come from the schema, never the input
            assert (
                len(value) < 4 or value in json.dumps(entry["definition"]) or value not in str(invalid.value)
            )
    assert len(implementation.calls) == len(entry["valid"])


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for sub in value.values():
            yield from _strings(sub)
    elif isinstance(value, list):
        for sub in value:
            yield from _strings(sub)
    elif isinstance(value, str):
        yield value


def test_every_loaded_tool_shares_one_release_except_a_duplicate_name() -> None:
    specs = [register(k) for k in LOADED if "duplicate_of" not in CORPUS[k]["expect"]]
    registry = Registry.of("public/1.0.0", specs, NoResources())
    assert len({s.wire_name for s in specs}) == len(specs)
    assert all(registry.get(s.wire_name) is s for s in specs)
    duplicate = register("duplicate_get_weather")
    with pytest.raises(RegistryError, match="'get_weather' registered twice"):
        Registry.of("public/1.0.0", [*specs, duplicate], NoResources())


def test_anthropic_export_only_sends_property_keys_anthropic_accepts() -> None:
    pattern = r"^[a-zA-Z0-9_.-]{1,64}$"  # tests/test_anthropic_property_names.py checks every depth
    import re

    for key in LOADED:
        spec = register(key)
        [tool] = Registry.of("public/1.0.0", [spec], NoResources()).anthropic_tools([spec])
        assert all(re.match(pattern, name) for name in tool["input_schema"]["properties"]), key


# --- end to end: the real graph, a scripted model calling wire names ---------------------------

E2E = (
    "math_factorial",
    "meteo_unicode",
    "quote_order",
    "update_contact",
    "odd_property_names",
    "long_description",
)


def test_public_tools_end_to_end_through_the_graph(harness: Harness) -> None:
    implementations = {key: Implementation(f"answer of {key}") for key in E2E}
    implementations["long_description"].answer = "x" * 50_000  # a result far over the bound
    specs = {key: register(key, implementations[key]) for key in E2E}
    registry = Registry.of("public/1.0.0", list(specs.values()), NoResources())
    valid = {key: CORPUS[key]["valid"][0] for key in E2E}
    invalid = {
        "bad_range": ("math_factorial", {"number": 171}),
        "bad_type": ("quote_order", {"items": [{"sku": "SKU-1", "qty": "2"}]}),
        "bad_enum": ("odd_property_names", {"class": "poem"}),
        "bad_missing": ("meteo_unicode", {}),
        "bad_unknown": ("update_contact", {"contact_id": "C-1", "nickname": "Al"}),
    }
    calls = [tool_call(specs[key].wire_name, valid[key]["args"], f"ok_{key}") for key in E2E]
    calls += [tool_call(specs[key].wire_name, args, call_id) for call_id, (key, args) in invalid.items()]
    model = ScriptedChatModel(responses=[ai("", *calls), ai("Done.")])
    graph = open_test_app(
        model=model, tools=registry, policy=RULES, store=harness.store, start=False
    ).compiled()
    final = start(graph, "Use the public tools.", "sam", "t-public")
    model.assert_complete()
    sent = sorted(t["function"]["name"] for t in model.requests[0].tools)
    assert sent == sorted(s.wire_name for s in specs.values())
    messages: dict[str, ToolMessage] = {str(m.tool_call_id): m for m in tool_messages(final)}
    for key in E2E:  # the model called wire names; people read the real names
        message = messages[f"ok_{key}"]
        payload = json.loads(str(message.content))
        assert message.name == specs[key].name, message.name
        if key == "long_description":  # 50,000 characters answered: cut to the tool's bound
            assert payload["truncated"] is True and payload["marker"] == "[TRUNCATED]"
        else:
            assert payload["status"] == "completed" and payload["data"] == {"result": f"answer of {key}"}
        assert len(str(message.content).encode()) <= POLICY.max_output_bytes
        assert [typed(c) for c in implementations[key].calls] == [typed(valid[key]["handler_sees"])]
    for call_id, (key, _) in invalid.items():
        payload = json.loads(str(messages[call_id].content))
        assert payload["error"] == "schema_invalid" and messages[call_id].name == specs[key].name, payload
    events = harness.store.audit.events()
    assert {e.tool for e in events if e.tool} == {s.name for s in specs.values()}  # never a wire name
    rejected = [e for e in events if e.event == "call.rejected"]
    assert len(rejected) == len(invalid), [e.event for e in events]


# --- LangChain tools: the same promises for generated schemas -----------------------------------


class LineItem(BaseModel):
    sku: Annotated[str, Field(max_length=10)]
    qty: int = 1


class Conversion(BaseModel):
    """Python keywords as argument names, through aliases."""

    model_config = ConfigDict(populate_by_name=True)
    from_: str = Field(alias="from", pattern="^[A-Z]{3}$")
    class_: Literal["spot", "forward"] = Field(alias="class", default="spot")


def test_a_langchain_tool_keeps_integers_defaults_and_omissions() -> None:
    seen: list[dict[str, Any]] = []

    @tool
    def quote_shipping(
        items: list[LineItem], zone: Literal[1, 2, 3], weight_kg: float, note: str | None = None
    ) -> str:
        """Quote shipping for a basket."""
        seen.append(
            {"items": [i.model_dump() for i in items], "zone": zone, "weight_kg": weight_kg, "note": note}
        )
        return "ok"

    spec = from_langchain(quote_shipping, POLICY)
    kept = spec.parse_arguments({"items": [{"sku": "A"}], "zone": 2.0, "weight_kg": 3})
    assert typed(kept) == typed({"items": [{"sku": "A", "qty": 1}], "zone": 2, "weight_kg": 3, "note": None})
    spec.handler(spec.handler_arguments(kept), CTX)
    assert typed(seen) == typed(
        [{"items": [{"sku": "A", "qty": 1}], "zone": 2, "weight_kg": 3.0, "note": None}]
    )
    for bad, path in (
        ({"items": [], "zone": True, "weight_kg": 1}, "zone"),
        ({"zone": 1, "weight_kg": 1}, "items"),
    ):
        with pytest.raises(ArgumentsInvalid) as invalid:
            spec.parse_arguments(bad)
        assert path in {p for p, _ in invalid.value.problems}
    assert len(seen) == 1


def test_a_langchain_tool_with_aliases_it_could_never_accept_is_refused_at_load() -> None:
    calls: list[dict[str, Any]] = []

    def convert(**arguments: Any) -> str:
        calls.append(arguments)
        return "ok"

    class Unpopulated(BaseModel):
        from_: str = Field(alias="from", max_length=3)

    broken = StructuredTool.from_function(
        convert, name="convert", description="Convert.", args_schema=Unpopulated
    )
    with pytest.raises(RegistryError) as refused:
        from_langchain(broken, POLICY)
    assert refused.value.tool == "convert" and refused.value.problems[0][0] == "invalid_schema"
    assert "['from_']" in str(refused.value) and "populate_by_name" in str(refused.value)
    working = StructuredTool.from_function(
        convert, name="convert", description="Convert.", args_schema=Conversion
    )
    spec = from_langchain(working, POLICY)
    kept = spec.parse_arguments({"from_": "EUR"})
    spec.handler(spec.handler_arguments(kept), CTX)
    assert kept == {"from_": "EUR", "class_": "spot"} and calls == [{"from_": "EUR", "class_": "spot"}]


GOOD_VALUES = {
    "date": "2026-03-01",
    "date-time": "2026-03-01T10:00:00.5+02:00",
    "time": "10:00:00Z",
    "duration": "P1DT2H",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "email": "ada@example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
}


@pytest.mark.parametrize("fmt", sorted(BOUNDED_FORMATS))
def test_a_format_the_audit_counts_as_a_bound_is_enforced(fmt: str) -> None:
    """The registry audit accepts ``format: date`` (and the others) as a string's bound, so a
    declared schema must refuse any other text under it, not treat it as an annotation."""
    parameters = {
        "type": "object",
        "properties": {"value": {"type": "string", "format": fmt}},
        "required": ["value"],
        "additionalProperties": False,
    }
    assert schema_shape(parameters).unbounded == ()
    definition = {
        "type": "function",
        "function": {"name": "f", "description": "F.", "parameters": parameters},
    }
    implementation = Implementation()
    spec = from_openai(definition, implementation, POLICY)
    assert spec.parse_arguments({"value": GOOD_VALUES[fmt]}) == {"value": GOOD_VALUES[fmt]}
    for bad in ("x" * 10_000, GOOD_VALUES[fmt] + " ; DROP TABLE", "", "2026-02-30"):
        with pytest.raises(ArgumentsInvalid) as invalid:
            spec.parse_arguments({"value": bad})
        assert invalid.value.problems == [("value", f'must be in the format "{fmt}"')]
    assert implementation.calls == []


@pytest.mark.parametrize("open_objects", ["close", "allow"])
def test_an_mcp_style_json_schema_keeps_its_recursive_ref(open_objects: Literal["close", "allow"]) -> None:
    """An MCP tool reaches toolgate as a LangChain tool whose ``args_schema`` is the server's JSON
    Schema. LangChain's own conversion inlines ``$ref`` and cuts recursion to ``{}`` (any value):
    the declared schema must be what is validated, even where open values are allowed."""
    entry = CORPUS["category_tree"]
    calls: list[dict[str, Any]] = []

    async def validate_tree(**arguments: Any) -> str:
        calls.append(arguments)
        return "ok"

    mcp_tool = StructuredTool(
        name="validate_category_tree",
        description="Check a category tree.",
        args_schema=entry["definition"]["function"]["parameters"],
        coroutine=validate_tree,
    )
    spec = from_langchain(mcp_tool, POLICY, open_objects=open_objects)
    assert spec.contract.json_schema() == entry["definition"]["function"]["parameters"]
    [valid] = entry["valid"]
    spec.handler(spec.handler_arguments(spec.parse_arguments(valid["args"])), CTX)
    assert calls == [valid["handler_sees"]]
    with pytest.raises(ArgumentsInvalid) as invalid:
        spec.parse_arguments({"root": {"name": "a", "children": [{"title": "b"}, 7]}})
    assert ("root.children.0.name", "is required") in invalid.value.problems
    assert ("root.children.1", "must be object") in invalid.value.problems
    assert len(calls) == 1


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Channel(enum.StrEnum):
    EMAIL = "email"
    SMS = "sms"


REF = "123e4567-e89b-12d3-a456-426614174000"


def test_a_typed_function_takes_the_json_its_schema_advertises() -> None:
    """Dates, times, UUIDs and enums are sent to the model as JSON strings and numbers; a strict
    argument model must accept exactly that JSON (Pydantic's strict *Python* mode would demand
    `date` and `Priority` instances, so no call of such a tool could ever pass)."""
    seen: list[dict[str, Any]] = []

    def schedule_reminder(
        day: date,
        at: datetime,
        ref: UUID,
        priority: Priority = Priority.LOW,
        channel: Channel = Channel.EMAIL,
        window: tuple[int, int] = (9, 17),
    ) -> str:
        """Draft a reminder."""
        seen.append(
            {"day": day, "at": at, "ref": ref, "priority": priority, "channel": channel, "window": window}
        )
        return "ok"

    spec = from_function(schedule_reminder, POLICY)
    properties = exported_parameters(spec.args_model)[0]["properties"]
    assert properties["day"]["format"] == "date" and properties["ref"]["format"] == "uuid"
    sent = {
        "day": "2026-03-01",
        "at": "2026-03-01T09:00:00Z",
        "ref": REF,
        "priority": 2,
        "channel": "sms",
        "window": [8, 12],
    }
    kept = spec.parse_arguments(sent)
    assert typed(kept) == typed(sent)
    spec.handler(spec.handler_arguments(kept), CTX)
    assert seen == [
        {
            "day": date(2026, 3, 1),
            "at": datetime(2026, 3, 1, 9, tzinfo=UTC),
            "ref": UUID(REF),
            "priority": Priority.HIGH,
            "channel": Channel.SMS,
            "window": (8, 12),
        }
    ]
    assert type(seen[0]["priority"]) is Priority and type(seen[0]["channel"]) is Channel
    assert typed(spec.parse_arguments({"day": "2026-03-01", "at": sent["at"], "ref": REF})) == typed(
        {
            "day": "2026-03-01",
            "at": sent["at"],
            "ref": REF,
            "priority": 1,
            "channel": "email",
            "window": [9, 17],
        }
    )
    for field, bad in (
        ("day", "tomorrow"),
        ("ref", "R-1"),
        ("priority", 3),
        ("priority", True),
        ("channel", "fax"),
        ("window", [1]),
    ):
        with pytest.raises(ArgumentsInvalid) as invalid:
            spec.parse_arguments({**sent, field: bad})
        assert {p.split(".")[0] for p, _ in invalid.value.problems} == {field}, invalid.value.problems
    assert len(seen) == 1


def test_a_set_parameter_keeps_the_order_the_model_sent() -> None:
    """A `frozenset` is dumped in hash order, which differs between processes (PYTHONHASHSEED):
    the kept arguments (digest, operation key) must be the model's order, not the process's."""
    seen: list[frozenset[str]] = []

    def tag_article(tags: frozenset[Annotated[str, Field(max_length=12)]]) -> str:
        """Preview tags for an article."""
        seen.append(tags)
        return "ok"

    spec = from_function(tag_article, POLICY)
    tags = [f"tag-{n:02d}" for n in (7, 3, 11, 0, 9, 5, 1, 8, 2, 10, 4, 6)]
    assert spec.parse_arguments({"tags": tags}) == {"tags": tags}
    kept = spec.parse_arguments({"tags": [*tags, tags[0]]})  # a repeat is one member
    assert kept == {"tags": tags}
    spec.handler(spec.handler_arguments(kept), CTX)
    assert seen == [frozenset(tags)]
