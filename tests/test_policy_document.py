"""A release's policy document is data loaded into the gateway, and untrusted like its code: a
field a rule or a rate limit would trip over when a call is judged is refused, by name, when the
release loads. Before, ``"window_s": 0`` loaded and every call then raised ``ZeroDivisionError``
in dispatch; a role limit written as text raised ``TypeError`` when compared; a misspelled time
zone raised when the first call met the rule; ``"values_by_role": {"support": "web"}`` allowed
the values ``w``, ``e`` and ``b``; a reason naming an unknown field raised when a call broke the
rule."""

from __future__ import annotations

import copy
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from toolgate.errors import ConfigurationError, RegistryError
from toolgate.policy.rules import AllowlistRule, PolicyRules, RateLimit
from toolgate.releases.loader import load_release

DEMO = Path(__file__).resolve().parents[1] / "tools" / "demo" / "releases" / "ops-tools-1.1.0" / "policy.json"


def _demo() -> dict[str, Any]:
    return json.loads(DEMO.read_text())


def _rule(policy: dict[str, Any], rule_id: str) -> dict[str, Any]:
    return next(r for r in policy["rules"] if r["id"] == rule_id)


def _set(path: str, value: Any) -> Any:
    """A change to the demo policy: ``path`` is ``a/b/c`` into it (``rule:ID/key`` for a rule)."""

    def change(policy: dict[str, Any]) -> None:
        head, *rest = path.split("/")
        if not rest:
            policy[head] = value
            return
        node = _rule(policy, head[5:]) if head.startswith("rule:") else policy[head]
        for key in rest[:-1]:
            node = node[key]
        node[rest[-1]] = value

    return change


MALFORMED = [
    ("rate_limits/per_tenant/window_s", 0, "rate_limits.per_tenant.window_s"),
    ("rate_limits/per_tenant/window_s", -60, "rate_limits.per_tenant.window_s"),
    ("rate_limits/per_tenant/window_s", 86_401, "rate_limits.per_tenant.window_s"),
    ("rate_limits/per_tenant/window_s", 60.5, "rate_limits.per_tenant.window_s"),
    ("rate_limits/per_tenant/window_s", "60", "rate_limits.per_tenant.window_s"),
    ("rate_limits/per_principal_tool/limit", 0, "rate_limits.per_principal_tool.limit"),
    ("rate_limits/per_principal_tool/limit", True, "rate_limits.per_principal_tool.limit"),
    ("rate_limits/per_principal_tool/limit", "30", "rate_limits.per_principal_tool.limit"),
    ("rate_limits/per_tenant", 600, "rate_limits.per_tenant.limit"),
    ("rate_limits", [], "rate_limits must be an object"),
    ("approval_minutes", 0, "approval_minutes"),
    ("approval_minutes", float("nan"), "approval_minutes"),
    ("approval_minutes", "15", "approval_minutes"),
    ("policy_version", "", "policy_version"),
    ("policy_version", None, "policy_version"),
    ("rules", {"id": "x"}, "rules must be a list"),
    ("rule:refund.amount_limit/limits_by_role/finance", "100000", "limits_by_role and default_limit"),
    ("rule:refund.amount_limit/default_limit", None, "limits_by_role and default_limit"),
    ("rule:refund.amount_limit/limits_by_role", [5000], "limits_by_role must be an object"),
    ("rule:refund.amount_limit/reason", "Refunds above {limit_dollars} dollars", "may only name {limit}"),
    ("rule:refund.amount_limit/reason", "Refunds above {0}", "may only name {limit}"),
    ("rule:refund.amount_limit/reason", "Refunds above {limit.cents}", "may only name {limit}"),
    ("rule:refund.amount_limit/field", 7, "field must be a non-empty string"),
    ("rule:refund.amount_limit/tool", "", "tool must be a non-empty string"),
    ("rule:restart.service_allowlist/values_by_role/support", "web", "list of strings"),
    ("rule:restart.service_allowlist/values_by_role/support", ["web", 7], "list of strings"),
    ("rule:restart.service_allowlist/reason", None, "reason must be a non-empty string"),
]


@pytest.mark.parametrize(("path", "value", "named"), MALFORMED)
def test_a_malformed_field_is_refused_by_name_when_the_policy_is_parsed(path: str, value: Any, named: str) -> None:
    policy = _demo()
    _set(path, value)(policy)
    with pytest.raises(ConfigurationError, match=_escaped(named)):
        PolicyRules.from_mapping(policy)


def _escaped(text: str) -> str:
    return re.escape(text)


def _hours(**changes: Any) -> dict[str, Any]:
    policy = _demo()
    policy["rules"].append(
        {
            "id": "restart.office_hours",
            "tool": "restart_service",
            "kind": "allowed_hours",
            "timezone": "Europe/Paris",
            "start": "08:00",
            "end": "18:00",
            "reason": "Restarts only in office hours.",
            **changes,
        }
    )
    return policy


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"timezone": "Europe/Pariss"}, "not a known time zone"),
        ({"timezone": "../../etc/passwd"}, "not a known time zone"),
        ({"timezone": 1}, "not a known time zone"),
        ({"start": "8 o'clock"}, "start must be a time of day"),
        ({"end": None}, "end must be a non-empty string"),
        ({"end": "08:00"}, "start and end are the same time"),
        ({"exempt_roles": "operator"}, "exempt_roles must be a list"),
    ],
)
def test_an_allowed_hours_rule_that_could_not_be_judged_is_refused(changes: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError, match=_escaped(named)):
        PolicyRules.from_mapping(_hours(**changes))


def test_the_shipped_policies_and_a_well_formed_hours_rule_still_parse_as_before() -> None:
    for home in ("ops-tools-1.0.0", "ops-tools-1.1.0"):
        raw = json.loads((DEMO.parents[1] / home / "policy.json").read_text())
        parsed = PolicyRules.from_mapping(copy.deepcopy(raw))
        assert parsed.policy_version == raw["policy_version"]
    parsed = PolicyRules.from_mapping(_hours(exempt_roles=["operator"]))
    assert parsed.rate_limits.per_tenant == RateLimit(limit=600, window_s=60)
    allowlist = next(r for r in parsed.rules if r.id == "restart.service_allowlist")
    assert isinstance(allowlist, AllowlistRule) and allowlist.values_by_role["support"] == ("web", "worker")
    assert [r.id for r in parsed.rules][-1] == "restart.office_hours"


def test_a_release_whose_policy_has_a_zero_window_is_refused_when_it_loads(tmp_path: Path) -> None:
    home = tmp_path / "zero_window"
    home.mkdir()
    policy = _demo()
    policy["rate_limits"]["per_tenant"]["window_s"] = 0
    (home / "policy.json").write_text(json.dumps(policy))
    (home / "release.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path

            from toolgate.releases.bundle import Release
            from toolgate.tools.demo.release import wide

            released = Release.from_directory(
                Path({str(home)!r}), id="zero-window/1.0.0", tools=wide.tools
            )
            """
        )
    )
    with pytest.raises(RegistryError) as refused:
        load_release(f"{home / 'release.py'}:released")
    assert refused.value.code == "registry_invalid"
    assert "rate_limits.per_tenant.window_s must be an integer 1..86400 (got 0)" in str(refused.value)
