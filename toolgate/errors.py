"""Every error toolgate raises, in two families.

`ToolgateUsageError` means a person or program misused toolgate (bad configuration, a broken
tool bundle, a reviewer without authority): fix the input and try again. `ToolgateRuntimeError`
means something went wrong while running (a store failure, a lost claim): the caller decides
whether to retry. Driver errors (sqlite3, psycopg) are translated at the store boundary so
callers never import a driver to catch them.

Rejections of model tool calls are *not* exceptions: they are values with a stable code
(`RejectionCode`), returned to the model as a `ToolMessage` and written to the audit log. Every
code (these, and those the exceptions below carry) is listed with its meaning, retryability and
owner in `toolgate.refusal_codes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_args

from toolgate.refusal_codes import RejectionCode

REJECTION_CODES: tuple[str, ...] = get_args(RejectionCode)
STATE_CODES: tuple[str, ...] = ("state_tampered", "state_mismatch")
"""Refusals caused by checkpointed state changed outside the gateway, never by a model's call."""
LOADED_CODE_CODES: tuple[str, ...] = ("resolver_failed", "check_failed")
"""Refusals caused by the release's own loaded code failing (an ownership check or a tool's
semantic check that raises), never by a model's call: no adversarial dispatch case can provoke
them (tests/test_hostile_resolver.py, tests/test_hostile_semantic_check.py)."""
PUBLISHED_TOOL_CODES: tuple[str, ...] = ("undeclared_argument", "caller_mismatch")
"""Refusals only a tool loaded from a published JSON definition emits (a key its schema leaves open,
a declared caller field): the adversarial set runs the demo's typed tools, which cannot provoke
them (tests/test_published_tools.py does, through the graph)."""


class ToolgateError(Exception):
    """Base class of every toolgate exception."""

    code: str = "toolgate_error"
    """The stable machine-readable word a person or a script sees (``error=CODE`` on the CLI); each
    class below names its own, and those built per occurrence (`IdentityError`, `ApprovalError`...)
    take it as an argument. Listed in `toolgate.refusal_codes`."""


class ToolgateUsageError(ToolgateError):
    """toolgate was used wrongly: configuration, bundle, identity or request is invalid."""

    code = "usage_error"


class ConfigurationError(ToolgateUsageError):
    """A setting (environment variable, identities file, URL) is missing or invalid."""

    code = "configuration_error"


class RegistryError(ToolgateUsageError):
    """A tool bundle is incomplete or unsafe; toolgate refuses to load it (fail closed).

    Attributes:
        tool: the offending tool, when one is to blame.
        problems: ``(code, message)`` pairs, e.g. ``("write_without_approval", ...)``.
    """

    code = "registry_invalid"

    def __init__(
        self, message: str, *, tool: str | None = None, problems: Sequence[tuple[str, str]] | None = None
    ) -> None:
        super().__init__(message)
        self.tool = tool
        self.problems = list(problems or [])


class UnknownReleaseError(RegistryError):
    """No tool bundle is registered under the requested release id."""

    code = "unknown_release"

    def __init__(self, release: str, known: Sequence[str] = ()) -> None:
        super().__init__(
            f"unknown tool release {release!r}: name an installed release"
            f" ({', '.join(known) or 'none installed'}), 'package.module:attribute'"
            " or 'path/to/release.py:attribute'"
        )
        self.release = release


class IdentityError(ToolgateUsageError):
    """A person could not be authenticated, or may not do what they asked.

    Attributes:
        code: stable machine-readable reason, e.g. ``missing_token``, ``authentication_failed``,
            ``revoked``, ``forged_identity``, ``not_admin``, ``thread_owner``.
    """

    def __init__(self, message: str, *, code: str = "authentication_failed") -> None:
        super().__init__(message)
        self.code = code


class ApprovalError(ToolgateUsageError):
    """A reviewer's decision was refused (wrong role, self-approval, stale digest, expired...).

    Attributes:
        code: stable machine-readable reason, e.g. ``self_approval`` or ``digest_mismatch``.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ReleaseControlError(ToolgateUsageError):
    """A release-control command was refused (not an admin, wrong phase, a bundle that does not
    verify, tampered rollout records...); nothing changed.

    Attributes:
        code: stable machine-readable reason, e.g. ``missing_role`` or ``rollback_unavailable``.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class StoreMissingError(ConfigurationError):
    """The configured store (or its secret) does not exist, and the command may not create one:
    only ``toolgate demo``, ``toolgate init`` and seeding an empty store's people (``identities
    import``, ``identities seed-demo``) create a data directory, a store or a secret. Nothing was
    created; the message names the path and the fix."""

    code = "store_missing"


class InvalidFilter(ToolgateUsageError):
    """A list command's filter names no value of what it filters (``proposals list --status
    pending``): refused with the valid values, never answered with an empty list."""

    code = "invalid_filter"


class ModelUnavailable(ConfigurationError):
    """A chat model asked for by name cannot be built; nothing was run and no request was sent.

    Raised before a run starts (``toolgate evals run --model``), so a misconfigured model never
    turns into a run of failed cases. The message never holds a key's value.

    Attributes:
        code: stable machine-readable reason: ``model_malformed``, ``model_requests_disabled``,
            ``unknown_provider``, ``provider_not_installed``, ``model_key_missing`` or
            ``model_refused``.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class NotFoundError(ToolgateUsageError):
    """A proposal, operation or thread that was asked for does not exist."""

    code = "not_found"


class RunRefused(ToolgateUsageError, ValueError):
    """A graph run was refused (who is acting, or what they asked for); nothing ran.

    Raised to end the run with a stable ``code`` and a readable message. It is a `ValueError`
    so the LangGraph server shows its message to the client instead of "An internal error occurred".

    Attributes:
        code: stable machine-readable reason, e.g. ``thread_owner`` or ``missing_principal``.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class ToolgateRuntimeError(ToolgateError):
    """Something failed while running; callers decide whether a retry is safe."""

    code = "runtime_error"


class StoreError(ToolgateRuntimeError):
    """The operation store failed (translated from the database driver's error)."""

    code = "store_error"


class InvalidTransitionError(StoreError):
    """An operation state change was refused by the database's conditional update."""

    code = "invalid_transition"

    def __init__(self, operation_key: str, expected: str, actual: str | None) -> None:
        super().__init__(f"operation {operation_key}: expected status {expected!r}, found {actual!r}")
        self.operation_key = operation_key
        self.expected = expected
        self.actual = actual


class ToolExecutionError(ToolgateRuntimeError):
    """A handler failed in a classified way, so recovery can depend on the kind of failure.

    Attributes:
        kind: ``caller_error`` (the arguments name something wrong; the model may fix them),
            ``server_error`` (the downstream failed; no argument change helps) or ``timeout``.
        retryable: whether the same call may sensibly be tried again later.
    """

    def __init__(self, kind: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retryable = retryable


class CapabilityDenied(ToolExecutionError):
    """A handler reached past the capabilities it was given: a table of the gateway or of another
    service, a host outside its allowlist, a credential it did not declare.

    A ``server_error`` that is never retryable (the same code would be refused again), audited as
    ``handler.capability_denied`` by the trusted code that ran the handler. ``capability`` names
    the kind (``records``, ``egress``, ``credential``); ``target`` what was refused (a table, a
    host, a credential name), never a secret.
    """

    def __init__(self, capability: str, target: str, message: str) -> None:
        super().__init__("server_error", message, retryable=False)
        self.capability = capability
        self.target = target


class ToolDrifted(ToolExecutionError):
    """A tool whose code runs elsewhere (an MCP server's) no longer matches the pin its release
    was loaded and reviewed with: the server lists it changed (name, description, schemas or
    annotations), or no longer lists it.

    Refused before the call, so nothing ran; never retryable: the server answers the same until an
    operator reloads its tools and reviews the release again (the pin is part of the tool's code
    hash, so the reloaded release drifts from its reviewed manifest). Audited as
    ``handler.tool_drifted`` with both pins by the trusted code that ran the handler. ``found`` is
    None when the tool is gone.
    """

    code = "tool_drifted"
    """Its `kind`, the stable code the call is answered with."""

    def __init__(self, tool: str, pinned: str, found: str | None) -> None:
        what = "is no longer offered by its server" if found is None else "changed on its server"
        super().__init__(
            self.code,
            f"tool {tool!r} {what} since its release was reviewed; refused until an operator "
            "reloads it and reviews the release",
            retryable=False,
        )
        self.tool = tool
        self.pinned = pinned
        self.found = found


class DirectInvocationError(ToolgateUsageError):
    """A tool's StructuredTool was invoked directly instead of through the gateway.

    Handlers run only behind dispatch, approval and the execution claim; calling the LangChain
    tool object itself would skip every one of them.
    """

    code = "direct_invocation"

    def __init__(self, tool_name: str) -> None:
        super().__init__(
            f"tool {tool_name!r} runs only through the toolgate graph (dispatch -> approval -> execute)"
        )
        self.tool_name = tool_name


__all__ = [
    "LOADED_CODE_CODES",
    "PUBLISHED_TOOL_CODES",
    "REJECTION_CODES",
    "STATE_CODES",
    "ApprovalError",
    "CapabilityDenied",
    "ConfigurationError",
    "DirectInvocationError",
    "IdentityError",
    "InvalidFilter",
    "InvalidTransitionError",
    "ModelUnavailable",
    "NotFoundError",
    "RegistryError",
    "RejectionCode",
    "ReleaseControlError",
    "RunRefused",
    "StoreError",
    "StoreMissingError",
    "ToolDrifted",
    "ToolExecutionError",
    "ToolgateError",
    "ToolgateRuntimeError",
    "ToolgateUsageError",
    "UnknownReleaseError",
]
