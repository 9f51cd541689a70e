"""The requesting user's credentials for their approved write: sealed at proposal, unsealed to run.

A write runs after a person approves it, usually in another request (the reviewer's resume, a
worker, the CLI), where the requesting user's forwarded credentials are not at hand, and must not
be replaced by the reviewer's or a service account's. So when the write is proposed, the
credentials its tool declares (`toolgate.tools.spec.ToolSpec.forwarded_credentials`) are sealed:
AES-256-GCM under a key derived with HKDF-SHA256 from the store's secret (its own purpose, so no
other key of the store can open them), with the operation key, tenant, requester and expiry as
associated data, so a sealed record copied to another operation, user or expiry does not open.
The store keeps only the ciphertext (`toolgate.store.delegations`); it expires with the proposal
and is deleted once the operation is terminal. A record that does not open, or has expired, is
refused (`DelegationRefused`): the write fails closed and the refusal is audited. A durable
wait's status checks seal theirs the same way, bound to the wait (`toolgate.graph.waits.delegation`).

An outcome that becomes ``unknown`` is reconciled by status checks that may run after the
approval window, so when a write is claimed (its approval just verified, its seal just opened) the
same credentials are sealed again for its status checks only (`seal_for_reconcile`, key
``reconcile:<operation key>``), until the reconcile schedule can have ended (never before the
proposal's expiry, never more than `RECONCILE_CAP_S` away), that expiry in the associated data.
Execution never reads that seal: an expired approval is still refused before any claim.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from datetime import timedelta

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from toolgate.canonical import canonical_json
from toolgate.clock import iso, parse_iso
from toolgate.errors import ToolExecutionError
from toolgate.settings import InvalidSetting, setting
from toolgate.store.base import Store
from toolgate.store.keys import Keyring
from toolgate.store.records import ProposalRecord

PURPOSE = b"toolgate/sealed-delegation/v1"
"""HKDF info: the sealing key is used for nothing else."""
VERSION = "v1"
RECONCILE_PREFIX = "reconcile:"
RECONCILE_CAP_S = 24 * 3600.0
"""Hard cap: a seal for status checks never outlives its claim by more than a day."""
RECOVERY_SLACK_S = 60.0
"""Time for a worker to notice an abandoned claim (its grace and recovery interval)."""


class DelegationRefused(ToolExecutionError):
    """A sealed delegation that does not open (tampered, moved, other key) or has expired.

    ``kind`` is ``delegation_invalid`` or ``delegation_expired``; never retried."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(kind, message, retryable=False)


def _cipher(keys: Keyring) -> AESGCM:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=PURPOSE)
    return AESGCM(hkdf.derive(keys.secret))


def _bound(proposal: ProposalRecord) -> bytes:
    """The associated data: what the sealed credentials belong to."""
    return canonical_json(
        {
            "operation_key": proposal.operation_key,
            "tenant_id": proposal.tenant_id,
            "requester_id": proposal.requester_id,
            "expires_at": proposal.expires_at,
        }
    ).encode("utf-8")


def seal_text(keys: Keyring, credentials: Mapping[str, str], bound: bytes) -> str:
    """``credentials`` sealed under the store's sealing key with ``bound`` as associated data."""
    nonce = os.urandom(12)
    plain = canonical_json(dict(credentials)).encode("utf-8")
    sealed = nonce + _cipher(keys).encrypt(nonce, plain, bound)
    return f"{VERSION}.{base64.urlsafe_b64encode(sealed).decode('ascii')}"


def open_text(keys: Keyring, text: str, bound: bytes) -> dict[str, str]:
    """The credentials ``text`` seals for ``bound``; `DelegationRefused` when it does not open."""
    version, _, body = text.partition(".")
    try:
        raw = base64.urlsafe_b64decode(body.encode("ascii"))
        if version != VERSION or len(raw) < 29:
            raise ValueError("malformed")
        plain = _cipher(keys).decrypt(raw[:12], raw[12:], bound)
        found = json.loads(plain)
    except (InvalidTag, ValueError, UnicodeError):
        raise DelegationRefused("delegation_invalid", "the sealed delegation failed verification") from None
    if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
        raise DelegationRefused("delegation_invalid", "the sealed delegation is malformed")
    return {str(k): v for k, v in found.items()}


def seal(store: Store, proposal: ProposalRecord, credentials: Mapping[str, str]) -> bool:
    """Seal ``credentials`` for ``proposal``'s operation (nothing stored when there are none)."""
    if not credentials:
        return False
    store.delegations.put(
        proposal.operation_key, seal_text(store.keys, credentials, _bound(proposal)), proposal.expires_at
    )
    return True


def unseal(store: Store, proposal: ProposalRecord) -> dict[str, str]:
    """The credentials sealed for ``proposal``'s operation (empty when none were sealed);
    `DelegationRefused` when the record does not open or has expired."""
    record = store.delegations.get(proposal.operation_key)
    if record is None:
        return {}
    if record.expires_at != proposal.expires_at:
        raise DelegationRefused(
            "delegation_invalid", "the sealed delegation does not belong to this proposal"
        )
    if store.now() >= parse_iso(record.expires_at):
        raise DelegationRefused("delegation_expired", "the sealed delegation expired with its proposal")
    return open_text(store.keys, record.sealed, _bound(proposal))


def reconcile_key(operation_key: str) -> str:
    """The sealed-delegation key of the status checks of ``operation_key``."""
    return f"{RECONCILE_PREFIX}{operation_key}"


def _reconcile_bound(proposal: ProposalRecord, expires_at: str) -> bytes:
    """What credentials sealed for a claimed write's status checks belong to, expiry included."""
    return canonical_json(
        {
            "kind": "reconcile",
            "operation_key": proposal.operation_key,
            "proposal_id": proposal.proposal_id,
            "tenant_id": proposal.tenant_id,
            "requester_id": proposal.requester_id,
            "expires_at": expires_at,
        }
    ).encode("utf-8")


def reconcile_window_s(lease_s: float, timeout_s: float) -> float:
    """How long after a claim its status checks may still run: the claim's lease, the handler's
    timeout for the write and for each check, the configured reconcile schedule
    (``TOOLGATE_RECONCILE_DELAYS``) and `RECOVERY_SLACK_S`."""
    try:
        delays: tuple[float, ...] = tuple(setting("reconcile_delays")) or (0.0,)
    except InvalidSetting:
        delays = (1.0, 2.0, 4.0, 8.0, 16.0)
    return lease_s + timeout_s * (1 + len(delays)) + sum(delays) + RECOVERY_SLACK_S


def seal_for_reconcile(
    store: Store, proposal: ProposalRecord, credentials: Mapping[str, str], window_s: float
) -> str | None:
    """Seal the claimed write's opened ``credentials`` for its status checks until the store's
    now + ``window_s`` (at least the proposal's expiry, at most `RECONCILE_CAP_S` from now); its
    expiry, or None when there is nothing to seal. Trusted code only, right after the claim."""
    if not credentials:
        return None
    now = store.now()
    until = max(now + timedelta(seconds=max(window_s, 0.0)), parse_iso(proposal.expires_at))
    expires_at = iso(min(until, now + timedelta(seconds=RECONCILE_CAP_S)))
    text = seal_text(store.keys, credentials, _reconcile_bound(proposal, expires_at))
    store.delegations.put(reconcile_key(proposal.operation_key), text, expires_at)
    return expires_at


def unseal_for_check(store: Store, proposal: ProposalRecord) -> dict[str, str]:
    """The credentials a status check of ``proposal``'s operation runs with: its reconcile seal
    when the write was claimed with one (verified before its expiry is judged, so an edited expiry
    is ``delegation_invalid``), else the proposal's own (`unseal`)."""
    record = store.delegations.get(reconcile_key(proposal.operation_key))
    if record is None:
        return unseal(store, proposal)
    found = open_text(store.keys, record.sealed, _reconcile_bound(proposal, record.expires_at))
    if store.now() >= parse_iso(record.expires_at):
        raise DelegationRefused(
            "delegation_expired", "the sealed delegation for status checks expired with its schedule"
        )
    return found


__all__ = [
    "PURPOSE",
    "RECONCILE_CAP_S",
    "DelegationRefused",
    "open_text",
    "reconcile_key",
    "reconcile_window_s",
    "seal",
    "seal_for_reconcile",
    "seal_text",
    "unseal",
    "unseal_for_check",
]
