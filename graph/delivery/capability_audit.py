"""Auditing a handler that reached past its capabilities.

A handler's capabilities (its records, hosts, credentials, and the store it must not use) raise
`CapabilityDenied` when it goes beyond them. The handler's call fails the usual way; the trusted
code that ran it also appends a ``handler.capability_denied`` event naming the capability, the
target and the tool, so a refusal is on the record even when the handler wrapped the exception in
one of its own. Refusals of the egress and database scopes are remembered by the call
(`toolgate.tools.egress.Egress.denials`, `toolgate.store.handler_access.HandlerAccess.denials`):
the call fails with its first one even when the handler swallowed it, and
`toolgate.graph.delivery.handler_scope.audit_denials` audits each; this module audits the one
in the exception chain that neither remembered (a credential the tool did not declare).
"""

from __future__ import annotations

from typing import Any

from toolgate.errors import CapabilityDenied
from toolgate.store.audit import Auditor
from toolgate.store.handler_access import HandlerAccess
from toolgate.tools.loaded_code import denial_in_chain
from toolgate.tools.spec import HandlerContext


def denial_in(exc: BaseException) -> CapabilityDenied | None:
    """The `CapabilityDenied` that ``exc`` is or was raised from (its cause/context chain), read
    without running any of the chain's own code (`toolgate.tools.loaded_code.denial_in_chain`:
    the exceptions are loaded code's)."""
    return denial_in_chain(exc)


def audit_denial(
    auditor: Auditor,
    exc: BaseException,
    ctx: HandlerContext,
    tool: str,
    /,
    access: HandlerAccess | None = None,
    **fields: Any,
) -> bool:
    """Append ``handler.capability_denied`` when ``exc`` comes from a refused capability that
    `toolgate.graph.delivery.handler_scope.audit_denials` does not already audit from the call's
    context and ``access`` (its egress and database refusals). ``fields``: the call's audit
    fields. True when an event was appended."""
    denial = denial_in(exc)
    remembered = [*(ctx.http.denials if ctx.http is not None else ()), *(access.denials if access else ())]
    if denial is None or any(d is denial for d in remembered):
        return False
    fields = {**fields, "tool": tool}
    fields.setdefault("tenant_id", ctx.tenant_id)
    auditor.record(
        "handler.capability_denied",
        "refused",
        user_id=ctx.user_id,
        code="capability_denied",
        detail={"capability": denial.capability, "target": denial.target, "tool": tool},
        **fields,
    )
    return True


__all__ = ["audit_denial", "denial_in"]
