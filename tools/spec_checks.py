"""The stop conditions of a tool spec: every reason a tool must not load.

`toolgate.tools.spec.ToolSpec` refuses to be constructed when `spec_problems` finds any, so an
unsafe tool never loads, and the registry audit (`toolgate.tools.audit`) runs the same checks over a
release and reports each problem. They are kept apart from the spec's fields because they are the
review rules themselves: they grow with every new way a tool can be unsafe, while the spec only
states what a tool is.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Literal

from toolgate.tools.argpaths import parse_path
from toolgate.tools.egress import host_problems
from toolgate.tools.identity_names import is_identity_name
from toolgate.tools.registry_fields import field_problems
from toolgate.tools.wire import WIRE_NAME
from toolgate.tools.write_review import NoRollback, Rollback

if TYPE_CHECKING:
    from toolgate.tools.spec import ToolSpec

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
    for path in identities:
        if path not in spec.identity_exempt:
            problems.append(("identity_argument", f"identity or authority in arguments: {path}"))
    for path in sorted(spec.identity_exempt):
        if path not in identities:
            problems.append(
                ("unknown_identity_exempt", f"identity_exempt names no identity-like argument: {path}")
            )
    return problems


@functools.lru_cache(maxsize=1024)
def identity_paths(fields: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The sorted paths of the identity-like fields among ``fields`` (a contract's
    ``declared_fields``; a path declared twice counts by its last name, as a dict keeps it).

    Kept per field list: every `ToolSpec` built asks, and a contract hands out the same list for as
    long as its schema lives."""
    names = dict(fields)
    return tuple(path for path in sorted(names) if is_identity_name(names[path]))


__all__ = [
    "MAX_NAME_LENGTH",
    "ProblemCode",
    "identity_paths",
    "identity_problems",
    "reach_problems",
    "spec_problems",
]
