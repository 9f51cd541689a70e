"""What the registry audit measures of an argument schema (toolgate.tools.schema.shape) and the
probes behind the seeds' ``arbitrary_shell=REJECTED unknown_rollback=REJECTED`` line."""

from __future__ import annotations

import pytest

from toolgate.tools import audit
from toolgate.tools.audit import arbitrary_shell_probe, unknown_rollback_probe
from toolgate.tools.schema.shape import schema_shape


def _object(**properties: object) -> dict[str, object]:
    return {"type": "object", "properties": properties, "additionalProperties": False}


BOUNDED_STRING = {"type": "string", "maxLength": 20}


@pytest.mark.parametrize(
    ("node", "unbounded"),
    [
        ({"type": "string"}, True),
        ({"type": "string", "maxLength": 10}, False),
        ({"type": "string", "pattern": "^A$"}, False),
        ({"type": "string", "enum": ["a", "b"]}, False),
        ({"const": "x"}, False),
        ({"type": "string", "format": "date"}, False),
        ({"type": "string", "format": "hostname"}, True),  # a format without a length bound
        ({"type": ["string", "null"], "maxLength": 3}, False),
        ({"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]}, False),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, True),  # one unbounded branch suffices
        ({"type": "integer", "maximum": 5}, False),
        ({"type": "boolean"}, False),
        ({}, True),  # no type at all admits any string
        ({"type": "array", "items": BOUNDED_STRING}, True),
        ({"type": "array", "items": BOUNDED_STRING, "maxItems": 3}, False),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, True),
        ({"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 4}, False),
    ],
)
def test_an_argument_is_unbounded_unless_something_limits_it(
    node: dict[str, object], unbounded: bool
) -> None:
    shape = schema_shape(_object(value=node))
    assert shape.unbounded == (("value",) if unbounded else ())


def test_the_items_of_a_bounded_array_are_judged_too() -> None:
    shape = schema_shape(_object(tags={"type": "array", "items": {"type": "string"}, "maxItems": 5}))
    assert shape.unbounded == ("tags[]",)


def test_references_and_arrays_of_objects_are_walked_field_by_field() -> None:
    schema = {
        **_object(lines={"type": "array", "items": {"$ref": "#/$defs/Line"}, "maxItems": 20}),
        "$defs": {"Line": _object(sku={"type": "string", "pattern": "^S$"}, note={"type": "string"})},
    }
    shape = schema_shape(schema)
    assert (shape.depth, shape.leaves, shape.unbounded) == (2, 2, ("lines[].note",))


def test_depth_leaves_and_conditionals_are_measured() -> None:
    flat = schema_shape(_object(a=BOUNDED_STRING, b={"type": "integer"}))
    assert (flat.depth, flat.leaves, flat.conditionals, flat.complex, flat.warnings()) == (
        1,
        2,
        (),
        False,
        [],
    )
    deep = schema_shape(_object(a=_object(b=_object(c=BOUNDED_STRING))))
    assert (deep.depth, deep.leaves, deep.complex) == (3, 1, True)
    assert deep.warnings() == ["arguments nest 3 levels deep (aim for 2 at most)"]
    wide = schema_shape(_object(**{f"f{i}": {"type": "boolean"} for i in range(10)}))
    assert (wide.leaves, wide.complex) == (10, True)
    conditional = {
        **_object(kind={"enum": ["a", "b"]}, extra=BOUNDED_STRING),
        "if": {"properties": {"kind": {"const": "a"}}},
        "then": {"required": ["extra"]},
        "dependentRequired": {"extra": ["kind"]},
    }
    shape = schema_shape(conditional)
    assert shape.conditionals == ("if", "then", "dependentRequired") and not shape.complex
    assert shape.warnings() == [
        "conditional requirements (if, then, dependentRequired): models fill these poorly"
    ]


def test_the_probes_are_rejected_by_the_live_rules() -> None:
    assert arbitrary_shell_probe(audit.executor_fields) == "REJECTED"
    assert unknown_rollback_probe() == "REJECTED"


def test_a_disabled_executor_rule_turns_the_audit_red(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "EXECUTOR_NAMES", frozenset())
    assert arbitrary_shell_probe(audit.executor_fields) == "ACCEPTED"
    report = audit.audit_specs("probe/1", list)
    assert report.probes == "arbitrary_shell=ACCEPTED unknown_rollback=REJECTED registry_candidate=probe/1"
    assert not report.passed and report.defects[-1].startswith(
        "registry: a rule that must reject is not active"
    )
