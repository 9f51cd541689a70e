"""Authorization from the authenticated context: scopes, then ownership of every resource a call names.

A scope check answers "may this principal ever call the tool"; the resource check answers
"may it call it on this resource" (closing the IDOR gap). Both read only trusted data:
the principal and the system of record. Neither ever reads an identity from arguments.
"""

from __future__ import annotations

import concurrent.futures
import difflib
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from toolgate.errors import RejectionCode
from toolgate.policy.decisions import Rejection
from toolgate.policy.principal import Principal
from toolgate.tools import loaded_code
from toolgate.tools.argpaths import values_at
from toolgate.tools.registry import Registry
from toolgate.tools.spec import (
    HandlerContext,
    ResourceRef,
    ResourceResolver,
    ResourceStatus,
    ToolSpec,
    is_retired,
)


def exposed(spec: ToolSpec, principal: Principal) -> bool:
    """Whether ``principal`` may see ``spec``: all its scopes, and its role and tenant restrictions."""
    if not principal.has_scopes(spec.required_scopes):
        return False
    if spec.exposed_to_roles is not None and not (principal.roles & spec.exposed_to_roles):
        return False
    return spec.exposed_to_tenants is None or principal.tenant_id in spec.exposed_to_tenants


def visible_tools(registry: Registry, principal: Principal) -> list[ToolSpec]:
    """The tools of ``registry`` this principal may see, in a stable order (by real name): the only
    tools a model acting for them is offered."""
    return [s for _, s in sorted(registry.tools.items()) if exposed(s, principal)]


def closest_visible(
    registry: Registry, unknown: str, principal: Principal, now: datetime | None = None
) -> str | None:
    """The closest tool name to an unknown one among those the principal may see, never a hidden
    tool's, nor (given the store's ``now``) one past its deprecation window, which would only be
    refused. It is the wire name: the suggestion is for the model, which calls tools by wire name."""
    allowed = [
        s.wire_name for s in visible_tools(registry, principal) if now is None or not is_retired(s, now)
    ]
    matches = difflib.get_close_matches(unknown.casefold(), allowed, n=1, cutoff=0.6)
    return matches[0] if matches else None


def check_scopes(spec: ToolSpec, principal: Principal) -> Rejection | None:
    """Refuse a tool the principal may not see (scopes, roles, tenant). Not retryable."""
    if exposed(spec, principal):
        return None
    return Rejection(
        code="unauthorized",
        message=f"You are not authorized to use {spec.name}. Tell the user this action is not available to them.",
        retryable=False,
    )


def check_resource(
    spec: ToolSpec, principal: Principal, args: Mapping[str, Any], resolver: ResourceResolver
) -> Rejection | None:
    """Resolve every resource the call names for the authenticated caller before anything
    touches it: each declared argument path, each value found there (list items included).

    Another tenant's resource, another user's (unless the caller holds one of the declared staff
    roles) and a missing one all get the same model-facing message, so a refusal is no oracle
    for ids the caller may not see; the audit log keeps the precise code. Authorization refusals
    are not retryable; a missing id is (the user may have mistyped it). An owner check or resolver
    is loaded code, called through its boundary (`toolgate.tools.loaded_code`): one that raises
    anything, overruns its deadline or answers something that is not a `ResourceStatus` refuses
    the call ``resolver_failed``, retryable, with nothing of its message.

    The call's lookups travel to loaded code in one hop, in order, each under its own
    `LOOKUP_TIMEOUT_S` from its own start, the worker stopping at the first answer that refuses:
    a call naming n resources costs one hop, not n (a hop is a few hundred microseconds inside a
    run, where the worker waits for the GIL behind LangGraph's checkpoint thread). A single
    lookup takes the plain hop (`toolgate.tools.loaded_code.lookup`), which costs less.
    """
    lookups = OwnershipLookups.of(spec, principal, args, resolver)
    if not lookups.resources:
        return None
    if len(lookups.resources) == 1:
        try:
            status = loaded_code.lookup(lookups.calls()[0])
        except Exception:  # loaded code failed (a timeout and `HandlerAborted` included): closed
            status = None
        return lookups.judge(0, status)
    checked, future = loaded_code.start_checked(lookups.calls(), lookups.allows, _every_lookup_allowed)
    try:
        loaded_code.wait_checked(checked, future, loaded_code.LOOKUP_TIMEOUT_S, loaded_code.LOOKUP_TIMEOUT_S)
    except loaded_code.NotStarted:  # one refused, raised or overran: the call is refused, always
        return lookups.refusal(checked.answers) or lookups.unanswered(checked.stage()[0])
    except TimeoutError:  # every lookup answered in time; only the end marker's wait ran out
        pass
    return lookups.refusal(checked.answers)


def _every_lookup_allowed() -> None:
    """What a `check_resource` hop runs once every lookup allowed the call: nothing."""


@dataclass(frozen=True)
class OwnershipLookups:
    """The ownership lookups of one call for its principal, and how each answer is judged
    (`check_resource`). A read at execute runs them in front of its handler, in the handler's own
    hop to loaded code (`toolgate.tools.loaded_code.start_checked`), judged the same way."""

    principal: Principal
    """The authenticated caller the resources are resolved for."""
    resolver: ResourceResolver
    """The release's per-tenant resolver (for a reference without its own owner check)."""
    resources: tuple[tuple[ResourceRef, str], ...]
    """Each resource the call names: its declaration and the id found at its argument path."""

    @classmethod
    def of(
        cls, spec: ToolSpec, principal: Principal, args: Mapping[str, Any], resolver: ResourceResolver
    ) -> OwnershipLookups:
        """The lookups of a call of ``spec`` with ``args`` (each value at each declared path)."""
        found = tuple(
            (ref, str(value)) for ref in spec.resource_refs for value in values_at(args, ref.argument)
        )
        return cls(principal, resolver, found)

    def calls(self) -> list[Callable[[], Any]]:
        """One loaded-code call per resource (`resource_status`), in order."""
        ctx = HandlerContext(tenant_id=self.principal.tenant_id, user_id=self.principal.user_id)
        return [
            functools.partial(resource_status, ref, value, ctx, self.resolver)
            for ref, value in self.resources
        ]

    def allows(self, index: int, status: Any) -> bool:
        """Whether answer ``index`` lets the call go on (`judge` refuses nothing)."""
        return self.judge(index, status) is None

    def unanswered(self, index: int) -> Rejection:
        """``resolver_failed``: lookup ``index`` raised, overran its deadline or answered no
        `ResourceStatus` (retryable, with nothing of what it said)."""
        kind = self.resources[min(index, len(self.resources) - 1)][0].kind
        return Rejection(
            code="resolver_failed",
            message=f"Who owns this {kind} cannot be checked right now. Tell the user to try again later.",
            retryable=True,
        )

    def refusal(self, answers: Sequence[concurrent.futures.Future[Any]]) -> Rejection | None:
        """The first refusal among the answers of a `toolgate.tools.loaded_code.start_checked`
        hop, in order (one that raised, or is not in yet, answered nothing: ``resolver_failed``),
        or None when every lookup allowed the call."""
        for index, answer in enumerate(answers):
            done = answer.done() and answer.exception() is None
            refused = self.judge(index, answer.result() if done else None)
            if refused is not None:
                return refused
        return None

    def judge(self, index: int, status: Any) -> Rejection | None:
        """The refusal answer ``index`` makes (``status``: what the lookup returned; None when it
        raised or overran its deadline), or None when it lets the call go on."""
        ref = self.resources[index][0]
        if type(status) is not str or status not in RESOURCE_STATUSES:  # never trust its __eq__
            return self.unanswered(index)
        if status == "owned" or (status == "not_owner" and self.principal.roles & ref.staff_roles):
            return None
        message = f"No {ref.kind} with that id exists for this account."
        if status in ("foreign", "not_owner"):
            code: RejectionCode = "cross_tenant" if status == "foreign" else "not_owner"
            return Rejection(code=code, message=message, retryable=False)
        return Rejection(
            code="semantic_invalid",
            message=message,
            retryable=True,
            suggestion=f"check the {ref.argument} with the user",
        )


class OwnershipRefused(Exception):
    """The ownership lookups run in front of a read's handler refused the call: the handler did
    not run. Raised by the executor to the execute node, which answers and audits ``rejection``
    as a refusal at execute; it never leaves the read path."""

    def __init__(self, rejection: Rejection) -> None:
        super().__init__(rejection.code)
        self.rejection = rejection
        """The refusal, as `check_resource` makes it."""


RESOURCE_STATUSES: frozenset[str] = frozenset(("owned", "foreign", "missing", "not_owner"))
"""Every answer an owner check or resolver may give (`ResourceStatus`)."""


def resource_status(
    ref: ResourceRef, resource_id: str, ctx: HandlerContext, resolver: ResourceResolver
) -> ResourceStatus:
    """Where one resource id stands for the caller: the tool's own owner check when it declares
    one (it sees tenant and user), else the release resolver's per-tenant answer."""
    if ref.owner is not None:
        return ref.owner(resource_id, ctx)
    return resolver.resource_status(ref.kind, resource_id, ctx.tenant_id)


__all__ = [
    "OwnershipLookups",
    "OwnershipRefused",
    "check_resource",
    "check_scopes",
    "closest_visible",
    "exposed",
    "resource_status",
    "visible_tools",
]
