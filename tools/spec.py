"""The capability spec: everything trusted code knows about a tool that the model never sees.

A tool is three things, each reviewed on its own: a Pydantic argument model with ``extra="forbid"``, a
plain handler function, and this spec (owner, risk, effect, timeout, output bound, approval
class, scopes, resource key, rollback). `ToolSpec` refuses to be constructed when a field that
review requires is missing or contradictory (a "stop" condition, `toolgate.tools.spec_checks`), so
an unsafe tool never loads.

This module is the public home of the vocabulary a tool is written with: besides `ToolSpec` it
exports the handler's side (`toolgate.tools.handler`), the resource declarations
(`toolgate.tools.resources`) and the review declarations (`toolgate.tools.write_review`), so tool
code and ``toolgate``'s top-level exports import them from here whatever module defines them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from toolgate.errors import RegistryError
from toolgate.tools.arguments import ArgumentContract, ArgumentsInvalid, ModelArguments
from toolgate.tools.credentials import ServiceScope
from toolgate.tools.declared.tools import contract_of
from toolgate.tools.handler import (
    Handler,
    HandlerContext,
    Reconcile,
    SemanticCheck,
    StrictArgs,
    ToolResult,
)
from toolgate.tools.identity_names import is_identity_name
from toolgate.tools.registry_fields import CostEstimate, Deprecation, ToolRateLimit
from toolgate.tools.resources import (
    OwnerCheck,
    ResourceRef,
    ResourceResolver,
    ResourceStatus,
    ownership,
)
from toolgate.tools.schema.walk import path_matches
from toolgate.tools.spec_checks import spec_problems
from toolgate.tools.waits import Wait
from toolgate.tools.wire import wire_name
from toolgate.tools.write_review import ApprovalClass, NoRollback, Rollback

Risk = Literal["read-only", "caution", "danger"]
"""read-only observes; caution changes state with bounded impact; danger is high-impact."""


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """One reviewed capability. Construction fails closed on any stop condition (`spec_problems`)."""

    name: str
    """The tool's real name, as proposals, audit events, reviewers and `ToolMessage` names show it.

    Any printable name up to 128 characters (``math.factorial``, ``getWeather``); the model is
    told `wire_name`."""
    version: str
    """Semantic version of the tool contract."""
    owner: str
    """Owning team, the one to page when the downstream contract drifts."""
    description: str
    """When to use it and when not to (sent to the model). May be written in reStructuredText like
    any docstring: the model is sent it as plain text (`toolgate.tools.model_text.plain_text`),
    while the manifest and reviewers keep it as written."""
    args_model: type[BaseModel]
    """Argument model; must forbid extra fields. For a tool registered from a JSON Schema it is a
    `toolgate.tools.declared.tools.DeclaredArguments` stand-in carrying the declared schema."""
    result_model: type[BaseModel]
    """Result contract; output is validated and reduced to its fields."""
    risk: Risk
    """read-only, caution or danger."""
    effect: str
    """The expected effect in plain words, shown to reviewers."""
    timeout_s: float
    """Hard timeout for one handler call."""
    max_output_bytes: int
    """Upper bound of the serialized result returned to the model."""
    approval: ApprovalClass
    """Who approves a write (``none`` for reads)."""
    required_scopes: frozenset[str]
    """Scopes the principal needs to see and call the tool."""
    handler: Handler = field(repr=False)
    """The fixed, reviewed function that performs the call."""
    handler_revision: str
    """Revision of the handler, e.g. ``issue-refund/1.0.0``; proposals are pinned to it."""
    rollback: Rollback | NoRollback
    """How to undo the effect, or why it cannot be undone."""
    resource: ResourceRef | None = None
    """The main resource resolved for ownership and conflict checks."""
    resources: tuple[ResourceRef, ...] = ()
    """Further resources the call names (a payment method beside an order, each item of a list)."""
    audit_fields: frozenset[str] = frozenset()
    """Argument fields copied into audit events as-is; all others appear only as digests."""
    semantic_check: SemanticCheck | None = field(default=None, repr=False)
    """Cross-field business validation on validated arguments (read-only; returns a problem or None)."""
    reconcile: Reconcile | None = field(default=None, repr=False)
    """Status check for an unknown outcome: finds the effect by idempotency key or natural key.

    Returns the result when the effect happened, None when the system shows no trace of it.
    Writes without one go straight to the dead-letter list when their outcome is unknown."""
    retry_safe_when_absent: bool = True
    """After a status check finds no effect, may the operation be delivered again? True when the
    downstream dedupes on the idempotency key (or the handler checks the natural key first)."""
    pollable: bool = False
    """A status read the model is told to poll (e.g. ``check_job_status``): identical repeats are
    expected, so loop detection leaves it to the turn budget and deadline."""
    wait: Wait | None = None
    """A write whose result starts a job the orchestrator waits for, not the model (`toolgate.tools.waits`)."""
    cost_estimate: CostEstimate | None = None
    """What one call costs (``CostEstimate(0.002, "usd")``), shown in the manifest and inventory."""
    rate_limit: ToolRateLimit | None = None
    """At most this many calls of the tool per window, all principals together (`toolgate.tools.registry_fields`)."""
    deprecation: Deprecation | None = None
    """Deprecated from ``since``, callable for ``window``, then refused ``tool_deprecated``."""
    review_details: Callable[[Any, HandlerContext], dict[str, Any]] | None = field(default=None, repr=False)
    """Read-only facts a reviewer needs beyond the arguments (e.g. what a preview token would create)."""
    exposed_to_roles: frozenset[str] | None = None
    """When set, only principals holding one of these roles see the tool (besides the scopes)."""
    exposed_to_tenants: frozenset[str] | None = None
    """When set, only these tenants see the tool (per-tenant integrations)."""
    secret_arguments: Literal["refuse", "review"] = "refuse"
    """What happens to a call whose arguments hold a secret-looking value (a key, token or card
    number). ``refuse``: dispatch refuses it (``secret_in_arguments``) and the value never enters
    checkpointed state. ``review`` (writes only, e.g. a payment tool that takes a card number):
    it is proposed with its real arguments, shown to the reviewer as they are. Arguments are
    never rewritten: what runs is what was approved."""
    identity_exempt: frozenset[str] = frozenset()
    """Paths of argument fields whose identity-like names are not identities (a loan's
    ``principal``, ``user_ratings``, ``items[].owner_note``), as reviewed by the operator.
    Registration refuses every other identity-like field; dispatch accepts these (see `identity_keys`).
    Paths use `toolgate.tools.schema.walk`'s syntax (``*`` for an open object's keys); a property
    whose own name holds ``.``, ``[]`` or ``*`` cannot be exempted."""
    forwarded_credentials: frozenset[str] = frozenset()
    """Which of the user's forwarded credentials (``X-Toolgate-Credential-<name>``, e.g.
    ``crm_token``) the handler acts with: its context holds these and no others. For a write they
    are sealed with the proposal and used for its execution and status checks."""
    service_credential: ServiceScope | None = None
    """The downstream and scopes of a short-lived service credential, for a tool that calls a
    service for itself rather than for the user (`toolgate.tools.credentials`)."""
    egress_hosts: frozenset[str] = frozenset()
    """The only hosts (``host`` or ``host:port``) the handler may connect to; empty: no network
    capability (an undeclared handler is not confined, see `toolgate.tools.egress`)."""
    wire_name: str = field(init=False)
    """The name the model is told and calls (``^[a-zA-Z0-9_-]{1,64}$``, see `toolgate.tools.wire`)."""
    contract: ArgumentContract = field(init=False, repr=False, compare=False)
    """The argument semantics behind `parse_arguments` and `handler_arguments`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "wire_name", wire_name(self.name))
        object.__setattr__(self, "contract", contract_of(self.args_model) or ModelArguments(self.args_model))
        problems = spec_problems(self)
        if problems:
            raise RegistryError(
                f"tool {self.name!r} refused: " + "; ".join(message for _, message in problems),
                tool=self.name,
                problems=problems,
            )

    @property
    def resource_refs(self) -> tuple[ResourceRef, ...]:
        """Every resource the tool declares, the main one first."""
        return ((self.resource,) if self.resource is not None else ()) + tuple(self.resources)

    @property
    def is_write(self) -> bool:
        """True for caution and danger tools: they become proposals, never run directly."""
        return self.risk != "read-only"

    def parse_arguments(self, raw: Any) -> dict[str, Any]:
        """The call's arguments as toolgate keeps them (proposal, digest, operation key, audit,
        what the reviewer sees): validated against the tool's schema, as JSON values.

        An omitted argument stays omitted; one with a declared default is filled with it; ``null``
        is kept only where the schema allows it. Raises `ArgumentsInvalid` naming each problem's
        field path (never the input values). See `toolgate.tools.arguments`."""
        return self.contract.parse(raw)

    def handler_arguments(self, arguments: Mapping[str, Any]) -> Any:
        """What the handler receives for arguments this tool kept: the model instance (Python-typed
        tools; ``model_fields_set`` names the kept fields) or a read-only mapping of exactly the kept
        arguments (JSON-Schema tools, `toolgate.tools.arguments.FrozenArguments`)."""
        return self.contract.for_handler(arguments)

    def identity_keys(self, arguments: Any) -> Iterator[str]:
        """`toolgate.tools.identity_names.identity_keys` of a call's arguments, less this tool's
        `identity_exempt` fields: what dispatch must refuse as ``identity_in_arguments``."""

        def walk(value: Any, prefix: str, place: tuple[tuple[str, bool], ...], depth: int) -> Iterator[str]:
            if depth > 32:
                return
            if isinstance(value, dict):
                for key, item in value.items():
                    path = f"{prefix}.{key}" if prefix else str(key)
                    here = (*place, (str(key), False))
                    exempt = any(path_matches(pattern, here) for pattern in self.identity_exempt)
                    if is_identity_name(str(key)) and not exempt:
                        yield path
                    yield from walk(item, path, here, depth + 1)
            elif isinstance(value, list):
                for index, item in enumerate(value[:1000]):
                    yield from walk(item, f"{prefix}.{index}", (*place, ("", True)), depth + 1)

        return walk(arguments, "", (), 0)

    def rollback_text(self) -> str:
        """The rollback or no-rollback statement as shown to reviewers."""
        if isinstance(self.rollback, Rollback):
            return self.rollback.statement
        return f"no rollback: {self.rollback.reason}"


__all__ = [
    "ApprovalClass",
    "ArgumentsInvalid",
    "CostEstimate",
    "Deprecation",
    "Handler",
    "HandlerContext",
    "NoRollback",
    "OwnerCheck",
    "Reconcile",
    "ResourceRef",
    "ResourceResolver",
    "ResourceStatus",
    "Risk",
    "Rollback",
    "SemanticCheck",
    "ServiceScope",
    "StrictArgs",
    "ToolRateLimit",
    "ToolResult",
    "ToolSpec",
    "Wait",
    "ownership",
]
