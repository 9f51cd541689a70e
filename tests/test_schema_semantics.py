"""Arguments keep the caller's meaning: what a call validates against, what toolgate keeps, what the
handler gets, under generated JSON Schemas (``jsonschema``, Draft 2020-12, is the oracle) and for
each problem an integrator found with public tool definitions."""

from __future__ import annotations

import copy
import json
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ConfigDict, Field

from toolgate.canonical import digest
from toolgate.errors import RegistryError
from toolgate.tools import ApprovalClass, NoRollback, Registry
from toolgate.tools.arguments import FrozenArguments
from toolgate.tools.schema.export import exported_parameters, openai_tool, strict_json_schema
from toolgate.tools.shapes.thirdparty import spec_from_function, spec_from_tool_definition
from toolgate.tools.spec import ArgumentsInvalid, HandlerContext, StrictArgs, ToolSpec
from toolgate.tools.wire import WIRE_NAME


class Ack(BaseModel):
    model_config = ConfigDict(extra="ignore")
    ok: bool = True


SPEC_FIELDS: dict[str, Any] = dict(
    version="1.0.0",
    owner="integrations",
    description="A thing.",
    risk="read-only",
    effect="reads",
    timeout_s=5,
    max_output_bytes=2048,
    approval=ApprovalClass.none(),
    required_scopes=frozenset({"things:read"}),
    handler_revision="thing/1.0.0",
    rollback=NoRollback("nothing to undo"),
)
CTX = HandlerContext(tenant_id="acme", user_id="u-1")
SLOW = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def _echo(args: Any, ctx: HandlerContext) -> Ack:
    return Ack()


def tool(parameters: dict[str, Any], name: str = "thing", **overrides: Any) -> ToolSpec:
    """A read-only tool registered from an OpenAI Chat Completions definition."""
    definition = {
        "type": "function",
        "function": {"name": name, "description": "A thing.", "parameters": parameters},
    }
    return spec_from_tool_definition(
        definition, handler=_echo, result_model=Ack, **{**SPEC_FIELDS, **overrides}
    )


def obj(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required or [],
        "additionalProperties": False,
        **extra,
    }


class _Resolver:
    def resource_status(self, kind: str, resource_id: str, tenant_id: str) -> Literal["owned"]:
        return "owned"


# ---- generated schemas and calls -------------------------------------------------------

NAMES = [
    "a",
    "b",
    "count",
    "_private",
    "schema",
    "model_config",
    "copy",
    "dict",
    "json",
    "validate",
    "x.y",
    "n-1",
]
ENUM_POOL: list[Any] = [0, 1, 2, -1, True, False, None, "a", "b", 1.5]
SPECIALS: list[Any] = [None, True, False, 1, 1.0, 1.5, "1", "", [], {}]


@st.composite
def scalar_schema(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["integer", "number", "string", "boolean", "enum"]))
    if kind == "enum":
        return {"enum": draw(st.lists(st.sampled_from(ENUM_POOL), min_size=1, max_size=4, unique_by=repr))}
    schema: dict[str, Any] = {"type": kind}
    if kind in ("integer", "number"):
        if draw(st.booleans()):
            schema["minimum"] = draw(st.integers(-5, 5))
        if draw(st.booleans()):
            schema["maximum"] = schema.get("minimum", -5) + draw(st.integers(0, 10))
    if kind == "string":
        low = draw(st.integers(0, 2))
        schema["minLength"] = low
        if draw(st.booleans()):
            schema["maxLength"] = low + draw(st.integers(0, 4))
        if draw(st.booleans()):
            schema["pattern"] = "^[a-c]*$"
    return schema


@st.composite
def nullable(draw: st.DrawFn, inner: dict[str, Any]) -> dict[str, Any]:
    how = draw(st.sampled_from(["no", "type-list", "any-of"]))
    if how == "type-list" and isinstance(inner.get("type"), str):
        return {**inner, "type": [inner["type"], "null"]}
    if how == "any-of":
        return {"anyOf": [inner, {"type": "null"}]}
    return inner


def any_schema(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    leaves = scalar_schema()
    if depth >= 2:
        return leaves.flatmap(nullable)
    nested = st.one_of(object_schema(depth + 1), array_schema(depth + 1))
    return st.one_of(leaves, leaves, nested).flatmap(nullable)


@st.composite
def array_schema(draw: st.DrawFn, depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": draw(any_schema(depth))}
    if draw(st.booleans()):
        schema["minItems"] = draw(st.integers(0, 2))
    if draw(st.booleans()):
        schema["maxItems"] = schema.get("minItems", 0) + draw(st.integers(0, 3))
    return schema


@st.composite
def object_schema(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True))
    properties = {name: draw(any_schema(depth)) for name in names}
    required = [name for name in names if draw(st.booleans())]
    for name in names:
        if name not in required and draw(st.booleans()):
            properties[name] = {**properties[name], "default": draw(valid_value(properties[name]))}
    return obj(properties, required)


def _bounds(schema: dict[str, Any]) -> tuple[int, int]:
    low = schema.get("minimum", -50)
    return low, schema.get("maximum", low + 100)


def valid_value(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under ``schema`` (one of the generated shapes)."""
    if "anyOf" in schema:
        return st.one_of(*[valid_value(branch) for branch in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of(*[valid_value({**schema, "type": k}) for k in kind])
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(*_bounds(schema))
    if kind == "number":
        low, high = _bounds(schema)
        return st.one_of(st.integers(low, high), st.floats(low, high, allow_nan=False, allow_infinity=False))
    if kind == "string":
        low = schema.get("minLength", 0)
        return st.text(alphabet="abc", min_size=low, max_size=schema.get("maxLength", low + 4))
    if kind == "array":
        low = schema.get("minItems", 0)
        return st.lists(valid_value(schema["items"]), min_size=low, max_size=schema.get("maxItems", low + 2))
    assert kind == "object", schema
    return _object_value(schema)


@st.composite
def _object_value(draw: st.DrawFn, schema: dict[str, Any]) -> dict[str, Any]:
    value = {}
    for name, sub in schema["properties"].items():
        if name in schema["required"] or draw(st.booleans()):
            value[name] = draw(valid_value(sub))
    return value


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    places = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            places += _places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            places += _places(item, (*path, index))
    return places


@st.composite
def perturbed(draw: st.DrawFn, schema: dict[str, Any]) -> dict[str, Any]:
    """A valid call changed at one place: a value replaced, a key dropped or added."""
    value = copy.deepcopy(draw(valid_value(schema)))
    place = draw(st.sampled_from(_places(value)))
    parent: Any = value
    for key in place[:-1]:
        parent = parent[key]
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    if not place:
        if action == "add" or not value:
            value["zz"] = draw(st.sampled_from(SPECIALS))
        else:
            value.pop(draw(st.sampled_from(sorted(value))))
    elif action == "drop" and isinstance(parent, dict):
        parent.pop(place[-1])
    elif action == "add" and isinstance(parent[place[-1]], dict):
        parent[place[-1]]["zz"] = draw(st.sampled_from(SPECIALS))
    else:
        parent[place[-1]] = draw(st.sampled_from(SPECIALS))
    return value


@st.composite
def schema_and_call(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = draw(object_schema())
    call = draw(st.one_of(valid_value(schema), perturbed(schema)))
    return schema, call


def _defaults(schema: dict[str, Any]) -> set[str]:
    return {name for name, sub in schema.get("properties", {}).items() if "default" in sub}


def _object_branch(schema: dict[str, Any], value: Any) -> dict[str, Any] | None:
    """The generated schema that applies to ``value`` when it is unambiguous."""
    branches = schema.get("anyOf", [schema])
    fitting = [b for b in branches if Draft202012Validator(b).is_valid(value)]
    return fitting[0] if len(fitting) == 1 else None


def assert_kept_means_sent(schema: dict[str, Any], sent: Any, kept: Any) -> None:
    """Omitted stays omitted (defaults aside), null stays null, integers stay integers."""
    branch = _object_branch(schema, sent)
    if sent is None or isinstance(sent, bool | str):
        assert kept == sent and type(kept) is type(sent)
    elif isinstance(sent, int):
        assert kept == sent and type(kept) is int
    elif isinstance(sent, float):
        assert kept == sent
    elif isinstance(sent, list):
        assert isinstance(kept, list) and len(kept) == len(sent)
        if branch is not None and "items" in branch:
            for a, b in zip(sent, kept, strict=True):
                assert_kept_means_sent(branch["items"], a, b)
    elif isinstance(sent, dict) and branch is not None and "properties" in branch:
        assert set(kept) == set(sent) | _defaults(branch)
        for key, value in sent.items():
            assert_kept_means_sent(branch["properties"][key], value, kept[key])
        for key in set(kept) - set(sent):
            assert kept[key] == branch["properties"][key]["default"]


# ---- properties ----------------------------------------------------------------------------


@SLOW
@given(schema_and_call())
def test_a_call_validates_iff_the_schema_accepts_it(case: tuple[dict[str, Any], dict[str, Any]]) -> None:
    schema, call = case
    spec = tool(schema)
    expected = Draft202012Validator(schema).is_valid(call)
    try:
        kept = spec.parse_arguments(call)
    except ArgumentsInvalid as exc:
        assert not expected, exc.problems
        assert exc.problems and all(isinstance(p, str) and isinstance(m, str) for p, m in exc.problems)
        return
    assert expected
    assert Draft202012Validator(schema).is_valid(kept)
    assert_kept_means_sent(schema, call, kept)
    handed = spec.handler_arguments(kept)
    assert isinstance(handed, FrozenArguments) and handed == kept
    assert set(handed) == set(call) | _defaults(schema)


@SLOW
@given(object_schema(), st.data())
def test_true_never_passes_for_an_integer(schema: dict[str, Any], data: st.DataObject) -> None:
    integer = data.draw(
        st.sampled_from(
            [
                {"type": "integer"},
                {"type": ["integer", "null"]},
                {"enum": [0, 1, 2]},
                {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                {"const": 1},
            ]
        )
    )
    schema = obj({**schema["properties"], "k": integer}, [*schema["required"], "k"])
    call = {**data.draw(valid_value(schema)), "k": data.draw(st.booleans())}
    with pytest.raises(ArgumentsInvalid) as caught:
        tool(schema).parse_arguments(call)
    assert "k" in [path for path, _ in caught.value.problems]


@SLOW
@given(object_schema(), st.data())
def test_omitted_and_null_digest_differently(schema: dict[str, Any], data: st.DataObject) -> None:
    maybe = data.draw(
        st.sampled_from([{"type": ["integer", "null"]}, {"anyOf": [obj({}), {"type": "null"}]}])
    )
    schema = obj({**schema["properties"], "maybe": maybe}, schema["required"])
    spec = tool(schema)
    call = data.draw(valid_value(schema))
    call.pop("maybe", None)
    omitted = spec.parse_arguments(call)
    null = spec.parse_arguments({**call, "maybe": None})
    assert "maybe" not in omitted and null["maybe"] is None
    assert digest(omitted) != digest(null)
    assert "maybe" not in spec.handler_arguments(omitted)


@SLOW
@given(st.one_of(st.integers(-(10**12), 10**12), st.floats(-1e6, 1e6, allow_nan=False)))
def test_numbers_are_kept_as_sent(number: float) -> None:
    spec = tool(obj({"amount": {"type": "number"}}, ["amount"]))
    kept = spec.parse_arguments({"amount": number})
    assert kept["amount"] == number and type(kept["amount"]) is type(number)
    assert type(spec.handler_arguments(kept)["amount"]) is type(number)


# ---- the integrator's findings, one example each --------------------------------------------

PATCH = obj(
    {
        "id": {"type": "string"},
        "title": {"type": "string"},
        "note": {"type": ["string", "null"]},
        "priority": {"type": "integer", "default": 3},
    },
    ["id"],
)


def test_omitted_optional_stays_omitted_and_null_only_where_allowed() -> None:
    spec = tool(PATCH)
    assert spec.parse_arguments({"id": "T-1"}) == {"id": "T-1", "priority": 3}  # default filled, visible
    assert spec.parse_arguments({"id": "T-1", "note": None}) == {"id": "T-1", "note": None, "priority": 3}
    with pytest.raises(ArgumentsInvalid, match="title: must be string"):
        spec.parse_arguments({"id": "T-1", "title": None})  # title is not nullable
    received: list[Any] = []
    handled = spec_from_tool_definition(
        {"name": "patch_ticket", "description": "Patch.", "parameters": PATCH},
        handler=lambda args, ctx: received.append(args) or Ack(),
        result_model=Ack,
        **SPEC_FIELDS,
    )
    handled.handler(handled.handler_arguments(handled.parse_arguments({"id": "T-1"})), CTX)
    assert received == [{"id": "T-1", "priority": 3}] and "note" not in received[0]
    with pytest.raises(TypeError, match="read-only"):
        received[0]["title"] = "x"


def test_defaults_are_declared_by_the_schema_and_must_satisfy_it() -> None:
    exported, strict = exported_parameters(tool(PATCH).args_model)
    assert strict is False and exported["properties"]["priority"]["default"] == 3
    with pytest.raises(RegistryError, match=r"thing.*\$\.properties\.priority: its default does not satisfy"):
        tool(obj({"priority": {"type": "integer", "default": "high"}}))


def test_integer_enums_are_type_strict() -> None:
    spec = tool(
        obj({"level": {"type": "integer", "enum": [1, 2, 3]}, "flag": {"enum": [0, 1, None]}}, ["level"])
    )
    for bad in (True, "1", 4, None):
        with pytest.raises(ArgumentsInvalid, match="level"):
            spec.parse_arguments({"level": bad})
    with pytest.raises(ArgumentsInvalid, match="flag: must be one of"):
        spec.parse_arguments({"level": 1, "flag": False})
    # JSON Schema: a number with a zero fractional part is that integer; it is kept as the integer
    kept = spec.parse_arguments({"level": 2.0, "flag": 1.0})
    assert kept == {"level": 2, "flag": 1} and type(kept["level"]) is int and type(kept["flag"]) is int


def test_open_objects_are_refused_closed_or_allowed_by_explicit_choice() -> None:
    loose = {
        "type": "object",
        "properties": {
            "filters": {"type": "object", "properties": {"q": {"type": "string"}}},
            "meta": {"type": "object"},
        },
        "required": [],
    }
    with pytest.raises(RegistryError) as refused:
        tool(loose)
    message = str(refused.value)
    assert "'thing'" in message and "$: open objects" in message
    assert "$.properties.filters: open objects" in message and "$.properties.meta: open objects" in message
    with pytest.raises(RegistryError, match=r"\$\.properties\.meta: open objects"):
        tool(loose, open_objects="close")  # an object without properties cannot be closed into "{}"
    closed = tool({**loose, "properties": {"filters": loose["properties"]["filters"]}}, open_objects="close")
    assert closed.contract.json_schema()["properties"]["filters"]["additionalProperties"] is False
    with pytest.raises(ArgumentsInvalid, match=r"filters\.zz: is not a declared property"):
        closed.parse_arguments({"filters": {"q": "x", "zz": 1}})
    allowed = tool(loose, open_objects="allow")
    call = {"filters": {"q": "x", "extra": [1, {"deep": None}]}, "meta": {"k": 1.5}, "other": True}
    assert allowed.parse_arguments(call) == call


@pytest.mark.parametrize(
    "name",
    ["_private", "schema", "model_config", "copy", "dict", "json", "validate", "model_fields", "x.y", "ünï"],
)
def test_any_property_name_works(name: str) -> None:
    spec = tool(obj({name: {"type": "integer"}, "other": {"type": "string"}}, [name]))
    assert spec.parse_arguments({name: 1}) == {name: 1}
    assert spec.handler_arguments({name: 1})[name] == 1
    with pytest.raises(ArgumentsInvalid, match="is required"):
        spec.parse_arguments({"other": "x"})


@pytest.mark.parametrize("name", ["math.factorial", "getWeather", "weather/current", "a b", "x" * 100])
def test_any_tool_name_works_through_a_wire_name(name: str) -> None:
    spec = tool(obj({"n": {"type": "integer"}}, ["n"]), name=name)
    assert spec.name == name and WIRE_NAME.match(spec.wire_name)
    assert spec.wire_name == tool(obj({}), name=name).wire_name  # deterministic
    if WIRE_NAME.match(name):
        assert spec.wire_name == name
    other = tool(obj({}), name="other_tool", required_scopes=frozenset({"x:read"}))
    registry = Registry.of("r/1", [spec, other], _Resolver())
    assert registry.get(name) is spec and registry.get(spec.wire_name) is spec
    [exported] = registry.openai_tools([spec])
    assert exported["function"]["name"] == spec.wire_name
    assert registry.anthropic_tools([spec])[0]["name"] == spec.wire_name
    assert {t.name for t in registry.structured_tools()} == {spec.wire_name, "other_tool"}


def test_wire_names_never_collide_within_a_release() -> None:
    dotted, spaced = tool(obj({}), name="a.b"), tool(obj({}), name="a b")
    assert dotted.wire_name != spaced.wire_name
    assert len({s.wire_name for s in (dotted, spaced, tool(obj({}), name="a_b"))}) == 3
    impostor = tool(obj({}), name=dotted.wire_name)
    with pytest.raises(RegistryError, match="share the wire name"):
        Registry.of("r/1", [dotted, impostor], _Resolver())
    with pytest.raises(RegistryError, match="name must"):
        tool(obj({}), name=" padded ")
    with pytest.raises(RegistryError, match="control characters"):
        tool(obj({}), name="bell\x07")


def test_an_integer_for_a_number_reaches_the_handler_as_an_integer() -> None:
    received: list[Any] = []
    spec = spec_from_tool_definition(
        {"name": "set_price", "input_schema": obj({"price": {"type": "number"}}, ["price"])},
        handler=lambda args, ctx: received.append(args) or Ack(),
        result_model=Ack,
        **{**SPEC_FIELDS, "description": "Set a price."},
    )
    kept = spec.parse_arguments({"price": 150})
    spec.handler(spec.handler_arguments(kept), CTX)
    assert json.dumps(kept) == '{"price": 150}' and type(received[0]["price"]) is int


class Quote(StrictArgs):
    sku: str
    price: float
    note: str | None = None
    qty: int = 1
    level: Literal[1, 2] = 1


def _quote(
    sku: str, price: float, ctx: HandlerContext, note: str = "(none)", qty: int = 0, level: int = 1
) -> Ack:
    _quote.calls.append({"sku": sku, "price": price, "note": note, "qty": qty, "level": level})  # type: ignore[attr-defined]
    return Ack()


_quote.calls = []  # type: ignore[attr-defined]


def test_function_tools_get_only_the_given_arguments_and_their_own_defaults() -> None:
    spec = spec_from_function(_quote, args_model=Quote, result_model=Ack, **SPEC_FIELDS)
    kept = spec.parse_arguments({"sku": "S-1", "price": 150})
    assert kept == {"sku": "S-1", "price": 150, "qty": 1, "level": 1}  # declared defaults, visibly
    assert json.dumps(kept["price"]) == "150"
    spec.handler(spec.handler_arguments(kept), CTX)
    assert _quote.calls[-1] == {"sku": "S-1", "price": 150.0, "note": "(none)", "qty": 1, "level": 1}  # type: ignore[attr-defined]
    null = spec.parse_arguments({"sku": "S-1", "price": 1.5, "note": None})
    assert null["note"] is None and digest(null) != digest(spec.parse_arguments({"sku": "S-1", "price": 1.5}))
    spec.handler(spec.handler_arguments(null), CTX)
    assert _quote.calls[-1]["note"] is None  # type: ignore[attr-defined]
    with pytest.raises(ArgumentsInvalid, match="level: must not be a boolean"):
        spec.parse_arguments({"sku": "S-1", "price": 1, "level": True})
    with pytest.raises(ArgumentsInvalid, match="qty"):
        spec.parse_arguments({"sku": "S-1", "price": 1, "qty": None})


def test_a_function_that_cannot_take_every_valid_call_is_refused() -> None:
    def needs_note(sku: str, price: float, note: str | None, qty: int = 1, level: int = 1) -> Ack:
        return Ack()

    with pytest.raises(RegistryError, match="note: parameter needs a default"):
        spec_from_function(needs_note, args_model=Quote, result_model=Ack, **SPEC_FIELDS)

    def misses_qty(sku: str, price: float, note: str | None = None) -> Ack:
        return Ack()

    with pytest.raises(RegistryError, match="qty: the function has no parameter"):
        spec_from_function(misses_qty, args_model=Quote, result_model=Ack, **SPEC_FIELDS)


class Loan(StrictArgs):
    principal: int = Field(gt=0)
    user_ratings: list[int] = Field(max_length=5)


def test_identity_names_fail_at_registration_unless_exempted() -> None:
    with pytest.raises(RegistryError) as refused:
        tool(
            obj(
                {
                    "user_id": {"type": "string"},
                    "loans": {"type": "array", "items": obj({"principal": {"type": "integer"}})},
                }
            )
        )
    assert refused.value.tool == "thing"
    assert "identity or authority in arguments: loans[].principal" in str(refused.value)
    assert "identity or authority in arguments: user_id" in str(refused.value)
    with pytest.raises(RegistryError, match="identity or authority in arguments: principal"):
        spec_from_function(
            lambda principal, user_ratings: Ack(), args_model=Loan, result_model=Ack, **SPEC_FIELDS
        )
    loan = spec_from_function(
        lambda principal, user_ratings: Ack(),
        args_model=Loan,
        result_model=Ack,
        **{**SPEC_FIELDS, "name": "quote_loan", "identity_exempt": frozenset({"principal", "user_ratings"})},
    )
    assert list(loan.identity_keys({"principal": 5, "user_ratings": [1], "user_id": "u-2"})) == ["user_id"]
    nested = tool(
        obj(
            {
                "loans": {"type": "array", "items": obj({"principal": {"type": "integer"}})},
                "notify_users": {"type": "boolean"},
            }
        ),
        identity_exempt=frozenset({"loans[].principal", "notify_users"}),
    )
    call = {"loans": [{"principal": 1}, {"principal": 2, "owner": "x"}], "notify_users": True}
    assert list(nested.identity_keys(call)) == ["loans.1.owner"]
    with pytest.raises(RegistryError, match="identity_exempt names no identity-like argument: loans"):
        tool(obj({"loans": {"type": "integer"}}), identity_exempt=frozenset({"loans"}))


@pytest.mark.parametrize(
    ("parameters", "where"),
    [
        (obj({"x": {"$ref": "https://example.com/x.json"}}), r"\$\.properties\.x: only local \$ref"),
        (
            obj({"x": {"$ref": "#/$defs/Missing"}}),
            r"\$\.properties\.x: \$ref '#/\$defs/Missing' is not defined",
        ),
        (
            obj({"x": {"type": "integer", "minimum": "zero"}}),
            r"\$\.properties\.x\.minimum: not a valid JSON Schema",
        ),
        (obj({"x": {"description": "anything"}}), r"\$\.properties\.x: an untyped value"),
        (
            obj({"x": {"type": "array", "items": {"oneOf": [{"type": "string"}]}}}),
            r"\$\.properties\.x\.items: 'oneOf'",
        ),
        ({"type": "array", "items": {"type": "string"}}, r"\$: tool parameters must be an object schema"),
    ],
)
def test_registration_problems_name_the_tool_and_the_json_path(
    parameters: dict[str, Any], where: str
) -> None:
    with pytest.raises(RegistryError, match=where) as refused:
        tool(parameters)
    assert refused.value.tool == "thing" and str(refused.value).startswith("tool 'thing' refused: ")


def test_strict_mode_only_when_every_property_is_required() -> None:
    everything = obj({"a": {"type": "integer"}, "b": {"type": ["string", "null"]}}, ["a", "b"])
    strict_tool = openai_tool("t", "d", tool(everything).args_model)["function"]
    assert strict_tool["strict"] is True and strict_tool["parameters"]["required"] == ["a", "b"]
    partial = openai_tool("t", "d", tool(PATCH).args_model)["function"]
    assert (
        partial["strict"] is False and partial["parameters"] == PATCH
    )  # as declared: "omitted" stays possible
    assert (
        strict_json_schema(tool(PATCH).args_model) == PATCH
    )  # what the manifest hashes: what the model sees

    class Optional(StrictArgs):
        a: int
        b: str | None = None

    assert openai_tool("t", "d", Optional)["function"]["strict"] is False
    assert "title" not in json.dumps(openai_tool("t", "d", Optional))


def test_recursive_and_nullable_references_keep_their_meaning() -> None:
    tree = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}},
        "required": ["root"],
        "additionalProperties": False,
        "$defs": {
            "Node": obj(
                {
                    "label": {"type": "string", "default": "?"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                }
            )
        },
    }
    spec = tool(tree)
    kept = spec.parse_arguments({"root": {"children": [{"label": "a"}, {"parent": {}}]}})
    assert kept == {
        "root": {"label": "?", "children": [{"label": "a"}, {"label": "?", "parent": {"label": "?"}}]}
    }
    with pytest.raises(ArgumentsInvalid, match=r"root\.children\.1\.parent\.zz: is not a declared property"):
        spec.parse_arguments({"root": {"children": [{}, {"parent": {"zz": 1}}]}})


def test_problems_never_quote_the_input() -> None:
    spec = tool(obj({"code": {"type": "string", "maxLength": 3}, "n": {"type": "integer"}}, ["n"]))
    secret = "sk-live-abcdefghijklmnopqrstuvwxyz"
    with pytest.raises(ArgumentsInvalid) as caught:
        spec.parse_arguments({"code": secret, "n": secret})
    assert secret not in str(caught.value)
    assert caught.value.problems == [("code", "must be at most 3 characters long"), ("n", "must be integer")]


def test_an_array_without_items_is_as_open_as_an_open_object() -> None:
    with pytest.raises(RegistryError, match=r"\$\.properties\.tags: an array needs one 'items' schema"):
        tool(obj({"tags": {"type": "array"}}))
    spec = tool(obj({"tags": {"type": "array"}}), open_objects="allow")
    assert spec.parse_arguments({"tags": [1, "a", {"b": None}]}) == {"tags": [1, "a", {"b": None}]}
    with pytest.raises(ArgumentsInvalid, match="nested deeper than 64 levels"):
        nested: list[Any] = []
        for _ in range(100):
            nested = [nested]
        spec.parse_arguments({"tags": nested})


def test_a_typed_tools_digit_pattern_takes_only_ascii_digits() -> None:
    r"""The published schema says ``^\d{4}$`` in ECMA-262 (ASCII digits); Pydantic's regex took
    digits of any script. What is enforced is now what was shown, at any depth; a model whose
    patterns have no such class is not checked again."""

    class Slot(StrictArgs):
        code: str = Field(pattern=r"^\w+$")

    class YearArgs(StrictArgs):
        year: str = Field(pattern=r"^\d{4}$")
        slots: list[Slot] = []

    class Plain(StrictArgs):
        year: str = Field(pattern=r"^[0-9]{4}$")

    from toolgate.tools.arguments import ModelArguments, _pattern_validator

    contract = ModelArguments(YearArgs)
    assert contract.parse({"year": "2026", "slots": [{"code": "ab_1"}]}) == {"year": "2026", "slots": [{"code": "ab_1"}]}
    with pytest.raises(ArgumentsInvalid) as digits:
        contract.parse({"year": "\u0662\u0660\u0662\u0666"})  # 2026 in Arabic-Indic digits
    assert [path for path, _ in digits.value.problems] == ["year"]
    with pytest.raises(ArgumentsInvalid) as letters:
        contract.parse({"year": "2026", "slots": [{"code": "\u00e9t\u00e9"}]})  # letters outside ASCII
    assert [path for path, _ in letters.value.problems] == ["slots.0.code"]
    assert _pattern_validator(Plain, ModelArguments(Plain).json_schema()) is None
