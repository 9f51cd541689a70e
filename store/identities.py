"""Identities, as the store keeps them: who may act, bound by a MAC.

The row's MAC covers every field that grants authority (tenant, roles, scopes, token hash,
status, the further tenants a staff reviewer reviews for), so a row inserted or promoted with
database access alone does not verify and cannot act. Tokens are stored only as keyed hashes.
Changes read the row inside the write transaction (locked on PostgreSQL; SQLite's write
transaction already holds the database's one writer lock), refuse to re-sign a row that no
longer verifies, and write a new MAC.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from toolgate.errors import IdentityError
from toolgate.store.identity_records import IdentityRecord, IdentityStatus
from toolgate.store.tx import Database, Tx

_READ_FOR_CHANGE = {
    "sqlite": "SELECT * FROM identities WHERE user_id = ?",
    "postgres": "SELECT * FROM identities WHERE user_id = ? FOR UPDATE",
}
"""The read of a row about to be changed, per dialect."""


class Identities:
    """The identities of one store (``store.identities``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def token_hash(self, token: str) -> str:
        """Keyed hash of a secret token, as stored in identity rows."""
        return self._db.keys.mac("identity-token", token)

    def _identity(self, row: dict[str, Any]) -> IdentityRecord:
        data = dict(row)
        mac = data.pop("mac", None)
        data["roles"] = tuple(json.loads(data["roles"]))
        data["scopes"] = tuple(json.loads(data["scopes"]))
        data["review_tenants"] = tuple(json.loads(data.get("review_tenants") or "[]"))
        record = IdentityRecord(**data)
        return dataclasses.replace(record, authentic=self._db.keys.verify("identity", record.content(), mac))

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
            self._db.keys.mac("identity", record.content()),
        )
        if insert:
            rows = tx.execute(
                "INSERT INTO identities (tenant_id, roles, scopes, display_name, token_hash, status,"
                " created_at, updated_at, review_tenants, mac, user_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING RETURNING user_id",
                (*values, record.user_id),
            )
        else:
            rows = tx.execute(
                "UPDATE identities SET tenant_id = ?, roles = ?, scopes = ?, display_name = ?,"
                " token_hash = ?, status = ?, created_at = ?, updated_at = ?, review_tenants = ?, mac = ?"
                " WHERE user_id = ? RETURNING user_id",
                (*values, record.user_id),
            )
        return bool(rows)

    def add(self, record: IdentityRecord) -> IdentityRecord | None:
        """Insert a new identity (times from the store's clock); None when the user id exists."""
        with self._db.transaction() as tx:
            now = self._db._tx_now(tx)
            stored = dataclasses.replace(record, created_at=now, updated_at=now, authentic=True)
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
            )
            self._write(tx, changed, insert=False)
        return changed

    def get(self, user_id: str) -> IdentityRecord | None:
        """The identity row (check ``authentic`` and ``status`` before trusting it), or None."""
        with self._db.transaction(write=False) as tx:
            row = tx.one("SELECT * FROM identities WHERE user_id = ?", (user_id,))
        return self._identity(row) if row else None

    def by_token_hash(self, token_hash: str) -> IdentityRecord | None:
        """The identity whose token has ``token_hash`` (a bearer token names its person), or None."""
        with self._db.transaction(write=False) as tx:
            row = tx.one("SELECT * FROM identities WHERE token_hash = ?", (token_hash,))
        return self._identity(row) if row else None

    def list(self, tenant_ids: Sequence[str] | None = None) -> list[IdentityRecord]:
        """Identities by user id, optionally only those of ``tenant_ids`` (last: the name ``list``
        shadows the builtin in the annotations of the methods after it)."""
        sql = "SELECT * FROM identities"
        params: tuple[str, ...] = ()
        if tenant_ids is not None:
            if not tenant_ids:
                return []
            sql += f" WHERE tenant_id IN ({', '.join('?' for _ in tenant_ids)})"
            params = tuple(tenant_ids)
        with self._db.transaction(write=False) as tx:
            rows = tx.execute(sql + " ORDER BY user_id", params)
        return [self._identity(r) for r in rows]


__all__ = ["Identities"]
