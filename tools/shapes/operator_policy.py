"""The operator's half of a tool brought in some shape: what no tool source can say for itself.

A function signature, a LangChain tool, a provider definition or an MCP server says what a tool
takes and answers; it never says its risk, approval class, owner, timeout, scopes or rollback.
Every shape (`toolgate.tools.shapes.calls` lists them) therefore takes an explicit
`OperatorPolicy`, kept apart from all of them because it is the same reviewed decision whatever
the source. Only reads get defaults; a write missing its approval class, effect, rollback or
timeout is refused at load with a `RegistryError` naming the tool.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from toolgate.errors import RegistryError
from toolgate.tools.declared.checks import OpenObjects
from toolgate.tools.spec import (
    ApprovalClass,
    NoRollback,
    Reconcile,
    ResourceRef,
    Risk,
    Rollback,
    SemanticCheck,
    ToolSpec,
)

log = logging.getLogger("toolgate.tools")

READ_TIMEOUT_S = 10.0
"""Timeout of a read whose policy names none."""


@dataclass(frozen=True, kw_only=True)
class OperatorPolicy:
    """What the operator decides about one tool, which no tool source can say for itself.

    Only reads get defaults (timeout, effect, rollback, no approval); a write must state its
    approval class, effect, rollback and timeout, or it is refused at load.
    """

    risk: Risk
    """``read-only``, ``caution`` or ``danger``: always stated, never guessed from the source."""
    owner: str
    """Owning team, the one to page when the tool or its downstream breaks."""
    scopes: frozenset[str]
    """Scopes a principal needs to see and call the tool (a plain string is refused)."""
    approval: ApprovalClass | None = None
    """Who approves a write; required for writes, ``none`` for reads."""
    effect: str | None = None
    """The expected effect in plain words, shown to reviewers; required for writes."""
    rollback: Rollback | NoRollback | None = None
    """How to undo a write, or why it cannot be undone; required for writes."""
    timeout_s: float | None = None
    """Hard timeout of one call; required for writes (an overrun leaves a write's outcome unknown)."""
    max_output_bytes: int = 4096
    """Upper bound of the serialized result returned to the model."""
    version: str = "1.0.0"
    """Version of the tool contract."""
    handler_revision: str | None = None
    """Revision proposals are pinned to (default ``<name>/<version>``); bump it when configuration
    the code hash cannot see changes (a server's version, a bound argument)."""
    resource: ResourceRef | None = None
    """The main resource the call names, checked for ownership and ordered on conflict."""
    resources: tuple[ResourceRef, ...] = ()
    """Further resources the call names."""
    audit_fields: frozenset[str] = frozenset()
    """Argument fields copied into audit events as they are (all others only as digests)."""
    semantic_check: SemanticCheck | None = field(default=None, repr=False)
    """Cross-field business validation on validated arguments."""
    reconcile: Reconcile | None = field(default=None, repr=False)
    """Status check of a write whose outcome is unknown (without one it goes to the dead letters)."""
    retry_safe_when_absent: bool = True
    """After a status check finds no effect, may the write be delivered again?"""
    pollable: bool = False
    """A status read the model is told to poll (identical repeats are expected)."""
    exposed_to_roles: frozenset[str] | None = None
    """When set, only principals holding one of these roles see the tool."""
    exposed_to_tenants: frozenset[str] | None = None
    """When set, only these tenants see the tool."""
    secret_arguments: Literal["refuse", "review"] = "refuse"
    """What happens to a call whose arguments hold a secret-looking value (see `ToolSpec`)."""
    open_paths: frozenset[str] = frozenset()
    """Argument paths where a tool loaded from a JSON Schema accepts undeclared keys (``metadata``,
    ``items[].extra``): everywhere else it is closed at every depth and an undeclared key is refused
    ``undeclared_argument`` (`toolgate.tools.declared.closed`). Not for Python-typed tools, whose
    models are closed by construction."""
    caller_fields: frozenset[str] = frozenset()
    """Argument paths that name the caller (``user_id``): the signed-in person's own id is accepted
    there, any other refused ``caller_mismatch`` (`ToolSpec.caller_fields`)."""
    identity_exempt: frozenset[str] = frozenset()
    """Argument paths whose identity-like names are not identities (a loan's ``principal``): no
    load warning for them (`ToolSpec.identity_exempt`)."""
    identity_names: Literal["warn", "refuse"] = "warn"
    """What an identity-like argument name that is neither a caller field, an owner-checked
    resource nor exempted does: a load warning (default) or, for the strict name filter of old,
    refusing the tool (`ToolSpec.identity_names`)."""

    def __post_init__(self) -> None:
        for name in ("scopes", "open_paths", "caller_fields", "identity_exempt"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise TypeError(f"{name} must be a collection of names, not the string {value!r}")
            object.__setattr__(self, name, frozenset(value))
        object.__setattr__(self, "audit_fields", frozenset(self.audit_fields))

    def spec_fields(self, name: str) -> dict[str, Any]:
        """The `ToolSpec` fields this policy sets for tool ``name``; refuses an incomplete write."""
        if self.risk != "read-only":
            missing = [
                (code, what)
                for code, what, absent in (
                    (
                        "write_without_approval",
                        "an approval class",
                        not self.approval or self.approval.kind == "none",
                    ),
                    ("missing_effect", "an effect", not (self.effect or "").strip()),
                    ("missing_rollback", "a rollback or no-rollback statement", self.rollback is None),
                    ("missing_timeout", "a timeout", self.timeout_s is None),
                )
                if absent
            ]
            if missing:
                raise RegistryError(
                    f"tool {name!r} refused: a write ({self.risk}) needs "
                    + ", ".join(what for _, what in missing)
                    + " in its operator policy",
                    tool=name,
                    problems=[(code, f"{what} is required for a write") for code, what in missing],
                )
        return {
            "version": self.version,
            "owner": self.owner,
            "risk": self.risk,
            "effect": self.effect or "Reads data; changes nothing.",
            "timeout_s": self.timeout_s or READ_TIMEOUT_S,
            "max_output_bytes": self.max_output_bytes,
            "approval": self.approval or ApprovalClass.none(),
            "required_scopes": self.scopes,
            "handler_revision": self.handler_revision or f"{name}/{self.version}",
            "rollback": self.rollback or NoRollback("read-only: nothing to undo"),
            "resource": self.resource,
            "audit_fields": self.audit_fields,
            "semantic_check": self.semantic_check,
            "reconcile": self.reconcile,
            "retry_safe_when_absent": self.retry_safe_when_absent,
            "pollable": self.pollable,
            "exposed_to_roles": self.exposed_to_roles,
            "exposed_to_tenants": self.exposed_to_tenants,
            "secret_arguments": self.secret_arguments,
            "caller_fields": self.caller_fields,
            "identity_exempt": self.identity_exempt,
            "identity_names": self.identity_names,
            **({"resources": self.resources} if self.resources else {}),
        }


def policy_fields(
    policy: OperatorPolicy,
    name: str,
    open_paths: Iterable[str] = (),
    identity_exempt: Iterable[str] = (),
    open_objects: OpenObjects | None = None,
) -> dict[str, Any]:
    """`spec_from_tool_definition`'s keywords for a JSON-Schema tool ``name`` an importer loads:
    the policy's `ToolSpec` fields, its open paths and exemptions plus the importer's own, and the
    deprecated switch; every load warning is logged (the registry audit lists them too)."""
    fields: dict[str, Any] = policy.spec_fields(name)
    fields["identity_exempt"] = policy.identity_exempt | frozenset(_names(identity_exempt, "identity_exempt"))
    fields["open_paths"] = policy.open_paths | frozenset(_names(open_paths, "open_paths"))
    fields["open_objects"] = open_objects
    return fields


def log_load_warnings(spec: ToolSpec) -> ToolSpec:
    """``spec``, after logging each of its load warnings (`ToolSpec.load_warnings`)."""
    for warning in spec.load_warnings:
        log.warning("tool %r loaded with a warning: %s", spec.name, warning)
    return spec


def _names(value: Iterable[str], what: str) -> Iterable[str]:
    if isinstance(value, str):
        raise TypeError(f"{what} must be a collection of names, not the string {value!r}")
    return value


__all__ = ["OperatorPolicy", "log_load_warnings", "policy_fields"]
