"""The capability spec: everything trusted code knows about a tool that the model never sees.

A tool is three things, each reviewed on its own: a Pydantic argument model with ``extra="forbid"``, a
plain handler function, and this spec (owner, risk, effect, timeout, output bound, approval
class, scopes, resource key, rollback). `ToolSpec` refuses to be constructed when a field that
review requires is missing or contradictory (a "stop" condition, `spec_problems`), so an unsafe
tool never loads; the registry audit (`toolgate.tools.audit`) runs the same checks over a release
and reports each problem. The stop conditions live here, beside the fields they judge: they are
the spec's own invariant, and grow with every new way a tool can be unsafe.

The registry's operating fields of a tool (cost estimate, per-tool rate limit, deprecation) are
optional; when given, each must be complete and well formed, or the tool does not load
(`field_problems`, one of the stop conditions):

* `CostEstimate`: what one call costs, as an amount of a unit (``0.002 usd``, ``1 credits``,
  ``30 cpu_s``). Shown in the manifest and the registry audit's inventory line; nothing is charged.
* `ToolRateLimit`: at most ``limit`` calls per ``window_s`` seconds of this tool, whoever makes
  them (the downstream's own capacity). Enforced by the store-backed inbound limiter as a window
  of its own keyed by the tool's name (``tool:<name>``), refused ``rate_limited``, across every
  process sharing the store.
* `Deprecation`: from ``since`` the tool is deprecated and stays callable for ``window``; the model
  is told so at the head of the tool's description (``DEPRECATED until <sunset_at>``, plus the
  replacement when one is named), and every accepted call's ``call.accepted`` audit event carries
  ``deprecated_tool``. From ``sunset_at`` (``since + window``) every call is refused
  ``tool_deprecated`` before its arguments are looked at. Times are the store's clock, never the
  process's.

This module is the public home of the vocabulary a tool is written with: besides `ToolSpec` it
exports the handler's side (`toolgate.tools.handler`), the resource declarations
(`toolgate.tools.resources`) and the review declarations (`toolgate.tools.write_review`), so tool
code and ``toolgate``'s top-level exports import them from here whatever module defines them.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel

from toolgate.errors import RegistryError
from toolgate.tools.argpaths import parse_path
from toolgate.tools.arguments import ArgumentContract, ArgumentsInvalid, ModelArguments, unrepresentable
from toolgate.tools.credentials import ServiceScope
from toolgate.tools.declared.tools import contract_of
from toolgate.tools.egress import host_problems
from toolgate.tools.handler import (
    Handler,
    HandlerContext,
    Reconcile,
    SemanticCheck,
    StrictArgs,
    ToolResult,
)
from toolgate.tools.identity_names import is_identity_name
from toolgate.tools.paths import PathArgument, ToolPath, path_fields, root_problems
from toolgate.tools.resources import (
    OwnerCheck,
    ResourceRef,
    ResourceResolver,
    ResourceStatus,
    ownership,
)
from toolgate.tools.schema.walk import path_matches
from toolgate.tools.waits import Wait
from toolgate.tools.wire import WIRE_NAME, wire_name
from toolgate.tools.write_review import ApprovalClass, NoRollback, Rollback

Risk = Literal["read-only", "caution", "danger"]
"""read-only observes; caution changes state with bounded impact; danger is high-impact."""

COST_UNIT = re.compile(r"^[a-z][a-z0-9_]{0,15}$")
"""A cost unit: a short lower-case word (``usd``, ``eur``, ``credits``, ``cpu_s``)."""
MAX_WINDOW_S = 86_400
"""The longest per-tool rate window (one day)."""


@dataclass(frozen=True)
class CostEstimate:
    """The estimated cost of one call: ``amount`` of ``unit``."""

    amount: float
    unit: str

    def text(self) -> str:
        """``0.002usd/call``: the form the inventory line and the manifest show."""
        return f"{self.amount:g}{self.unit}/call"


@dataclass(frozen=True)
class ToolRateLimit:
    """At most ``limit`` calls of the tool per ``window_s`` seconds, all principals together."""

    limit: int
    window_s: int

    def text(self) -> str:
        """``30/60s``."""
        return f"{self.limit}/{self.window_s}s"


@dataclass(frozen=True)
class Deprecation:
    """Deprecated from ``since``; callable until ``since + window`` (`sunset_at`), refused after."""

    since: datetime
    window: timedelta
    replacement: str | None = None
    """The tool to use instead, named in what the model is told and in the refusal."""

    @property
    def sunset_at(self) -> datetime:
        """The first instant a call is refused ``tool_deprecated``."""
        return self.since + self.window

    def state(self, now: datetime) -> str:
        """``active`` before ``since``, ``deprecated`` during the window, ``retired`` from `sunset_at`."""
        if now < self.since:
            return "active"
        return "deprecated" if now < self.sunset_at else "retired"

    def notice(self) -> str:
        """What the model is told at the head of the tool's description."""
        instead = f"; use {self.replacement} instead" if self.replacement else ""
        return f"DEPRECATED until {self.sunset_at.isoformat()}{instead}."

    def to_mapping(self) -> dict[str, Any]:
        """The manifest and audit form."""
        return {
            "since": self.since.isoformat(),
            "window_s": int(self.window.total_seconds()),
            "sunset_at": self.sunset_at.isoformat(),
            "replacement": self.replacement,
        }


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
    """The fixed, reviewed function that performs the call. A read's handler may be a generator:
    what it yields is streamed to the client, what it returns is its result
    (`toolgate.graph.delivery.streamed_output`)."""
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
    """At most this many calls of the tool per window, all principals together."""
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
    Registration refuses (or, with ``identity_names="warn"``, warns about) every other identity-like
    field; dispatch accepts these (see `identity_keys`).
    Paths use `toolgate.tools.schema.walk`'s syntax (``*`` for an open object's keys); a property
    whose own name holds ``.``, ``[]`` or ``*`` cannot be exempted."""
    caller_fields: frozenset[str] = frozenset()
    """Paths of argument fields that name the caller (``user_id`` of a "my orders" tool): identity
    by meaning, not by name. Dispatch accepts the signed-in person's own id there and refuses any
    other value (``caller_mismatch``, audited); fields a `resource_refs` ownership check reads are
    checked by meaning the same way (``not_owner``)."""
    identity_names: Literal["refuse", "warn"] = "refuse"
    """What an identity-like field name (`toolgate.tools.identity_names`) that is neither a caller
    field, a resource argument nor exempted does at registration: ``refuse`` the tool, or
    ``warn`` (`load_warnings`; the importers' default, since a published ``username`` is often a
    game statistic). A warned field is a declared argument and dispatch accepts it; undeclared
    identity-like keys (in an open object) are refused ``identity_in_arguments`` either way."""
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
    max_concurrency: int | None = None
    """At most this many calls of the handler run at once in this process (None: no cap of its
    own); past it a call waits briefly, then is refused ``handler_busy`` (`toolgate.policy.handler_slots`)."""
    file_roots: tuple[str, ...] = ()
    """Absolute directories the tool's path arguments (annotated `toolgate.tools.paths.ToolPath`)
    must resolve under; a path argument without roots is a stop condition."""
    wire_name: str = field(init=False)
    """The name the model is told and calls (``^[a-zA-Z0-9_-]{1,64}$``, see `toolgate.tools.wire`)."""
    contract: ArgumentContract = field(init=False, repr=False, compare=False)
    """The argument semantics behind `parse_arguments` and `handler_arguments`."""
    path_arguments: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The arguments annotated as file-system paths (judged against `file_roots`)."""
    load_warnings: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """What loading changed or doubts without refusing the tool (a published default dropped, an
    identity-like name kept under ``identity_names="warn"``): logged by the importers and listed
    by the registry audit."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "wire_name", wire_name(self.name))
        object.__setattr__(self, "contract", contract_of(self.args_model) or ModelArguments(self.args_model))
        object.__setattr__(self, "path_arguments", path_fields(self.args_model))
        contract_warnings = tuple(getattr(self.contract, "load_warnings", ()))
        object.__setattr__(self, "load_warnings", contract_warnings + tuple(identity_warnings(self)))
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
        field path (never the input values). See `toolgate.tools.arguments`; what the contract
        kept is refused too when it holds a number toolgate cannot hold
        (`toolgate.tools.arguments.unrepresentable`)."""
        kept = self.contract.parse(raw)
        problems = unrepresentable(kept)
        if problems:
            raise ArgumentsInvalid(problems)
        return kept

    def handler_arguments(self, arguments: Mapping[str, Any]) -> Any:
        """What the handler receives for arguments this tool kept: the model instance (Python-typed
        tools; ``model_fields_set`` names the kept fields) or a read-only mapping of exactly the kept
        arguments (JSON-Schema tools, `toolgate.tools.arguments.FrozenArguments`)."""
        return self.contract.for_handler(arguments)

    def identity_keys(self, arguments: Any) -> Iterator[str]:
        """`toolgate.tools.identity_names.identity_keys` of a call's arguments, less the fields
        whose names are reviewed (`identity_exempt`), checked by meaning (`caller_fields`, resource
        arguments) or, under ``identity_names="warn"``, declared: what dispatch must refuse as
        ``identity_in_arguments``."""
        accepted = identity_accepted(self)

        def walk(value: Any, prefix: str, place: tuple[tuple[str, bool], ...], depth: int) -> Iterator[str]:
            if depth > 32:
                return
            if isinstance(value, dict):
                for key, item in value.items():
                    path = f"{prefix}.{key}" if prefix else str(key)
                    here = (*place, (str(key), False))
                    exempt = any(path_matches(pattern, here) for pattern in accepted)
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


CREDENTIAL_NAME = re.compile(r"^[a-z0-9][a-z0-9_]{0,63}$")
"""A forwarded credential's name: the lower-cased ``X-Toolgate-Credential-<name>`` suffix."""

MAX_NAME_LENGTH = 128
"""Longest real tool name (the model sees the wire name, see `toolgate.tools.wire`)."""

ProblemCode = Literal[
    "invalid_name",
    "invalid_schema",
    "invalid_signature",
    "identity_argument",
    "unknown_identity_exempt",
    "unknown_caller_field",
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
    "invalid_credential_name",
    "invalid_egress_host",
    "invalid_cost_estimate",
    "invalid_rate_limit",
    "invalid_deprecation",
    "invalid_max_concurrency",
    "invalid_file_roots",
    "description_too_long",
]
"""Why a spec is refused; the registry audit counts these."""

MAX_DESCRIBED_CHARS = 16_384
"""What a tool may tell the model about itself, its description and every ``description`` in its
arguments' schema together: every model request of every principal who may see the tool carries
them (the public corpus's largest of 9,314 definitions is 5,369; the public tool suite sends one of
about 8,000 whole). A definition past it is refused at load, never cut: the bundle's reviewers
read what it says, and a cut would say something else."""


def _described_chars(schema: Any) -> int:
    """Characters of every ``description`` string in ``schema`` (bounded: schemas past their node
    limit are refused before they are offered)."""
    if isinstance(schema, dict):
        return sum(
            len(value) if key == "description" and isinstance(value, str) else _described_chars(value)
            for key, value in schema.items()
        )
    if isinstance(schema, list):
        return sum(_described_chars(value) for value in schema)
    return 0


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
    described = len(spec.description) + _described_chars(spec.contract.json_schema())
    if described > MAX_DESCRIBED_CHARS:
        problems.append(
            (
                "description_too_long",
                f"the description and the arguments' descriptions hold {described} characters, more than"
                f" {MAX_DESCRIBED_CHARS}: every model request that offers the tool would carry them",
            )
        )
    if not spec.effect.strip():
        problems.append(("missing_effect", "effect is required"))
    timeout = spec.timeout_s
    if not _number(timeout) or not math.isfinite(timeout) or timeout <= 0:  # NaN or inf: no timeout at all
        problems.append(("missing_timeout", "timeout_s must be a finite number of seconds > 0"))
    if not _count(spec.max_output_bytes) or spec.max_output_bytes <= 0:
        problems.append(("missing_output_limit", "max_output_bytes must be an integer > 0"))
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
    if spec.is_write and inspect.isgeneratorfunction(spec.handler):
        problems.append(
            ("invalid_signature", "a write's handler cannot stream: only a read's handler may yield chunks")
        )
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
    problems.extend(reach_problems(spec))
    problems.extend(field_problems(spec))
    return problems


def reach_problems(spec: ToolSpec) -> list[tuple[ProblemCode, str]]:
    """Malformed credential and egress declarations (a header name, a scope, a ``host[:port]``)."""
    problems: list[tuple[ProblemCode, str]] = [
        ("invalid_credential_name", f"forwarded credential names a header suffix [a-z0-9_]: {name!r}")
        for name in sorted(spec.forwarded_credentials)
        if not CREDENTIAL_NAME.match(name)
    ]
    if spec.service_credential is not None:
        problems.extend(("invalid_credential_name", text) for text in spec.service_credential.problems())
    for entry in sorted(spec.egress_hosts):
        problems.extend(("invalid_egress_host", text) for text in host_problems(entry))
    return problems


def identity_problems(spec: ToolSpec) -> list[tuple[ProblemCode, str]]:
    """Argument fields named like an identity or authority, unless the operator exempted them.

    Dispatch refuses identity-named keys in every call (``identity_in_arguments``), so a tool that
    declares one could never be called: it fails here instead, naming the field path. An operator
    who knows a name is not an identity (a loan's ``principal``, ``user_ratings``) lists its path in
    `ToolSpec.identity_exempt`; an exemption that names no identity-like field is refused too."""
    identities = identity_paths(spec.contract.declared_fields())
    problems: list[tuple[ProblemCode, str]] = []
    if spec.identity_names == "refuse":
        by_meaning = spec.identity_exempt | spec.caller_fields | resource_arguments(spec)
        for path in identities:
            if path not in by_meaning:
                problems.append(("identity_argument", f"identity or authority in arguments: {path}"))
    declared = {path for path, _ in spec.contract.declared_fields()}
    for path in sorted(spec.caller_fields):
        if path not in declared:
            problems.append(("unknown_caller_field", f"caller_fields names no declared argument: {path}"))
    for path in sorted(spec.identity_exempt):
        if path not in identities:
            problems.append(
                ("unknown_identity_exempt", f"identity_exempt names no identity-like argument: {path}")
            )
    return problems


def identity_warnings(spec: ToolSpec) -> Iterator[str]:
    """Under ``identity_names="warn"``: one load warning per identity-like declared field that is
    neither exempted nor checked by meaning (a caller field or a resource argument)."""
    if spec.identity_names != "warn":
        return
    by_meaning = spec.identity_exempt | spec.caller_fields | resource_arguments(spec)
    for path in identity_paths(spec.contract.declared_fields()):
        if path not in by_meaning:
            yield (
                f"{path}: named like an identity or authority; kept as a declared argument the model"
                " fills (declare it in caller_fields if it names the caller, or in identity_exempt)"
            )


def resource_arguments(spec: ToolSpec) -> frozenset[str]:
    """The argument paths of resource refs with an ownership check (`ResourceRef.owner`), which
    ties the value to the caller: an identity-like name there is checked by meaning."""
    return frozenset(ref.argument for ref in spec.resource_refs if ref.owner is not None)


def identity_accepted(spec: ToolSpec) -> frozenset[str]:
    """Path patterns where dispatch accepts an identity-like key (see `ToolSpec.identity_keys`)."""
    accepted = spec.identity_exempt | spec.caller_fields | resource_arguments(spec)
    if spec.identity_names == "warn":
        accepted |= {path for path, _ in spec.contract.declared_fields()}
    return accepted


@functools.lru_cache(maxsize=1024)
def identity_paths(fields: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The sorted paths of the identity-like fields among ``fields`` (a contract's
    ``declared_fields``; a path declared twice counts by its last name, as a dict keeps it).

    Kept per field list: every `ToolSpec` built asks, and a contract hands out the same list for as
    long as its schema lives."""
    names = dict(fields)
    return tuple(path for path in sorted(names) if is_identity_name(names[path]))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def field_problems(spec: ToolSpec) -> list[tuple[ProblemCode, str]]:
    """Stop conditions of the operating fields (codes ``invalid_cost_estimate``,
    ``invalid_rate_limit``, ``invalid_deprecation``, ``invalid_max_concurrency``,
    ``invalid_file_roots``)."""
    problems: list[tuple[ProblemCode, str]] = []
    cost = spec.cost_estimate
    if cost is not None:
        if not isinstance(cost, CostEstimate):
            problems.append(("invalid_cost_estimate", "cost_estimate must be a CostEstimate(amount, unit)"))
        elif not _number(cost.amount) or not math.isfinite(cost.amount) or cost.amount < 0:
            problems.append(("invalid_cost_estimate", "cost_estimate.amount must be a finite number >= 0"))
        elif not isinstance(cost.unit, str) or not COST_UNIT.match(cost.unit):
            problems.append(("invalid_cost_estimate", "cost_estimate.unit must match [a-z][a-z0-9_]{0,15}"))
    limit = spec.rate_limit
    if limit is not None:
        if not isinstance(limit, ToolRateLimit):
            problems.append(("invalid_rate_limit", "rate_limit must be a ToolRateLimit(limit, window_s)"))
        elif not _count(limit.limit) or limit.limit < 1:
            problems.append(("invalid_rate_limit", "rate_limit.limit must be an integer >= 1"))
        elif not _count(limit.window_s) or not 1 <= limit.window_s <= MAX_WINDOW_S:
            problems.append(
                ("invalid_rate_limit", f"rate_limit.window_s must be an integer 1..{MAX_WINDOW_S}")
            )
    problems.extend(_deprecation_problems(spec))
    cap = spec.max_concurrency
    if cap is not None and (not _count(cap) or cap < 1):
        problems.append(("invalid_max_concurrency", "max_concurrency must be an integer >= 1 (or None)"))
    if not isinstance(spec.file_roots, tuple):
        problems.append(("invalid_file_roots", "file_roots must be a tuple of absolute directories"))
    else:
        problems.extend(("invalid_file_roots", problem) for problem in root_problems(spec.file_roots))
        if spec.path_arguments and not spec.file_roots:
            problems.append(
                ("invalid_file_roots", f"path arguments {list(spec.path_arguments)} need file_roots")
            )
    return problems


def _deprecation_problems(spec: ToolSpec) -> list[tuple[ProblemCode, str]]:
    found = spec.deprecation
    if found is None:
        return []
    if not isinstance(found, Deprecation):
        return [("invalid_deprecation", "deprecation must be a Deprecation(since, window)")]
    if not isinstance(found.since, datetime) or found.since.utcoffset() is None:
        return [("invalid_deprecation", "deprecation.since must be a timezone-aware datetime")]
    if not isinstance(found.window, timedelta) or found.window <= timedelta(0):
        return [("invalid_deprecation", "deprecation.window must be a positive timedelta")]
    if found.replacement is not None and (
        not isinstance(found.replacement, str)
        or not found.replacement.strip()
        or found.replacement == spec.name
    ):
        return [("invalid_deprecation", "deprecation.replacement must name another tool")]
    return []


def is_retired(spec: ToolSpec, now: datetime) -> bool:
    """Whether ``spec``'s deprecation window has ended at ``now`` (the store's clock): it is then
    neither offered to the model nor suggested, and every call of it is refused."""
    return spec.deprecation is not None and spec.deprecation.state(now) == "retired"


def deprecated_detail(spec: ToolSpec, now: Callable[[], datetime]) -> dict[str, Any]:
    """``{"deprecated_tool": ...}`` for the audit detail of a call made while ``spec`` is deprecated
    (empty otherwise; ``now``, the store's clock, is read only for a tool that declares one)."""
    found = spec.deprecation
    if found is None or found.state(now()) == "active":
        return {}
    return {"deprecated_tool": found.to_mapping()}


def manifest_fields(spec: ToolSpec) -> dict[str, Any]:
    """The fields as the manifest records them (only those set, so manifests reviewed before the
    fields existed stay valid); changing any of them is a reviewed change."""
    out: dict[str, Any] = {}
    if spec.cost_estimate is not None:
        out["cost_estimate"] = {"amount": spec.cost_estimate.amount, "unit": spec.cost_estimate.unit}
    if spec.rate_limit is not None:
        out["rate_limit"] = {"limit": spec.rate_limit.limit, "window_s": spec.rate_limit.window_s}
    if spec.deprecation is not None:
        out["deprecation"] = spec.deprecation.to_mapping()
    if spec.max_concurrency is not None:
        out["max_concurrency"] = spec.max_concurrency
    if spec.file_roots or spec.path_arguments:
        out["file_access"] = {"roots": list(spec.file_roots), "path_arguments": list(spec.path_arguments)}
    return out


def inventory_text(spec: ToolSpec) -> str:
    """The inventory line's part for these fields (empty when none is set)."""
    parts = []
    if spec.cost_estimate is not None:
        parts.append(f" cost={spec.cost_estimate.text()}")
    if spec.rate_limit is not None:
        parts.append(f" rate_limit={spec.rate_limit.text()}")
    if spec.deprecation is not None:
        parts.append(f" deprecated_since={spec.deprecation.since.isoformat()}")
        parts.append(f" sunset_at={spec.deprecation.sunset_at.isoformat()}")
    if spec.max_concurrency is not None:
        parts.append(f" max_concurrency={spec.max_concurrency}")
    if spec.file_roots:
        parts.append(f" file_roots={','.join(spec.file_roots)}")
    return "".join(parts)


def model_description(spec: ToolSpec) -> str:
    """The description the model is told: a declared deprecation's notice first."""
    return spec.description if spec.deprecation is None else f"{spec.deprecation.notice()} {spec.description}"


__all__ = [
    "COST_UNIT",
    "MAX_NAME_LENGTH",
    "ApprovalClass",
    "ArgumentsInvalid",
    "CostEstimate",
    "Deprecation",
    "Handler",
    "HandlerContext",
    "NoRollback",
    "OwnerCheck",
    "PathArgument",
    "ProblemCode",
    "Reconcile",
    "ResourceRef",
    "ResourceResolver",
    "ResourceStatus",
    "Risk",
    "Rollback",
    "SemanticCheck",
    "ServiceScope",
    "StrictArgs",
    "ToolPath",
    "ToolRateLimit",
    "ToolResult",
    "ToolSpec",
    "Wait",
    "deprecated_detail",
    "field_problems",
    "identity_accepted",
    "identity_paths",
    "identity_problems",
    "identity_warnings",
    "inventory_text",
    "is_retired",
    "manifest_fields",
    "model_description",
    "ownership",
    "reach_problems",
    "resource_arguments",
    "spec_problems",
]
