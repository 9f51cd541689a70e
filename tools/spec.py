"""The capability spec: everything trusted code knows about a tool that the model never sees.

A tool is three things, each reviewed on its own: a Pydantic argument model with ``extra="forbid"``, a
plain handler function, and this spec (owner, risk, effect, timeout, output bound, approval
class, scopes, resource key, rollback). `ToolSpec` refuses to be constructed when a field that
review requires is missing or contradictory (a "stop" condition), so an unsafe tool never loads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from toolgate.errors import RegistryError, ToolExecutionError
from toolgate.tools.argpaths import parse_path
from toolgate.tools.arguments import ArgumentContract, ArgumentsInvalid, ModelArguments
from toolgate.tools.declared import contract_of
from toolgate.tools.identity_names import is_identity_name
from toolgate.tools.schema_walk import field_paths, path_matches
from toolgate.tools.wire import WIRE_NAME, wire_name

Risk = Literal["read-only", "caution", "danger"]
"""read-only observes; caution changes state with bounded impact; danger is high-impact."""

MAX_NAME_LENGTH = 128
"""Longest real tool name (the model sees the wire name, see `toolgate.tools.wire`)."""


@dataclass(frozen=True, kw_only=True)
class ApprovalClass:
    """Who must approve a write before it may execute.

    ``none`` is only valid for read-only tools. ``role`` needs one reviewer holding one of
    ``roles``. ``two_person`` needs ``reviewers_required`` distinct reviewers holding one of
    ``roles``, unless one reviewer holds a role in ``sole_approver_roles``.
    """

    kind: Literal["none", "role", "two_person"]
    """The approval class name, as printed in reviews and the registry audit."""
    roles: frozenset[str] = frozenset()
    """Roles whose holders may approve."""
    reviewers_required: int = 0
    """Distinct qualifying reviewers needed."""
    sole_approver_roles: frozenset[str] = frozenset()
    """Roles strong enough to approve alone even under ``two_person`` (e.g. ``finance``)."""

    @classmethod
    def none(cls) -> ApprovalClass:
        """No approval: reads only."""
        return cls(kind="none")

    @classmethod
    def role(cls, *roles: str) -> ApprovalClass:
        """One reviewer holding any of ``roles``."""
        return cls(kind="role", roles=frozenset(roles), reviewers_required=1)

    @classmethod
    def two_person(cls, *roles: str, sole_approver_roles: tuple[str, ...] = ()) -> ApprovalClass:
        """Two distinct reviewers holding any of ``roles`` (or one in ``sole_approver_roles``)."""
        return cls(
            kind="two_person",
            roles=frozenset(roles) | frozenset(sole_approver_roles),
            reviewers_required=2,
            sole_approver_roles=frozenset(sole_approver_roles),
        )

    def describe(self) -> str:
        """Short label such as ``operator`` or ``two_person(support,finance)``."""
        if self.kind == "none":
            return "none"
        roles = ",".join(sorted(self.roles))
        if self.kind == "role":
            return roles
        sole = f";sole={','.join(sorted(self.sole_approver_roles))}" if self.sole_approver_roles else ""
        return f"two_person({roles}{sole})"


@dataclass(frozen=True)
class Rollback:
    """How a completed effect is undone: by a declared rollback operation, itself approved."""

    statement: str
    """What the rollback does, shown to reviewers."""
    tool: str | None = None
    """Name of the tool that performs the rollback, when one exists in the release."""
    arguments: Callable[[dict[str, Any]], dict[str, Any]] | None = field(default=None, compare=False)
    """Maps the completed operation's arguments to the rollback operation's arguments."""


@dataclass(frozen=True)
class NoRollback:
    """An explicit statement that the effect cannot be undone, with the reason."""

    reason: str
    """Why no rollback exists (shown to reviewers, required to be non-empty)."""


ResourceStatus = Literal["owned", "foreign", "missing", "not_owner"]
"""Where a named resource stands relative to the caller: theirs (``owned``), another tenant's
(``foreign``), absent (``missing``), or their tenant's but another user's (``not_owner``)."""


OwnerCheck = Callable[[str, "HandlerContext"], ResourceStatus]
"""Who owns one resource id, asked of the system of record with the caller's tenant and user
(a `HandlerContext` without keys or deadline); returns a `ResourceStatus`."""


@dataclass(frozen=True, kw_only=True)
class ResourceRef:
    """A resource a call names, resolved for the authenticated caller before anything touches it.

    A tool declares one per argument that names a resource (``order_id``, ``payment.method_id``,
    ``items[].sku``: every value found there is checked). Checked at dispatch and again at execute.
    """

    kind: str
    """Resource type, e.g. ``order`` or ``service``."""
    argument: str
    """Path of the argument that carries the resource identifier (see `toolgate.tools.argpaths`)."""
    conflict: bool = True
    """Calls on the same (kind, id) in one batch run in order, never concurrently."""
    owner: OwnerCheck | None = field(default=None, compare=False)
    """Resolves ownership with tenant and user (e.g. an order belongs to one customer). Without
    it the registry's resolver decides per tenant."""
    staff_roles: frozenset[str] = frozenset()
    """Holders of these roles act on any user's resource of their own tenant (support staff);
    other tenants' resources stay out of reach."""


class ResourceResolver(Protocol):
    """Resolves a resource under the authenticated tenant, reading the system of record only."""

    def resource_status(self, kind: str, resource_id: str, tenant_id: str) -> ResourceStatus:
        """Ownership of ``(kind, resource_id)`` relative to ``tenant_id``."""
        ...


def ownership(row: Any, tenant_id: str, user_id: str | None = None, owner_column: str = "") -> ResourceStatus:
    """Status of a looked-up resource row relative to ``tenant_id`` (its ``tenant_id`` column)
    and, when ``owner_column`` is given, to ``user_id`` (a null owner is the tenant's)."""
    if row is None:
        return "missing"
    if row["tenant_id"] != tenant_id:
        return "foreign"
    if owner_column and row[owner_column] is not None and row[owner_column] != user_id:
        return "not_owner"
    return "owned"


@dataclass(frozen=True, kw_only=True)
class HandlerContext:
    """What trusted code hands a handler besides its typed arguments.

    Identity comes from here, never from arguments; writes also get the idempotency key
    derived from their operation key, which they pass downstream.
    """

    tenant_id: str
    """Authenticated tenant; handlers scope every query to it."""
    user_id: str
    """Requesting user."""
    operation_key: str | None = None
    """Operation key of a write (None for reads)."""
    idempotency_key: str | None = None
    """Downstream idempotency key derived from the operation key (None for reads)."""
    deadline: datetime | None = None
    """Wall-clock time by which the handler must finish."""
    credentials: dict[str, str] = field(default_factory=dict, repr=False)
    """Per-user forwarded credentials (never logged, never shown to the model)."""

    def require_idempotency_key(self) -> str:
        """The downstream idempotency key a write must send; a write without one is a gateway bug."""
        if not self.idempotency_key:
            raise ToolExecutionError("server_error", "write handler called without an idempotency key")
        return self.idempotency_key


class StrictArgs(BaseModel):
    """Base of tool argument models: closed (``extra="forbid"``), strict (no coercion), immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ToolResult(BaseModel):
    """Base of tool result models: fields not in the contract are dropped (an allowlist), immutable."""

    model_config = ConfigDict(extra="ignore", frozen=True)


Handler = Callable[[Any, HandlerContext], BaseModel]
"""A handler takes `ToolSpec.handler_arguments` (the argument model instance, or for a JSON-Schema
tool a read-only mapping of exactly the kept arguments) and the context, and returns the result model."""

SemanticCheck = Callable[[Any, HandlerContext], "str | None"]

Reconcile = Callable[[Any, HandlerContext], "BaseModel | None"]
"""Status check of a write: the stored effect's result, or None when there is no trace of it."""
"""Cross-field validation: validated arguments and context in, a model-actionable problem or None out."""

ProblemCode = Literal[
    "invalid_name",
    "invalid_schema",
    "invalid_signature",
    "identity_argument",
    "unknown_identity_exempt",
    "missing_owner",
    "missing_description",
    "missing_effect",
    "missing_timeout",
    "missing_output_limit",
    "open_arguments",
    "write_without_approval",
    "approval_without_roles",
    "read_with_approval",
    "missing_rollback",
    "unknown_resource_argument",
    "unknown_audit_field",
    "secret_review_on_read",
]
"""Why a spec is refused; the registry audit counts these."""


def spec_problems(spec: ToolSpec) -> list[tuple[ProblemCode, str]]:
    """Every stop condition (a reason the tool must not load) in one spec (empty when complete)."""
    problems: list[tuple[ProblemCode, str]] = []
    if not spec.name.strip() or spec.name.strip() != spec.name or len(spec.name) > MAX_NAME_LENGTH:
        problems.append(
            ("invalid_name", f"name must be 1 to {MAX_NAME_LENGTH} characters without surrounding spaces")
        )
    elif not spec.name.isprintable():
        problems.append(("invalid_name", "name must not hold control characters"))
    if not WIRE_NAME.match(spec.wire_name):
        problems.append(("invalid_name", "wire name must match [a-zA-Z0-9_-]{1,64}"))
    if not spec.owner.strip():
        problems.append(("missing_owner", "owner is required"))
    if not spec.description.strip():
        problems.append(("missing_description", "description is required"))
    if not spec.effect.strip():
        problems.append(("missing_effect", "effect is required"))
    if not spec.timeout_s or spec.timeout_s <= 0:
        problems.append(("missing_timeout", "timeout_s must be positive"))
    if not spec.max_output_bytes or spec.max_output_bytes <= 0:
        problems.append(("missing_output_limit", "max_output_bytes must be positive"))
    if spec.args_model.model_config.get("extra") != "forbid":
        problems.append(("open_arguments", "args_model must set extra='forbid'"))
    if spec.is_write and spec.approval.kind == "none":
        problems.append(
            ("write_without_approval", "a write needs an approval class (it would run without review)")
        )
    if spec.is_write and spec.approval.kind != "none" and not spec.approval.roles:
        problems.append(("approval_without_roles", "the approval class of a write must name reviewer roles"))
    if spec.is_write and spec.approval.reviewers_required < 1:
        problems.append(("write_without_approval", "the approval class of a write must require a reviewer"))
    if not spec.is_write and spec.approval.kind != "none":
        problems.append(("read_with_approval", "a read-only tool must not declare an approval class"))
    if not spec.is_write and spec.secret_arguments == "review":
        problems.append(
            (
                "secret_review_on_read",
                "only a write, which a reviewer sees, may take secret-looking arguments",
            )
        )
    if isinstance(spec.rollback, NoRollback) and not spec.rollback.reason.strip():
        problems.append(("missing_rollback", "a no-rollback statement needs its reason"))
    if isinstance(spec.rollback, Rollback) and not spec.rollback.statement.strip():
        problems.append(("missing_rollback", "a rollback needs its statement"))
    for ref in spec.resource_refs:
        try:
            top = parse_path(ref.argument)[0][0]
        except ValueError:
            top = ""
        if top not in spec.contract.properties:
            problems.append(
                ("unknown_resource_argument", f"resource argument {ref.argument!r} is not an argument")
            )
    unknown_audit = set(spec.audit_fields) - set(spec.contract.properties)
    if unknown_audit:
        problems.append(
            ("unknown_audit_field", f"audit_fields name unknown arguments: {sorted(unknown_audit)}")
        )
    problems.extend(identity_problems(spec))
    return problems


def identity_problems(spec: ToolSpec) -> list[tuple[ProblemCode, str]]:
    """Argument fields named like an identity or authority, unless the operator exempted them.

    Dispatch refuses identity-named keys in every call (``identity_in_arguments``), so a tool that
    declares one could never be called: it fails here instead, naming the field path. An operator
    who knows a name is not an identity (a loan's ``principal``, ``user_ratings``) lists its path in
    `ToolSpec.identity_exempt`; an exemption that names no identity-like field is refused too."""
    schema = spec.contract.json_schema()
    paths = {path: name for path, name, _ in field_paths(schema)}
    problems: list[tuple[ProblemCode, str]] = []
    for path in sorted(paths):
        if is_identity_name(paths[path]) and path not in spec.identity_exempt:
            problems.append(("identity_argument", f"identity or authority in arguments: {path}"))
    for path in sorted(spec.identity_exempt):
        if path not in paths or not is_identity_name(paths[path]):
            problems.append(
                ("unknown_identity_exempt", f"identity_exempt names no identity-like argument: {path}")
            )
    return problems


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
    any docstring: the model is sent it as plain text (`toolgate.tools.schema_export.plain_text`),
    while the manifest and reviewers keep it as written."""
    args_model: type[BaseModel]
    """Argument model; must forbid extra fields. For a tool registered from a JSON Schema it is a
    `toolgate.tools.declared.DeclaredArguments` stand-in carrying the declared schema."""
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
    Paths use `toolgate.tools.schema_walk`'s syntax (``*`` for an open object's keys); a property
    whose own name holds ``.``, ``[]`` or ``*`` cannot be exempted."""
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
    "MAX_NAME_LENGTH",
    "ApprovalClass",
    "ArgumentsInvalid",
    "Handler",
    "HandlerContext",
    "NoRollback",
    "OwnerCheck",
    "ProblemCode",
    "Reconcile",
    "ResourceRef",
    "ResourceResolver",
    "ResourceStatus",
    "Risk",
    "Rollback",
    "SemanticCheck",
    "StrictArgs",
    "ToolResult",
    "ToolSpec",
    "identity_problems",
    "ownership",
    "spec_problems",
]
