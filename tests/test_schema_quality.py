"""Schema quality and schema compatibility, enforced where a release becomes live.

The chapter's §3.1 (a description under every parameter, a "when not to use" line) is checked by
`toolgate registry lint`, `toolgate verify` and release control; its §5.2 (additive vs breaking
changes) decides whether a candidate that changed a tool's schema needs a version bump. Release
control refuses either with a stable code, audited, and starts nothing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import pytest
from pydantic import Field
from release_control_support import CANDIDATE, CONTROL, TwoReleases, audit_events, count
from support import cli_env, toolgate
from test_release_control_routing import admin

from toolgate.errors import ReleaseControlError
from toolgate.store.base import Store
from toolgate.tools.audit import audit_specs
from toolgate.tools.schema.compat import bump_allows, classify_change, release_breaks
from toolgate.tools.schema.quality import release_quality, tool_quality
from toolgate.tools.shapes.definitions import from_openai
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.spec import StrictArgs, ToolSpec


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


BASE = _schema(
    {
        "order_id": {"type": "string", "pattern": "^O-[0-9]+$", "description": "Order id."},
        "status": {"type": "string", "enum": ["pending", "approved", "rejected"], "description": "State."},
        "amount": {"type": "integer", "maximum": 1000, "description": "Cents."},
    },
    ["order_id", "status"],
)


def _changed(**props: Any) -> dict[str, Any]:
    properties = {**BASE["properties"], **{k: v for k, v in props.items() if v is not None}}
    for name in [k for k, v in props.items() if v is None]:
        del properties[name]
    return _schema(properties, [r for r in BASE["required"] if r in properties])


@pytest.mark.parametrize(
    ("new", "reason"),
    [
        (_changed(order_id=None), "order_id: field removed (or renamed)"),
        (
            _schema(
                {
                    **{k: v for k, v in BASE["properties"].items() if k != "order_id"},
                    "order": BASE["properties"]["order_id"],
                },
                ["order", "status"],
            ),
            "order_id: field removed (or renamed)",
        ),
        (
            _schema({**BASE["properties"], "note": {"type": "string"}}, [*BASE["required"], "note"]),
            "note: new required field",
        ),
        (_schema(BASE["properties"], [*BASE["required"], "amount"]), "amount: optional field made required"),
        (
            _changed(amount={"type": "string", "description": "Cents."}),
            "amount: type narrowed (no longer accepts integer)",
        ),
        (
            _changed(status={"type": "string", "enum": ["pending", "approved"]}),
            "status: enum value(s) removed: ['rejected']",
        ),
        (_changed(amount={"type": "integer", "maximum": 500}), "amount: bound maximum tightened 1000 -> 500"),
    ],
)
def test_breaking_changes_are_classified_breaking(new: dict[str, Any], reason: str) -> None:
    change = classify_change(BASE, new)
    assert change.kind == "breaking"
    assert reason in change.breaking


@pytest.mark.parametrize(
    ("new", "reason"),
    [
        (
            _schema({**BASE["properties"], "note": {"type": "string"}}, BASE["required"]),
            "note: new optional field",
        ),
        (
            _changed(status={"type": "string", "enum": ["pending", "approved", "rejected", "held"]}),
            "status: enum value(s) added: ['held']",
        ),
        (_schema(BASE["properties"], ["order_id"]), "status: required field made optional"),
        (
            _changed(amount={"type": ["integer", "null"], "maximum": 1000}),
            "amount: type widened (now accepts null)",
        ),
    ],
)
def test_additive_changes_are_classified_additive(new: dict[str, Any], reason: str) -> None:
    change = classify_change(BASE, new)
    assert change.kind == "additive" and change.breaking == ()
    assert reason in change.additive


def test_a_description_only_change_is_unchanged() -> None:
    new = _changed(amount={"type": "integer", "maximum": 1000, "description": "Amount in cents, positive."})
    assert classify_change(BASE, new).kind == "unchanged"


def test_a_breaking_change_needs_a_major_bump() -> None:
    assert not bump_allows("breaking", "2.1.0", "2.1.0")
    assert not bump_allows("breaking", "2.1.0", "2.2.0")
    assert bump_allows("breaking", "2.1.0", "3.0.0")
    assert bump_allows("breaking", "0.3.0", "0.4.0")  # below 1.0.0 a minor bump is the major one
    assert bump_allows("additive", "2.1.0", "2.1.0")
    removed = _changed(amount=None)
    assert release_breaks({"t": ("1.0.0", BASE)}, {"t": ("1.0.0", removed)}) == [
        "t 1.0.0->1.0.0: amount: field removed (or renamed)"
    ]
    assert release_breaks({"t": ("1.0.0", BASE)}, {"t": ("2.0.0", removed)}) == []


# ---- schema quality -------------------------------------------------------------------------


class _Bare(StrictArgs):
    service_alias: Literal["web", "worker"]
    reason: str = Field(max_length=200)


class _Described(StrictArgs):
    service_alias: Literal["web", "worker"] = Field(description="One approved service alias.")
    reason: str = Field(max_length=200, description="Why, for the operator.")


def _restart(two: TwoReleases, **changes: Any) -> ToolSpec:
    spec = two(CANDIDATE).registry.tools["restart_service"]
    return dataclasses.replace(spec, **changes)


def test_the_lint_fails_an_undescribed_parameter_and_a_write_without_a_when_not_line(
    store: Store, tmp_path: Path
) -> None:
    two = TwoReleases(store, tmp_path, evidence=False)
    bare = tool_quality(_restart(two, args_model=_Bare))
    assert not bare.passed
    assert bare.problems == [
        "parameter: service_alias has no description (say what it is and its constraint)",
        "parameter: reason has no description (say what it is and its constraint)",
    ]
    vague = tool_quality(_restart(two, args_model=_Described, description="Restart a service."))
    assert vague.problems == [
        "when_not_to_use: a write's description must say when not to use it "
        "(e.g. 'Do not use this to ...; use <neighbour> for that')"
    ]
    assert "when_not_to_use=FAIL" in vague.line() and vague.line().endswith("result=FAIL")
    report = audit_specs("acme/1.0.0", lambda: [_restart(two, args_model=_Bare)])
    assert "schema_quality=0/1" in report.lines()
    assert "warning=restart_service: schema quality: parameter: reason has no description" in "\n".join(
        report.lines()
    )
    good = tool_quality(_restart(two, args_model=_Described))
    assert good.passed and "params_described=2/2 when_not_to_use=PASS" in good.line()
    # every shipped demo tool passes
    assert all(q.passed for q in release_quality(two(CANDIDATE).registry.tools.values()))


def test_registry_lint_prints_a_check_line_per_tool(tmp_path: Path) -> None:
    out = toolgate(["registry", "lint", "--release", CANDIDATE], cli_env(tmp_path)).stdout.splitlines()
    assert out[-1] == "schema_quality=PASS tools=12 failing=0"
    restart = next(line for line in out if line.startswith("schema_quality=restart_service "))
    audit = toolgate(["registry", "audit", "--release", CANDIDATE], cli_env(tmp_path)).stdout.splitlines()
    assert "schema_quality=12/12" in audit and audit[-1] == "audit=PASS"
    assert restart == (
        "schema_quality=restart_service description=PASS params_described=2/2 when_not_to_use=PASS "
        "neighbour_named=yes enums=1 free_strings=0 required=2/2 result=PASS"
    )


# ---- release control ------------------------------------------------------------------------


class _Swapped:
    """The root's gateways, with the candidate's tools replaced (a candidate built differently)."""

    def __init__(self, two: TwoReleases, *specs: ToolSpec) -> None:
        self.two, self.specs = two, {s.name: s for s in specs}

    def __call__(self, release: str, canary: bool = False) -> Any:
        gateway = self.two(release, canary)
        if release != CANDIDATE:
            return gateway
        return SimpleNamespace(registry=SimpleNamespace(tools={**gateway.registry.tools, **self.specs}))

    def verify(self, release_id: str) -> str:
        return self.two.verify(release_id)


class _NoReason(StrictArgs):
    service_alias: Literal["web", "worker", "scheduler"] = Field(description="One approved service alias.")


def _shadow_refused(two: TwoReleases, store: Store, *specs: ToolSpec) -> str:
    two.app.gateways = _Swapped(two, *specs)  # type: ignore[assignment]
    before = count(store, "release_rollouts")
    with pytest.raises(ReleaseControlError) as refused:
        two.control().shadow(admin(two), CANDIDATE)
    assert count(store, "release_rollouts") == before  # nothing started
    assert audit_events(store, "release.refused")[-1].code == refused.value.code
    return str(refused.value.code)


def test_a_breaking_schema_change_without_a_version_bump_is_refused(store: Store, tmp_path: Path) -> None:
    two = TwoReleases(store, tmp_path)
    same_version = _restart(two, args_model=_NoReason)  # `reason` removed, still 2.1.0
    assert _shadow_refused(two, store, same_version) == "breaking_schema_change"
    refusal = audit_events(store, "release.refused")[-1]
    assert "restart_service 2.1.0->2.1.0: reason: field removed (or renamed)" in refusal.detail["message"]
    # the same change with a major bump moves on (to its evidence, which TwoReleases recorded)
    two.app.gateways = _Swapped(two, _restart(two, args_model=_NoReason, version="3.0.0"))  # type: ignore[assignment]
    rollout = two.control().shadow(admin(two), CANDIDATE)
    assert rollout.phase == "shadow" and rollout.candidate == CANDIDATE


def test_a_candidate_failing_the_schema_quality_check_is_refused(store: Store, tmp_path: Path) -> None:
    two = TwoReleases(store, tmp_path)
    assert _shadow_refused(two, store, _restart(two, args_model=_Bare, version="3.0.0")) == "schema_quality"
    assert CONTROL != CANDIDATE


def test_a_tool_registered_from_a_json_schema_is_linted_at_every_depth() -> None:
    policy = OperatorPolicy(
        risk="read-only", owner="t", scopes=frozenset({"ops:read"}), max_output_bytes=2048
    )
    schema = {
        "type": "object",
        "properties": {
            "sort": {"type": "string", "enum": ["price", "name"], "description": "Order of results."},
            "filter": {
                "type": "object",
                "description": "What to keep.",
                "properties": {"max_price": {"type": "integer", "maximum": 10000}},
                "additionalProperties": False,
            },
        },
        "required": ["sort"],
        "additionalProperties": False,
    }
    definition = {
        "type": "function",
        "function": {"name": "search_catalog", "description": "Search the catalog.", "parameters": schema},
    }
    quality = tool_quality(from_openai(definition, lambda **_: "ok", policy))
    assert quality.problems == [
        "parameter: filter.max_price has no description (say what it is and its constraint)"
    ]
    assert "params_described=2/3" in quality.line() and "when_not_to_use=n/a" in quality.line()
    assert "required=1/2" in quality.line() and "enums=1" in quality.line()
