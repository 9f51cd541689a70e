"""The handler's side of a tool: what trusted code hands it, what it returns, and the other
callables a spec may name beside it.

A handler is a plain, reviewed function (`Handler`) called with its validated arguments and a
`HandlerContext`, the only place identity, keys and the deadline come from; argument and result
models derive from `StrictArgs` and `ToolResult`. This is what a tool's own code (handlers,
ownership and status checks against its system of record) is written against, so it is kept apart
from `toolgate.tools.spec.ToolSpec`, which adds what only the operator and the registry decide.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from toolgate.errors import CapabilityDenied, ToolExecutionError
from toolgate.tools.credentials import ServiceCredential
from toolgate.tools.egress import Egress


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
    """The requesting user's own forwarded credentials, only those the tool declares
    (`toolgate.tools.spec.ToolSpec.forwarded_credentials`); for an approved write and its status
    check, the ones sealed when it was proposed. Never logged, never shown to the model."""
    service_credential: ServiceCredential | None = field(default=None, repr=False)
    """A short-lived credential for the tool's declared `toolgate.tools.credentials.ServiceScope`."""
    http: Egress | None = field(default=None, repr=False)
    """HTTP to the tool's declared ``egress_hosts`` only (None when it declares none)."""
    declared_credentials: frozenset[str] = frozenset()
    """The forwarded credential names the tool declared (present or not)."""

    def credential(self, name: str) -> str:
        """The user's forwarded credential ``name``; `CapabilityDenied` when the tool did not
        declare it, `ToolExecutionError` (``credential_missing``) when the user sent none."""
        if name in self.credentials:
            return self.credentials[name]
        if name not in self.declared_credentials:
            raise CapabilityDenied("credential", name, f"credential {name!r} was not declared by the tool")
        raise ToolExecutionError("credential_missing", f"no {name} was forwarded for this user")

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
"""A handler takes `toolgate.tools.spec.ToolSpec.handler_arguments` (the argument model instance, or for a JSON-Schema
tool a read-only mapping of exactly the kept arguments) and the context, and returns the result model."""

SemanticCheck = Callable[[Any, HandlerContext], "str | None"]
"""Cross-field validation: validated arguments and context in, a model-actionable problem or None out."""

Reconcile = Callable[[Any, HandlerContext], "BaseModel | None"]
"""Status check of a write: the stored effect's result, or None when there is no trace of it."""


__all__ = ["Handler", "HandlerContext", "Reconcile", "SemanticCheck", "StrictArgs", "ToolResult"]
