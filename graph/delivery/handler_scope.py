"""What one handler call may hold and reach: its `HandlerContext`, built by trusted code only.

Least privilege per tool: the context holds the user's forwarded credentials the tool declares
and no others; a short-lived service credential when it declares a `ServiceScope`; and an HTTP
capability limited to its ``egress_hosts`` (`toolgate.tools.egress`), enforced around the call by
`toolgate.tools.loaded_code`, which also runs the call under a `HandlerAccess`
(`toolgate.store.handler_access`): read-only for a read and a status check, its own records for
an approved write, never the store. A read gets the credentials of the request that runs it; an approved
write and its status checks get the *requesting* user's, sealed when the write was proposed
(`toolgate.graph.delivery.delegation`), never the reviewer's or the worker's; the claim seals them again
for the status checks of an outcome that may become unknown, for the reconcile schedule. Every
refused reach (an undeclared host, a sealed record that does not open) is audited here.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from toolgate.canonical import idempotency_key_for
from toolgate.clock import Clock
from toolgate.errors import CapabilityDenied, ToolExecutionError
from toolgate.graph.delivery.capability_audit import audit_denial
from toolgate.graph.delivery.delegation import (
    DelegationRefused,
    reconcile_key,
    reconcile_window_s,
    seal,
    seal_for_reconcile,
    unseal,
    unseal_for_check,
)
from toolgate.graph.delivery.result import Delivery
from toolgate.policy.output import PlainResult, plain_result
from toolgate.policy.principal import Principal
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.handler_access import HandlerAccess
from toolgate.store.records import TERMINAL_STATUSES, ProposalRecord
from toolgate.tools import loaded_code
from toolgate.tools.credentials import CredentialProvider, HmacCredentialProvider
from toolgate.tools.egress import Egress, install_guard
from toolgate.tools.spec import HandlerContext, ToolSpec

if TYPE_CHECKING:
    from toolgate.graph.delivery.claimed_write import ClaimedWrite
    from toolgate.policy.breaker import CircuitBreaker

_PROVIDERS: weakref.WeakKeyDictionary[Store, HmacCredentialProvider] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def builtin_provider(store: Store) -> HmacCredentialProvider:
    """The process's built-in service-credential provider for ``store``: signed under its secret,
    issued and expiring by its clock (`Store.calibrated_now`), never the process's wall clock (a
    worker an hour fast handed its handlers credentials that lived an hour past their ttl)."""
    with _LOCK:
        found = _PROVIDERS.get(store)
        if found is None:
            found = _PROVIDERS[store] = HmacCredentialProvider(store.keys.secret, clock=store.calibrated_now)
        return found


def declared(spec: ToolSpec, credentials: Mapping[str, str] | None) -> dict[str, str]:
    """The forwarded credentials ``spec`` declares, out of ``credentials`` (least privilege)."""
    return {name: value for name, value in (credentials or {}).items() if name in spec.forwarded_credentials}


def handler_context(
    spec: ToolSpec,
    *,
    store: Store,
    provider: CredentialProvider | None,
    tenant_id: str,
    user_id: str,
    credentials: Mapping[str, str] | None,
    deadline: datetime | None,
    operation_key: str | None = None,
) -> HandlerContext:
    """The context of one call of ``spec``: only what it declares."""
    service = None
    if spec.service_credential is not None:
        service = (provider or builtin_provider(store)).credential_for(
            spec.name, spec.service_credential
        )
    http = None
    if spec.egress_hosts:
        install_guard()
        http = Egress(spec.name, spec.egress_hosts, timeout_s=spec.timeout_s)
    return HandlerContext(
        tenant_id=tenant_id,
        user_id=user_id,
        operation_key=operation_key,
        idempotency_key=idempotency_key_for(operation_key) if operation_key else None,
        deadline=deadline,
        credentials=declared(spec, credentials),
        declared_credentials=spec.forwarded_credentials,
        service_credential=service,
        http=http,
    )


def read_context(
    store: Store,
    provider: CredentialProvider | None,
    spec: ToolSpec,
    principal: Principal,
    credentials: Mapping[str, str] | None,
    clock: Clock,
) -> HandlerContext:
    """The context of a read run for ``principal`` with the request's forwarded ``credentials``."""
    return handler_context(
        spec,
        store=store,
        provider=provider,
        tenant_id=principal.tenant_id,
        user_id=principal.user_id,
        credentials=credentials,
        deadline=deadline_of(clock.now(), spec),
    )


def write_context(
    spec: ToolSpec,
    proposal: ProposalRecord,
    *,
    store: Store,
    provider: CredentialProvider | None,
    deadline: datetime | None,
    check: bool = False,
) -> HandlerContext:
    """The context of an approved write or (``check``) its status check: the requesting user's
    sealed credentials (`DelegationRefused` when the sealed record does not open or has expired).
    Only a status check may use the seal its claim made for reconciliation."""
    opened = unseal_for_check if check else unseal
    credentials = opened(store, proposal) if spec.forwarded_credentials else {}
    return handler_context(
        spec,
        store=store,
        provider=provider,
        tenant_id=proposal.tenant_id,
        user_id=proposal.requester_id,
        credentials=credentials,
        deadline=deadline,
        operation_key=proposal.operation_key,
    )


def deadline_of(now: datetime, spec: ToolSpec) -> datetime:
    """When a call of ``spec`` starting at ``now`` must have finished."""
    return now + timedelta(seconds=spec.timeout_s)


def keep_for_write(
    store: Store, spec: ToolSpec, proposal: ProposalRecord, credentials: Mapping[str, str]
) -> bool:
    """Seal the proposing user's declared credentials for the write's execution (True when any)."""
    return seal(store, proposal, declared(spec, credentials))


def audit_denials(
    auditor: Auditor,
    ctx: HandlerContext,
    spec: ToolSpec,
    access: HandlerAccess | None = None,
    **fields: Any,
) -> int:
    """Audit each refused reach of the call that ran with ``ctx`` and ``access`` as
    ``handler.capability_denied``: its egress refusals, then its database ones (whose detail names
    the tool, as `toolgate.graph.delivery.capability_audit.audit_denial` does)."""
    denials: list[tuple[CapabilityDenied, dict[str, str]]] = [
        (d, {}) for d in (ctx.http.denials if ctx.http is not None else ())
    ]
    denials += [(d, {"tool": spec.name}) for d in (access.denials if access is not None else ())]
    fields = {"tool": spec.name, "handler_revision": spec.handler_revision, **fields}
    seen: set[tuple[str, str]] = set()
    for denied, named in denials:
        if (denied.capability, denied.target) in seen:
            continue
        seen.add((denied.capability, denied.target))
        auditor.record(
            "handler.capability_denied",
            "refused",
            user_id=ctx.user_id,
            code="capability_denied",
            tenant_id=ctx.tenant_id,
            detail={"capability": denied.capability, "target": denied.target, **named},
            **fields,
        )
    return len(seen)


def refuse_delegation(claimed: ClaimedWrite, exc: DelegationRefused) -> Delivery:
    """A claimed write whose sealed credentials were refused fails closed: its handler never runs."""
    claimed.auditor.record(
        "delegation.refused", "refused", code=exc.kind, detail={"reason": exc.message}, **claimed.common
    )
    try:
        return claimed.finish(
            "failed", code=exc.kind, error={"kind": exc.kind, "message": exc.message, "retryable": False}
        )
    finally:
        claimed.hold.release()


def run_write(
    claimed: ClaimedWrite,
    proposal: ProposalRecord,
    breaker: CircuitBreaker,
    provider: CredentialProvider | None,
    now: datetime,
) -> Delivery:
    """Run a claimed write with the requesting user's sealed credentials; a sealed record that
    does not open fails it closed. Refused reaches are audited; the sealed credentials of an
    operation that ended are deleted."""
    spec, store = claimed.spec, claimed.store
    try:
        ctx = write_context(spec, proposal, store=store, provider=provider, deadline=deadline_of(now, spec))
    except DelegationRefused as exc:
        return settled(store, refuse_delegation(claimed, exc), spec)
    if spec.reconcile is not None:
        # the approval was just verified and its seal opened: keep the credentials for the status
        # checks of an outcome that may become unknown (even if this worker dies mid-handler)
        window = reconcile_window_s(claimed.lease_s, spec.timeout_s)
        seal_for_reconcile(store, proposal, ctx.credentials, window)
    # an approved write: its own records, never the store
    access = HandlerAccess(spec.name, writes=True, timeout_s=spec.timeout_s)
    delivery = claimed.run(proposal.arguments, ctx, breaker, access)
    audit_denials(claimed.auditor, ctx, spec, access, **claimed.common)
    return settled(store, delivery, spec)


class Runtime(Protocol):
    """What a status check needs of whoever runs it (the `Executor`), named by shape so the
    scope does not depend on the executor that depends on it."""

    @property
    def store(self) -> Store: ...
    @property
    def credential_provider(self) -> CredentialProvider | None: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def auditor(self) -> Auditor: ...


def status_check(
    executor: Runtime, spec: ToolSpec, proposal: ProposalRecord, **fields: Any
) -> Callable[[], PlainResult | None]:
    """One call of ``spec``'s status check per call of the result, as the requesting user (their
    sealed credentials) and confined like the write, under the tool's timeout: None when it found
    no effect, else what it found made plain data (`PlainResult`). Raises
    `ToolExecutionError`: ``timeout``, a refused reach (audited), or `DelegationRefused` (audited
    once; the check never runs without the user's credentials)."""
    assert spec.reconcile is not None
    check, args = spec.reconcile, spec.handler_arguments(proposal.arguments)
    refused: list[DelegationRefused] = []

    def run() -> PlainResult | None:
        if refused:
            raise refused[0]
        try:
            ctx = write_context(
                spec,
                proposal,
                store=executor.store,
                provider=executor.credential_provider,
                deadline=deadline_of(executor.clock.now(), spec),
                check=True,
            )
        except DelegationRefused as exc:
            refused.append(exc)
            executor.auditor.record(
                "delegation.refused", "refused", code=exc.kind, detail={"reason": exc.message}, **fields
            )
            raise
        access = HandlerAccess(spec.name, timeout_s=spec.timeout_s)  # a status check reads: it never writes
        try:
            # its answer made plain data on its worker, under its timeout (`plain_result`)
            found: PlainResult | None = loaded_code.run_with_timeout(
                plain_result(check, spec.result_model, none_passes=True), spec.timeout_s, args, ctx, access=access
            )
        except CapabilityDenied as exc:
            audit_denials(executor.auditor, ctx, spec, access, **fields)  # its egress and database refusals
            audit_denial(executor.auditor, exc, ctx, spec.name, access, **fields)  # any other
            raise
        except TimeoutError as exc:
            raise ToolExecutionError("timeout", str(exc), retryable=True) from exc
        return found

    return run


def settled(store: Store, delivery: Delivery, spec: ToolSpec) -> Delivery:
    """Delete the sealed credentials of an operation of ``spec`` that reached a terminal status."""
    if delivery.status in TERMINAL_STATUSES:
        forget(store, delivery.operation_key, spec)
    return delivery


def forget(store: Store, operation_key: str, spec: ToolSpec) -> None:
    """Delete the sealed credentials of ``operation_key``: its proposal's and its status checks'.
    A tool that declares no forwarded credentials never had any sealed (`keep_for_write` seals
    only declared ones), so nothing is written for it (`Store.delegations.purge` sweeps any left)."""
    if spec.forwarded_credentials:
        store.delegations.delete(operation_key)
        store.delegations.delete(reconcile_key(operation_key))


__all__ = [
    "audit_denials",
    "builtin_provider",
    "deadline_of",
    "declared",
    "forget",
    "handler_context",
    "keep_for_write",
    "read_context",
    "refuse_delegation",
    "run_write",
    "settled",
    "status_check",
    "write_context",
]
