"""The gate in front of an existing MCP server (``toolgate mcp serve --upstream CMD``).

Why through `from_mcp`: the upstream's tools become a release by the same path as any MCP server
a release imports (`toolgate.tools.shapes.mcp`): every tool needs the operator's policy (a write
without approval class, effect, rollback and timeout is refused at load; a tool without a policy
refuses the load unless the file ignores it), each tool is pinned at load, and every call first
checks the upstream still lists the tool as pinned (``tool_drifted`` otherwise, without calling
it). A policy file may also carry the pins its operator reviewed (``pins``): a server whose tool
no longer matches its reviewed pin refuses to start.

The policy file is JSON::

    {"server": "weather",
     "release": "weather-gate/1.0.0",
     "tools": {
       "get_forecast": {"risk": "read-only", "owner": "weather-team", "scopes": ["ops:read"]},
       "set_alert": {"risk": "caution", "owner": "weather-team", "scopes": ["ops:restart"],
                     "approval": "operator", "effect": "Creates a weather alert.",
                     "no_rollback": "alerts expire on their own", "timeout_s": 30}},
     "ignore": ["purge_alerts"],
     "pins": {"get_forecast": "<sha256>"},
     "policy": {}}

``approval`` is an approval class label (`ApprovalClass.parse`): reviewer roles (``operator``,
``support,finance``) or ``two_person(support,finance)``. ``policy`` is the release's business
rules (`PolicyRules.from_mapping`), none by default.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolgate.errors import RegistryError
from toolgate.policy.rules import PolicyRules
from toolgate.releases.bundle import Release
from toolgate.tools.manifest import tool_fingerprint
from toolgate.tools.shapes.mcp import from_mcp
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.write_review import ApprovalClass, NoRollback

POLICY_FIELDS = frozenset(
    {
        "risk",
        "owner",
        "scopes",
        "approval",
        "effect",
        "no_rollback",
        "timeout_s",
        "max_output_bytes",
        "version",
        "handler_revision",
        "exposed_to_roles",
    }
)
"""What a tool's entry in the policy file may say (anything else refuses the file)."""


DEFAULT_POLICY: Mapping[str, Any] = {"schema_version": 1, "policy_version": "mcp-upstream/1", "rules": []}
"""The business rules of an upstream whose policy file states none: no rules beyond approval."""


def _names(value: Any, field: str) -> frozenset[str]:
    """A list of scope or role names as a set; anything else is refused (a string would become
    the set of its letters: ``"admin"`` is not the scopes ``a``, ``d``, ``m``, ``i`` and ``n``)."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{field} must be a list of names (got {value!r})")
    return frozenset(value)


def _number(value: Any, field: str, *, whole: bool = False) -> Any:
    """A JSON number as it was written; ``true``, ``"30"`` or (for a ``whole`` field) ``4096.5``
    is refused rather than converted (``int(True)`` would be a 1-byte output limit)."""
    kinds: tuple[type, ...] = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ValueError(f"{field} must be {'an integer' if whole else 'a number'} (got {value!r})")
    return value


def operator_policy(name: str, entry: Mapping[str, Any]) -> OperatorPolicy:
    """One tool's `OperatorPolicy` from its entry in the policy file."""
    unknown = sorted(set(entry) - POLICY_FIELDS)
    if unknown:
        raise RegistryError(f"policy of tool {name!r}: unknown field(s) {', '.join(unknown)}", tool=name)
    try:
        roles = entry.get("exposed_to_roles")
        return OperatorPolicy(
            risk=entry["risk"],
            owner=str(entry["owner"]),
            scopes=_names(entry.get("scopes") or [], "scopes"),
            approval=ApprovalClass.parse(entry["approval"]) if "approval" in entry else None,
            effect=entry.get("effect"),
            rollback=NoRollback(str(entry["no_rollback"])) if "no_rollback" in entry else None,
            timeout_s=float(_number(entry["timeout_s"], "timeout_s")) if "timeout_s" in entry else None,
            max_output_bytes=_number(entry.get("max_output_bytes", 4096), "max_output_bytes", whole=True),
            version=str(entry.get("version", "1.0.0")),
            handler_revision=entry.get("handler_revision"),
            exposed_to_roles=_names(roles, "exposed_to_roles") if roles is not None else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RegistryError(f"policy of tool {name!r} is incomplete or malformed: {exc}", tool=name) from exc


def upstream_release(command: str, policy_file: Path) -> Release:
    """The release of the MCP server ``command`` starts (over stdio), under ``policy_file``.

    Raises:
        RegistryError: the file is malformed, a tool lacks a policy, a write's policy is
            incomplete, the server cannot be listed, or a tool drifted from its reviewed pin.
    """
    try:
        data = json.loads(policy_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RegistryError(f"upstream policy file {policy_file}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("tools"), dict):
        raise RegistryError(f"upstream policy file {policy_file} must hold an object with 'tools'")
    argv = shlex.split(command)
    if not argv:
        raise RegistryError("--upstream needs a command")
    server = str(data.get("server") or Path(argv[0]).stem)
    policies = {name: operator_policy(name, entry) for name, entry in data["tools"].items()}
    specs = from_mcp(
        {"transport": "stdio", "command": argv[0], "args": argv[1:]},
        policies,
        server=server,
        ignore=frozenset(data.get("ignore") or ()),
    )
    reviewed = data.get("pins") or {}
    for spec in specs:
        pin = tool_fingerprint(spec).get("remote_pin")
        if spec.name in reviewed and reviewed[spec.name] != pin:
            raise RegistryError(
                f"upstream tool {spec.name!r} drifted from its reviewed pin, refused (tool_drifted)",
                tool=spec.name,
            )
    return Release(
        id=str(data.get("release") or f"mcp-{server}/1.0.0"),
        tools=specs,
        policy=PolicyRules.from_mapping(data.get("policy") or DEFAULT_POLICY),
    )


__all__ = ["DEFAULT_POLICY", "POLICY_FIELDS", "operator_policy", "upstream_release"]
