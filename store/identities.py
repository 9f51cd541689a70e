"""Identities, as the store keeps them: who may act, bound by a MAC.

The row's MAC covers every field that grants authority (tenant, roles, scopes, token hash,
status, the further tenants a staff reviewer reviews for), so a row inserted or promoted with
database access alone does not verify and cannot act. Tokens are stored only as keyed hashes.
Changes read the row inside the write transaction (locked on PostgreSQL; SQLite's write
transaction already holds the database's one writer lock), refuse to re-sign a row that no
longer verifies, and write a new MAC. Every write bumps the row's version and binds it into the
audit chain in the same transaction (`toolgate.store.record_versions`), so an older row copied
back reads as ``replayed`` and cannot act either.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from toolgate.errors import IdentityError
from toolgate.store.audit_log import AuditLog
from toolgate.store.identity_records import IdentityRecord, IdentityStatus
from toolgate.store.keys import Keyring
from toolgate.store.record_versions import Bound, VersionedRow, bind, bound_sql, freshness
from toolgate.store.tx import Database, Tx

_SELECT = f"SELECT i.*, {bound_sql('identity', 'i.user_id')} AS bound_sha256 FROM identities i"
"""Identity rows with the digest of their latest binding in the audit chain (one statement)."""

_READ_FOR_CHANGE = {
    "sqlite": f"{_SELECT} WHERE i.user_id = ?",
    "postgres": f"{_SELECT} WHERE i.user_id = ? FOR UPDATE OF i",
}
"""The read of a row about to be changed, per dialect."""


def audited_key(keys: Keyring, user_id: str) -> str:
    """How the audit chain's version bindings name an identity: a keyed hash of its user id."""
    return keys.mac_text("actor", user_id)


def identity_of(row: dict[str, Any], keys: Keyring) -> IdentityRecord:
    """An identity row read with its latest binding digest (``bound_sha256``, `_SELECT`) as its
    record: ``authentic`` when its MAC verifies and it is the version the audit chain bound last,
    ``replayed`` when an older version was copied back."""
    data = dict(row)
    mac = data.pop("mac", None)
    bound = data.pop("bound_sha256", None)
    stored = tuple(data.items())
    data["roles"] = tuple(json.loads(data["roles"]))
    data["scopes"] = tuple(json.loads(data["scopes"]))
    data["review_tenants"] = tuple(json.loads(data.get("review_tenants") or "[]"))
    data["version"] = int(data.get("version") or 0)
    record = IdentityRecord(**data)
    if not keys.verify_row("identity", stored, mac, record.content):
        return record
    key = audited_key(keys, record.user_id)
    replayed = freshness("identity", key, record.version, record.content(), bound) == "replayed"
    return dataclasses.replace(record, authentic=not replayed, replayed=replayed)


class Identities:
    """The identities of one store (``store.identities``)."""

    def __init__(self, db: Database, audit: AuditLog) -> None:
        self._db = db
        self._audit = audit

    def token_hash(self, token: str) -> str:
        """Keyed hash of a secret token, as stored in identity rows."""
        return self._db.keys.mac("identity-token", token)

    def _identity(self, row: dict[str, Any]) -> IdentityRecord:
        return identity_of(row, self._db.keys)

    def _audited_key(self, user_id: str) -> str:
        """How the audit chain's version bindings name an identity: a keyed hash of its user id."""
        return audited_key(self._db.keys, user_id)

    def _bind(self, tx: Tx, record: IdentityRecord) -> None:
        row = Bound(
            kind="identity",
            key=record.user_id,
            audited_key=self._audited_key(record.user_id),
            version=record.version,
            content=record.content(),
            tenant_id=record.tenant_id,
        )
        bind(tx, self._audit, [row])

    def _write(self, tx: Tx, record: IdentityRecord, *, insert: bool) -> bool:
        values = (
            record.tenant_id,
            json.dumps(sorted(record.roles)),
            json.dumps(sorted(record.scopes)),
            record.display_name,
            record.token_hash,
            record.status,
            record.created_at,
            record.updated_at,
            json.dumps(sorted(record.review_tenants)),
            record.version,
            self._db.keys.mac("identity", record.content()),
        )
        if insert:
            rows = tx.execute(
                "INSERT INTO identities (tenant_id, roles, scopes, display_name, token_hash, status,"
                " created_at, updated_at, review_tenants, version, mac, user_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING RETURNING user_id",
                (*values, record.user_id),
            )
        else:
            rows = tx.execute(
                "UPDATE identities SET tenant_id = ?, roles = ?, scopes = ?, display_name = ?,"
                " token_hash = ?, status = ?, created_at = ?, updated_at = ?, review_tenants = ?,"
                " version = ?, mac = ? WHERE user_id = ? RETURNING user_id",
                (*values, record.user_id),
            )
        if rows:
            self._bind(tx, record)
        return bool(rows)

    def add(self, record: IdentityRecord) -> IdentityRecord | None:
        """Insert a new identity (times from the store's clock); None when the user id exists."""
        with self._db.transaction() as tx:
            now = self._db._tx_now(tx)
            stored = dataclasses.replace(record, created_at=now, updated_at=now, version=1, authentic=True)
            if not self._write(tx, stored, insert=True):
                return None
        return stored

    def change(
        self,
        user_id: str,
        *,
        status: IdentityStatus | None = None,
        token_hash: str | None = None,
        roles: Sequence[str] | None = None,
        scopes: Sequence[str] | None = None,
    ) -> IdentityRecord:
        """Change the status, token, roles or scopes of an authentic identity, re-signing it
        (`IdentityError` otherwise)."""
        with self._db.transaction() as tx:
            row = tx.one(_READ_FOR_CHANGE[self._db.dialect], (user_id,))
            if row is None:
                raise IdentityError(f"unknown identity {user_id!r}", code="unknown_identity")
            current = self._identity(row)
            if current.replayed:
                raise IdentityError(
                    f"identity {user_id!r} is an older row copied back (version {current.version} is not"
                    " the latest the audit chain bound); refusing to re-sign it",
                    code="forged_identity",
                )
            if not current.authentic:
                raise IdentityError(
                    f"identity {user_id!r} was changed outside toolgate (its MAC does not verify);"
                    " refusing to re-sign it",
                    code="forged_identity",
                )
            changed = dataclasses.replace(
                current,
                status=status or current.status,
                token_hash=token_hash if token_hash is not None else current.token_hash,
                roles=tuple(sorted(set(roles))) if roles is not None else current.roles,
                scopes=tuple(sorted(set(scopes))) if scopes is not None else current.scopes,
                updated_at=self._db._tx_now(tx),
                version=current.version + 1,
            )
            self._write(tx, changed, insert=False)
        return changed

    def get(self, user_id: str) -> IdentityRecord | None:
        """The identity row (check ``authentic`` and ``status`` before trusting it), or None."""
        with self._db.transaction(write=False) as tx:
            row = tx.one(f"{_SELECT} WHERE i.user_id = ?", (user_id,))
        return self._identity(row) if row else None

    def get_many(self, user_ids: Sequence[str]) -> dict[str, IdentityRecord]:
        """The identity rows of ``user_ids`` that exist, by user id, read in one statement (a step
        that judges several people at one moment: an approval's reviewers and its requester)."""
        wanted = sorted(set(user_ids))
        if not wanted:
            return {}
        with self._db.transaction(write=False) as tx:
            rows = tx.execute(f"{_SELECT} WHERE i.user_id IN ({', '.join('?' for _ in wanted)})", tuple(wanted))
        return {record.user_id: record for record in map(self._identity, rows)}

    def by_token_hash(self, token_hash: str) -> IdentityRecord | None:
        """The identity whose token has ``token_hash`` (a bearer token names its person), or None."""
        with self._db.transaction(write=False) as tx:
            row = tx.one(f"{_SELECT} WHERE i.token_hash = ?", (token_hash,))
        return self._identity(row) if row else None

    def versioned_rows(self) -> list[VersionedRow]:
        """Every identity row as the audit chain's version bindings judge it."""
        return [
            VersionedRow(
                kind="identity",
                key=r.user_id,
                audited_key=self._audited_key(r.user_id),
                version=r.version,
                content=r.content(),
                mac_ok=r.authentic or r.replayed,
                tenant_id=r.tenant_id,
            )
            for r in self.list()
        ]

    def list(self, tenant_ids: Sequence[str] | None = None) -> list[IdentityRecord]:
        """Identities by user id, optionally only those of ``tenant_ids`` (last: the name ``list``
        shadows the builtin in the annotations of the methods after it)."""
        sql = _SELECT
        params: tuple[str, ...] = ()
        if tenant_ids is not None:
            if not tenant_ids:
                return []
            sql += f" WHERE i.tenant_id IN ({', '.join('?' for _ in tenant_ids)})"
            params = tuple(tenant_ids)
        with self._db.transaction(write=False) as tx:
            rows = tx.execute(sql + " ORDER BY i.user_id", params)
        return [self._identity(r) for r in rows]


__all__ = ["Identities", "audited_key", "identity_of"]
