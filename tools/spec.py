"""The capability spec: everything trusted code knows about a tool that the model never sees.

A tool is three things (STYLE habit 2): a Pydantic argument model with ``extra="forbid"``, a
plain handler function, and this spec (owner, risk, effect, timeout, output bound, approval
class, scopes, resource key, rollback). `ToolSpec` refuses to be constructed when a field that
the seeds' "stop" conditions require is missing or contradictory, so an unsafe tool never loads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from toolgate.errors import RegistryError, ToolExecutionError

Risk = Literal["read-only", "caution", "danger"]
"""read-only observes; caution changes state with bounded impact; danger is high-impact."""

_NAME = re.compile(r"^[a-z][a-z0-9_]{1,63}$")


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


@dataclass(frozen=True, kw_only=True)
class ResourceRef:
    """The resource a call touches, resolved under the authenticated tenant before anything else."""

    kind: str
    """Resource type, e.g. ``order`` or ``service``."""
    argument: str
    """Name of the argument that carries the resource identifier."""
    conflict: bool = True
    """Calls on the same (kind, id) in one batch run in order, never concurrently."""


ResourceStatus = Literal["owned", "foreign", "missing"]
"""Whether a resource belongs to the caller's tenant, to another tenant, or does not exist."""


def ownership(row: Any, tenant_id: str) -> ResourceStatus:
    """Status of a looked-up resource row (with a ``tenant_id`` column) relative to ``tenant_id``."""
    if row is None:
        return "missing"
    return "owned" if row["tenant_id"] == tenant_id else "foreign"


class ResourceResolver(Protocol):
    """Resolves a resource under the authenticated tenant, reading the system of record only."""

    def resource_status(self, kind: str, resource_id: str, tenant_id: str) -> ResourceStatus:
        """Ownership of ``(kind, resource_id)`` relative to ``tenant_id``."""
        ...


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


class ArgumentsInvalid(ValueError):
    """Arguments that do not fit a tool's schema: one ``(path, problem)`` per finding.

    Paths are dotted field names (``items.0.sku``); problems never quote the input, which may
    hold anything the model wrote."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {problem}" for path, problem in problems))
        self.problems = problems

    @classmethod
    def from_validation_error(cls, exc: ValidationError) -> ArgumentsInvalid:
        """The problems of a pydantic validation error, without its input values."""
        return cls(
            [
                (".".join(str(p) for p in err["loc"]) or "(arguments)", err["msg"])
                for err in exc.errors(include_url=False, include_input=False, include_context=False)
            ]
        )


class StrictArgs(BaseModel):
    """Base of tool argument models: closed (``extra="forbid"``), strict (no coercion), immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ToolResult(BaseModel):
    """Base of tool result models: fields not in the contract are dropped (an allowlist), immutable."""

    model_config = ConfigDict(extra="ignore", frozen=True)


Handler = Callable[[Any, HandlerContext], BaseModel]
"""A handler takes the validated argument model and the context, and returns the result model."""

SemanticCheck = Callable[[Any, HandlerContext], "str | None"]

Reconcile = Callable[[Any, HandlerContext], "BaseModel | None"]
"""Status check of a write: the stored effect's result, or None when there is no trace of it."""
"""Cross-field validation: validated arguments and context in, a model-actionable problem or None out."""

ProblemCode = Literal[
    "invalid_name",
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
    """Everything the seeds' stop conditions forbid in one spec (empty when complete)."""
    problems: list[tuple[ProblemCode, str]] = []
    if not _NAME.match(spec.name):
        problems.append(("invalid_name", "name must match [a-z][a-z0-9_]{1,63}"))
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
            ("secret_review_on_read", "only a write, which a reviewer sees, may take secret-looking arguments")
        )
    if isinstance(spec.rollback, NoRollback) and not spec.rollback.reason.strip():
        problems.append(("missing_rollback", "a no-rollback statement needs its reason"))
    if isinstance(spec.rollback, Rollback) and not spec.rollback.statement.strip():
        problems.append(("missing_rollback", "a rollback needs its statement"))
    if spec.resource is not None and spec.resource.argument not in spec.args_model.model_fields:
        problems.append(
            ("unknown_resource_argument", f"resource argument {spec.resource.argument!r} is not an argument")
        )
    unknown_audit = set(spec.audit_fields) - set(spec.args_model.model_fields)
    if unknown_audit:
        problems.append(
            ("unknown_audit_field", f"audit_fields name unknown arguments: {sorted(unknown_audit)}")
        )
    return problems


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """One reviewed capability. Construction fails closed on anything the seeds call a stop."""

    name: str
    """Function name the model sees (``[a-z][a-z0-9_]*``)."""
    version: str
    """Semantic version of the tool contract."""
    owner: str
    """Owning team, the one to page when the downstream contract drifts."""
    description: str
    """When to use it and when not to (sent to the model)."""
    args_model: type[BaseModel]
    """Argument model; must forbid extra fields."""
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
    """Resource resolved for ownership and conflict checks."""
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

    def __post_init__(self) -> None:
        problems = spec_problems(self)
        if problems:
            raise RegistryError(
                f"tool {self.name!r} refused: " + "; ".join(message for _, message in problems),
                tool=self.name,
                problems=problems,
            )

    @property
    def is_write(self) -> bool:
        """True for caution and danger tools: they become proposals, never run directly."""
        return self.risk != "read-only"

    def parse_arguments(self, raw: Any) -> dict[str, Any]:
        """The call's arguments as toolgate keeps them (proposal, digest, operation key, audit):
        validated against the tool's schema, in canonical JSON form.

        Raises `ArgumentsInvalid` naming each problem's field path (never the input values)."""
        try:
            return self.args_model.model_validate(raw).model_dump(mode="json")
        except ValidationError as exc:
            raise ArgumentsInvalid.from_validation_error(exc) from None

    def handler_arguments(self, arguments: Mapping[str, Any]) -> Any:
        """What the handler receives for arguments this tool parsed (its argument model)."""
        return self.args_model.model_validate(arguments)

    def rollback_text(self) -> str:
        """The rollback or no-rollback statement as shown to reviewers."""
        if isinstance(self.rollback, Rollback):
            return self.rollback.statement
        return f"no rollback: {self.rollback.reason}"


__all__ = [
    "ApprovalClass",
    "ArgumentsInvalid",
    "Handler",
    "HandlerContext",
    "NoRollback",
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
    "ownership",
    "spec_problems",
]
