"""The requesting user's credentials for a durable wait's status checks: sealed with the wait.

The worker checks a waited job (`toolgate.graph.waits.progress`) with no user's token at hand, yet a
status tool that declares `toolgate.tools.spec.ToolSpec.forwarded_credentials` must run as the
user who asked for the job, never as the reviewer who approved it or the worker. So the status
tool's declared credentials, and only those, are sealed like a write's (`toolgate.graph.delivery.delegation`:
AES-256-GCM under the store's sealing key) and kept in the same ``sealed_delegations`` table under
a key of their own (``wait:<operation key>``, never an operation's key), bound to the wait: its
key, tenant, requesting user, status tool and expiry (the wait row's own MAC'd values).

Where they come from, only an authenticated request of the requesting user: the request that
opens the wait when its principal is the requester (an unattended write), else the requester's
proposal request, which seals them for the wait it may open (``wait-pending:<operation key>``,
bound to the proposal and its expiry) and the wait node binds them to the wait when it opens it.
Checkpointed state never supplies a credential. A seal that is missing, does not open (tampered,
another wait's) or has expired is refused (`DelegationRefused`): the check never runs. The seal is
deleted when the wait ends (`forget`), and `Store.delegations.purge` removes any left behind.
"""

from __future__ import annotations

from collections.abc import Mapping

from toolgate.canonical import canonical_json
from toolgate.clock import parse_iso
from toolgate.graph.delivery.delegation import DelegationRefused, open_text, seal_text
from toolgate.graph.delivery.handler_scope import declared
from toolgate.policy.identities import active_in
from toolgate.policy.principal import Principal
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.records import ProposalRecord
from toolgate.store.waits import WaitRecord
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ToolSpec

WAIT_PREFIX = "wait:"
"""The sealed-delegation key of a wait: ``wait:<operation key>`` (no operation key starts so)."""
PENDING_PREFIX = "wait-pending:"
"""The key of the credentials a proposal request sealed for the wait its write may open."""


def wait_key(operation_key: str) -> str:
    """The sealed-delegation key of the wait of ``operation_key``."""
    return f"{WAIT_PREFIX}{operation_key}"


def pending_key(operation_key: str) -> str:
    """The key of the credentials sealed at proposal for the wait of ``operation_key``."""
    return f"{PENDING_PREFIX}{operation_key}"


def _wait_bound(row: WaitRecord) -> bytes:
    """What a wait's sealed credentials belong to (the MAC'd values of its row)."""
    return canonical_json(
        {
            "kind": "wait",
            "wait": wait_key(row.operation_key),
            "tenant_id": row.tenant_id,
            "requester_id": row.user_id,
            "status_tool": row.status_tool,
            "expires_at": row.expires_at,
        }
    ).encode("utf-8")


def _pending_bound(proposal: ProposalRecord) -> bytes:
    """What credentials sealed at proposal for the write's future wait belong to."""
    return canonical_json(
        {
            "kind": "wait-pending",
            "wait": wait_key(proposal.operation_key),
            "tenant_id": proposal.tenant_id,
            "requester_id": proposal.requester_id,
            "expires_at": proposal.expires_at,
        }
    ).encode("utf-8")


def status_spec(registry: Registry, spec: ToolSpec, tenant_id: str) -> ToolSpec | None:
    """The status tool of ``spec``'s wait as it runs for ``tenant_id`` (its own implementation,
    if the tenant has one), when it declares forwarded credentials."""
    status = registry.get_for(spec.wait.status_tool, tenant_id) if spec.wait is not None else None
    return status if status is not None and status.forwarded_credentials else None


def keep_for_wait(
    store: Store, registry: Registry, spec: ToolSpec, proposal: ProposalRecord, credentials: Mapping[str, str]
) -> bool:
    """At proposal (the requester's own request): seal the credentials ``spec``'s status tool
    declares for the wait the write may open, until the proposal expires (True when any)."""
    status = status_spec(registry, spec, proposal.tenant_id)
    found = declared(status, credentials) if status is not None else {}
    if not found:
        return False
    text = seal_text(store.keys, found, _pending_bound(proposal))
    store.delegations.put(pending_key(proposal.operation_key), text, proposal.expires_at)
    return True


def carry_for_wait(store: Store, auditor: Auditor, original: ProposalRecord, edited: ProposalRecord) -> bool:
    """Carry the credentials ``original``'s requester sealed for its wait to a reviewer's
    ``edited`` proposal (same requester; never the reviewer's). One that does not open is not
    carried (audited ``delegation.refused``): the edited write's wait checks are then refused."""
    record = store.delegations.get(pending_key(original.operation_key))
    if record is None or edited.requester_id != original.requester_id:
        return False
    try:
        found = _open_pending(store, record.sealed, record.expires_at, original)
    except DelegationRefused as exc:
        auditor.record(
            "delegation.refused", "refused", code=exc.kind, proposal_id=original.proposal_id,
            operation_key=original.operation_key, tenant_id=original.tenant_id, detail={"reason": exc.message},
        )  # fmt: skip
        return False
    text = seal_text(store.keys, found, _pending_bound(edited))
    store.delegations.put(pending_key(edited.operation_key), text, edited.expires_at)
    store.delegations.delete(pending_key(original.operation_key))
    return True


def _open_pending(store: Store, sealed: str, expires_at: str, proposal: ProposalRecord) -> dict[str, str]:
    """Credentials sealed at ``proposal`` for its wait; `DelegationRefused` when they do not open."""
    if expires_at != proposal.expires_at:
        raise DelegationRefused(
            "delegation_invalid", "the sealed delegation does not belong to this proposal"
        )
    if store.now() >= parse_iso(expires_at):
        raise DelegationRefused("delegation_expired", "the sealed delegation expired with its proposal")
    return open_text(store.keys, sealed, _pending_bound(proposal))


def seal_for_wait(
    store: Store,
    auditor: Auditor,
    status: ToolSpec,
    row: WaitRecord,
    proposal: ProposalRecord,
    requester: Principal | None,
    credentials: Mapping[str, str],
) -> str:
    """Seal ``status``'s declared credentials for the waiting ``row`` (once: an existing seal
    stands): the request's ``credentials`` when its authenticated principal ``requester`` is the
    wait's requesting user, else those sealed at proposal. What was sealed from: ``request``,
    ``proposal``, ``kept`` (already sealed) or ``none`` (the checks will be refused)."""
    if store.delegations.get(wait_key(row.operation_key)) is not None:
        return "kept"
    own = requester is not None and (requester.user_id, requester.tenant_id) == (row.user_id, row.tenant_id)
    found, source = (declared(status, credentials), "request") if own else ({}, "none")
    if not found:
        found, source = _pending(store, auditor, row, proposal), "proposal"
    if not found:
        return "none"
    store.delegations.put(
        wait_key(row.operation_key), seal_text(store.keys, found, _wait_bound(row)), row.expires_at
    )
    store.delegations.delete(pending_key(row.operation_key))
    return source


def _pending(store: Store, auditor: Auditor, row: WaitRecord, proposal: ProposalRecord) -> dict[str, str]:
    """The credentials sealed at proposal for this wait (empty, audited, when they do not open)."""
    record = store.delegations.get(pending_key(row.operation_key))
    if record is None or proposal.operation_key != row.operation_key:
        return {}
    try:
        return _open_pending(store, record.sealed, record.expires_at, proposal)
    except DelegationRefused as exc:
        auditor.record(
            "delegation.refused", "refused", code=exc.kind, user_id=row.user_id, operation_key=row.operation_key,
            thread_id=row.thread_id, tool=row.status_tool, tenant_id=row.tenant_id,
            detail={"reason": exc.message, "wait": "open"},
        )  # fmt: skip
        return {}


def open_for_wait(store: Store, row: WaitRecord) -> dict[str, str]:
    """The credentials sealed for the wait ``row`` (a verified row); `DelegationRefused` when
    the requesting user is no longer an active identity of the wait's tenant
    (``requester_inactive``: revoking a person ends toolgate acting as them), when there are
    none (``delegation_missing``), they do not open or belong to another wait
    (``delegation_invalid``), or they expired with the wait (``delegation_expired``)."""
    if active_in(store.identities.get(row.user_id), row.tenant_id) is None:
        raise DelegationRefused(
            "requester_inactive", "the requesting user is no longer an active identity of the tenant"
        )
    record = store.delegations.get(wait_key(row.operation_key))
    if record is None:
        raise DelegationRefused(
            "delegation_missing", "no sealed credentials of the requesting user for this wait"
        )
    if record.expires_at != row.expires_at:
        raise DelegationRefused("delegation_invalid", "the sealed delegation does not belong to this wait")
    if store.now() >= parse_iso(record.expires_at):
        raise DelegationRefused("delegation_expired", "the sealed delegation expired with its wait")
    return open_text(store.keys, record.sealed, _wait_bound(row))


def forget(store: Store, registry: Registry, row: WaitRecord) -> None:
    """Delete the credentials sealed for the wait ``row`` (it ended). None were sealed when its
    status tool declares no forwarded credentials: nothing is deleted then (two writes saved at
    every wait end; `Store.delegations.purge` sweeps any leftover of an ended operation)."""
    status = registry.get_for(row.status_tool, row.tenant_id)
    if status is not None and not status.forwarded_credentials:
        return
    store.delegations.delete(wait_key(row.operation_key))
    store.delegations.delete(pending_key(row.operation_key))


__all__ = [
    "PENDING_PREFIX",
    "WAIT_PREFIX",
    "carry_for_wait",
    "forget",
    "keep_for_wait",
    "open_for_wait",
    "pending_key",
    "seal_for_wait",
    "status_spec",
    "wait_key",
]
