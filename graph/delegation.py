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
wait's status checks seal theirs the same way, bound to the wait (`toolgate.graph.wait_delegation`).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from toolgate.canonical import canonical_json
from toolgate.clock import parse_iso
from toolgate.errors import ToolExecutionError
from toolgate.store.base import Store
from toolgate.store.keys import Keyring
from toolgate.store.records import ProposalRecord

PURPOSE = b"toolgate/sealed-delegation/v1"
"""HKDF info: the sealing key is used for nothing else."""
VERSION = "v1"


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
    store.put_delegation(
        proposal.operation_key, seal_text(store.keys, credentials, _bound(proposal)), proposal.expires_at
    )
    return True


def unseal(store: Store, proposal: ProposalRecord) -> dict[str, str]:
    """The credentials sealed for ``proposal``'s operation (empty when none were sealed);
    `DelegationRefused` when the record does not open or has expired."""
    record = store.get_delegation(proposal.operation_key)
    if record is None:
        return {}
    if record.expires_at != proposal.expires_at:
        raise DelegationRefused(
            "delegation_invalid", "the sealed delegation does not belong to this proposal"
        )
    if store.now() >= parse_iso(record.expires_at):
        raise DelegationRefused("delegation_expired", "the sealed delegation expired with its proposal")
    return open_text(store.keys, record.sealed, _bound(proposal))


__all__ = ["PURPOSE", "DelegationRefused", "open_text", "seal", "seal_text", "unseal"]
