"""A spec's stop conditions stay whole while they get cheap to re-check.

Every `ToolSpec` built runs `spec_problems`, and the evaluation harness builds one per tool and case
twice over (``dataclasses.replace`` with a wrapped handler: `toolgate.evals.faults.instrument`,
`toolgate.evals.hidden_writes.HiddenWriteCheck.wrap`). The expensive part, walking the argument
schema for identity-like fields, is now worked out once per schema (`ArgumentContract.declared_fields`,
`toolgate.tools.spec.identity_paths`); every check still runs on every spec built. These
tests hold the verdicts to what the uncached walk decides, and show that a ``replace`` that brings in
a real problem is refused, whatever spec it was replaced from.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, create_model

from toolgate.errors import RegistryError
from toolgate.evals.faults import EffectLedger, instrument
from toolgate.evals.hidden_writes import HiddenWriteCheck
from toolgate.graph.bootstrap import initialize_store
from toolgate.releases.bundle import ReleaseEnv
from toolgate.store import SQLiteStore
from toolgate.tools import spec as spec_module
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.identity_names import is_identity_name
from toolgate.tools.schema.walk import field_paths
from toolgate.tools.shapes.thirdparty import spec_from_tool_definition
from toolgate.tools.spec import (
    CostEstimate,
    HandlerContext,
    StrictArgs,
    ToolSpec,
    identity_problems,
    spec_problems,
)
from toolgate.tools.write_review import ApprovalClass, NoRollback


@pytest.fixture(scope="module")
def specs() -> Iterator[list[ToolSpec]]:
    """Every tool of the wide demo release, built on a throwaway store."""
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "s.sqlite", key=b"k" * 32)
        release = DEMO_RELEASES["ops-tools/1.1.0"]
        initialize_store(store, release)
        yield list(release.registry(ReleaseEnv(store, b"k" * 32)).tools.values())
        store.close()


def uncached_identity_problems(spec: ToolSpec) -> list[tuple[str, str]]:
    """`identity_problems` as it was written before its walk was kept per schema."""
    paths = {path: name for path, name, _ in field_paths(spec.contract.json_schema())}
    problems: list[tuple[str, str]] = []
    for path in sorted(paths):
        if is_identity_name(paths[path]) and path not in spec.identity_exempt:
            problems.append(("identity_argument", f"identity or authority in arguments: {path}"))
    for path in sorted(spec.identity_exempt):
        if path not in paths or not is_identity_name(paths[path]):
            problems.append(
                ("unknown_identity_exempt", f"identity_exempt names no identity-like argument: {path}")
            )
    return problems


class Ack(BaseModel):
    ok: bool = True


def _echo(args: Any, ctx: HandlerContext) -> dict[str, Any]:
    return {}


def declared(properties: dict[str, Any], **overrides: Any) -> ToolSpec:
    """A read-only tool registered from a JSON Schema (its contract is a `JsonSchemaArguments`)."""
    definition = {
        "type": "function",
        "function": {
            "name": "thing",
            "description": "A thing.",
            "parameters": {"type": "object", "properties": properties, "additionalProperties": False},
        },
    }
    fields: dict[str, Any] = {
        "version": "1.0.0",
        "owner": "integrations",
        "description": "A thing.",
        "risk": "read-only",
        "effect": "reads",
        "timeout_s": 5,
        "max_output_bytes": 2048,
        "required_scopes": frozenset({"things:read"}),
        "handler_revision": "thing/1.0.0",
        **overrides,
    }
    fields.setdefault("approval", ApprovalClass.none())
    fields.setdefault("rollback", NoRollback("nothing to undo"))
    return spec_from_tool_definition(definition, handler=_echo, result_model=Ack, **fields)


def test_the_kept_walk_finds_what_the_schema_declares(specs: list[ToolSpec]) -> None:
    loan = declared(
        {
            "loans": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"principal": {"type": "integer"}},
                    "additionalProperties": False,
                },
            },
            "notify_users": {"type": "boolean"},
        },
        identity_exempt=frozenset({"loans[].principal", "notify_users"}),
    )
    for spec in [*specs, loan]:
        walked = tuple((path, name) for path, name, _ in field_paths(spec.contract.json_schema()))
        assert spec.contract.declared_fields() == walked, spec.name
        assert identity_problems(spec) == uncached_identity_problems(spec) == [], spec.name
        paths = {path for path, _ in walked}
        for exempt in (frozenset(), frozenset({"nope"}), *(frozenset({p}) for p in sorted(paths))):
            probe = _unchecked(spec, identity_exempt=exempt)
            assert identity_problems(probe) == uncached_identity_problems(probe), (spec.name, exempt)
    assert [c for c, _ in identity_problems(_unchecked(loan, identity_exempt=frozenset()))] == [
        "identity_argument",
        "identity_argument",
    ]


def _unchecked(spec: ToolSpec, **fields: Any) -> ToolSpec:
    """``spec`` with ``fields`` changed, built without its checks (to ask the reference walk)."""
    copy = object.__new__(ToolSpec)
    object.__setattr__(copy, "__dict__", {**spec.__dict__, **fields})
    return copy


def test_a_handler_only_replace_loads_and_runs_every_check(
    specs: list[ToolSpec], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    checked: list[str] = []

    def counted(spec: ToolSpec) -> list[tuple[Any, str]]:
        checked.append(spec.name)
        return spec_problems(spec)

    monkeypatch.setattr(spec_module, "spec_problems", counted)
    store = SQLiteStore(tmp_path / "s.sqlite", key=b"k" * 32)
    wrapped = HiddenWriteCheck(store).wrap(instrument(specs, [], EffectLedger()))
    assert [s.name for s in wrapped] == [s.name for s in specs]
    assert all(w.handler is not s.handler for w, s in zip(wrapped, specs, strict=True))
    assert sorted(checked) == sorted([s.name for s in specs] * 2)  # nothing skipped: checked each time
    store.close()


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"owner": " "}, "missing_owner"),
        ({"identity_exempt": frozenset({"order_id"})}, "unknown_identity_exempt"),
        ({"audit_fields": frozenset({"no_such_argument"})}, "unknown_audit_field"),
        ({"cost_estimate": CostEstimate(True, "usd")}, "invalid_cost_estimate"),  # equal to a valid one
        ({"egress_hosts": frozenset({"http://x"})}, "invalid_egress_host"),
    ],
)
def test_a_replace_with_a_new_handler_and_a_real_problem_is_refused(
    specs: list[ToolSpec], fields: dict[str, Any], code: str
) -> None:
    lookup = next(s for s in specs if s.name == "lookup_order")
    ledger = EffectLedger()
    [instrumented] = instrument([lookup], [], ledger)  # a spec made by a handler-only replace
    for source in (lookup, instrumented):
        with pytest.raises(RegistryError) as refused:
            replace(source, handler=ledger.counting("lookup_order", source.handler), **fields)
        assert code in [c for c, _ in refused.value.problems]


def test_an_argument_model_is_checked_as_itself_not_by_its_name(specs: list[ToolSpec]) -> None:
    """The walk is kept per model class: a new class of the same name and fields plus an
    identity-like one is walked afresh and refused."""
    lookup = next(s for s in specs if s.name == "lookup_order")
    fields = {name: (info.annotation, info) for name, info in lookup.args_model.model_fields.items()}
    same = create_model(lookup.args_model.__name__, __base__=StrictArgs, **fields)  # type: ignore[call-overload]
    assert replace(lookup, args_model=same).contract.declared_fields() == lookup.contract.declared_fields()
    grown = create_model(  # type: ignore[call-overload]
        lookup.args_model.__name__, __base__=StrictArgs, tenant_id=(str, ...), **fields
    )
    with pytest.raises(RegistryError, match="identity or authority in arguments: tenant_id"):
        replace(lookup, args_model=grown)
    nested_model = create_model("Inner", __base__=StrictArgs, approved_by=(str, ...))
    nested = create_model(  # type: ignore[call-overload]
        lookup.args_model.__name__, __base__=StrictArgs, inner=(nested_model, ...), **fields
    )
    with pytest.raises(RegistryError, match=r"identity or authority in arguments: inner\.approved_by"):
        replace(lookup, args_model=nested)


def test_the_walk_handed_out_cannot_change_the_next_check(specs: list[ToolSpec]) -> None:
    """The kept field list is a tuple of strings, and `json_schema` still returns a copy: a caller
    that edits what it was given changes nothing another spec is checked against."""
    lookup = next(s for s in specs if s.name == "lookup_order")
    schema = lookup.contract.json_schema()
    schema["properties"]["tenant_id"] = {"type": "string"}
    assert isinstance(lookup.contract.declared_fields(), tuple)
    assert "tenant_id" not in dict(lookup.contract.declared_fields())
    assert replace(lookup, handler=_echo).name == "lookup_order"
