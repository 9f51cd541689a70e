"""People who may act through toolgate: identities kept in the store, authenticated by token.

Every door that acts for a person (each CLI command, the server's auth handler, HTTP routes)
turns a user id and a secret token into a `Principal` here, and nowhere else. Identity rows live
in the store, bound by a MAC under the store's secret, with only a keyed hash of each token; a
file can seed them once (``toolgate identities import``) but is never read to authenticate.
Administrators (role ``admin``) manage the identities of their own tenant. Every refusal and
every change is audited.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgate.errors import ConfigurationError, IdentityError
from toolgate.policy.principal import Principal
from toolgate.policy.sign_in_throttle import SignInLimits, SignInThrottle
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.identity_records import IdentityRecord

SCHEMA_VERSION = 1
"""Version of the identities import file."""
ADMIN_ROLE = "admin"
"""Holders manage the identities of their own tenant."""
AUDITOR_ROLE = "auditor"
"""Holders read the audit events of their own tenant."""
ALL_TENANTS_AUDITOR_ROLE = "auditor:all"
"""Holders read the audit events of every tenant (granted only by the bootstrap or by a holder)."""


def new_token() -> str:
    """A fresh random secret token (shown once, stored only as a keyed hash)."""
    return "tg_" + secrets.token_urlsafe(32)


def principal_of(record: IdentityRecord) -> Principal:
    """The principal an identity row stands for."""
    return Principal(
        user_id=record.user_id,
        tenant_id=record.tenant_id,
        roles=frozenset(record.roles),
        scopes=frozenset(record.scopes),
        display_name=record.display_name,
        review_tenants=frozenset(record.review_tenants),
    )


def active_in(record: IdentityRecord | None, tenant_id: str) -> Principal | None:
    """The principal of ``record`` when it is an authentic, active identity of ``tenant_id``."""
    if record is None or not record.authentic or record.status != "active":
        return None
    return principal_of(record) if record.tenant_id == tenant_id else None


def reviewer_in(record: IdentityRecord | None, tenant_id: str) -> Principal | None:
    """The principal of ``record`` when it is an authentic, active identity that reviews for
    ``tenant_id`` (its own tenant, or one the operator granted it as staff)."""
    if record is None or not record.authentic or record.status != "active":
        return None
    principal = principal_of(record)
    return principal if principal.reviews_for(tenant_id) else None


@dataclass(frozen=True)
class IdentitySnapshot:
    """Identity rows read together at one moment (`IdentityDirectory.read`), asked the questions
    `IdentityDirectory.active` and `IdentityDirectory.reviewer_for` answer from a fresh read.
    Meant for one judgement, never kept: identities change."""

    records: Mapping[str, IdentityRecord]
    """The rows that exist, by user id (a missing id is no identity)."""

    def active(self, user_id: str, tenant_id: str) -> Principal | None:
        """As `IdentityDirectory.active`, from this snapshot."""
        return active_in(self.records.get(user_id), tenant_id)

    def reviewer_for(self, user_id: str, tenant_id: str) -> Principal | None:
        """As `IdentityDirectory.reviewer_for`, from this snapshot."""
        return reviewer_in(self.records.get(user_id), tenant_id)


@dataclass(frozen=True)
class IdentityDirectory:
    """Authentication and administration of the identities in one store."""

    store: Store
    """Where the identity rows live."""
    auditor: Auditor | None = None
    """Records refusals and changes (None only for read-only uses)."""
    sign_in_limits: SignInLimits = field(default_factory=SignInLimits.from_settings)
    """When failed sign-ins are throttled (``TOOLGATE_SIGN_IN_FAILURES_*``)."""

    # ---- authentication ----------------------------------------------------------------

    def authenticate(self, user_id: str, token: str | None, *, source: str | None = None) -> Principal:
        """The active principal ``user_id`` when ``token`` is theirs; `IdentityError` otherwise.

        Failures are throttled and counted per ``source`` (a network door's client address) and
        per the claimed ``user_id`` (`toolgate.policy.sign_in_throttle`)."""
        self.throttle.check(source=source, identity=user_id)
        if not token:
            self._fail(
                user_id, "missing_token", f"no token given for {user_id!r} (set TOOLGATE_TOKEN)", source
            )
        record = self.store.identities.get(user_id)
        if record is not None and not record.authentic:
            self._fail(
                user_id, "forged_identity", f"identity {user_id!r} was changed outside toolgate", source
            )
        expected = record.token_hash if record is not None else None
        presented = self.store.identities.token_hash(token or "")
        if not expected or not hmac.compare_digest(expected, presented):
            # an unknown user and a wrong token look the same to the caller (no user oracle)
            self._fail(user_id, "authentication_failed", f"authentication failed for {user_id!r}", source)
        assert record is not None
        if record.status != "active":
            self._fail(user_id, "revoked", f"identity {user_id!r} has been revoked", source, proven=True)
        return principal_of(record)

    def authenticate_bearer(self, token: str | None, *, source: str | None = None) -> Principal:
        """The active principal a bearer token belongs to (the server's doors: one secret, no user
        id). Failures are throttled and counted per ``source``, the client's address."""
        self.throttle.check(source=source, identity=None)
        if not token:
            self._fail(
                "",
                "missing_token",
                "no bearer token (send Authorization: Bearer <token>)",
                source,
                claimed=False,
            )
        record = self.store.identities.by_token_hash(self.store.identities.token_hash(token or ""))
        if record is None:
            self._fail(
                "",
                "authentication_failed",
                "authentication failed: unknown or rotated token",
                source,
                claimed=False,
            )
        assert record is not None
        if not record.authentic:
            self._fail(
                record.user_id,
                "forged_identity",
                f"identity {record.user_id!r} was changed outside toolgate",
                source,
                claimed=False,
            )
        if record.status != "active":
            self._fail(
                record.user_id,
                "revoked",
                f"identity {record.user_id!r} has been revoked",
                source,
                claimed=False,
            )
        return principal_of(record)

    @property
    def throttle(self) -> SignInThrottle:
        """Failed sign-ins of this store: throttled, and audited as counted events."""
        return SignInThrottle(self.store, self.auditor, self.sign_in_limits)

    def active(self, user_id: str, tenant_id: str) -> Principal | None:
        """The principal when ``user_id`` is an authentic, active identity of ``tenant_id`` (no token)."""
        return active_in(self.store.identities.get(user_id), tenant_id)

    def reviewer_for(self, user_id: str, tenant_id: str) -> Principal | None:
        """The principal when ``user_id`` is an authentic, active identity that reviews for
        ``tenant_id`` (its own tenant, or one the operator granted it as staff)."""
        return reviewer_in(self.store.identities.get(user_id), tenant_id)

    def read(self, user_ids: Iterable[str]) -> IdentitySnapshot:
        """The identities of ``user_ids`` as the store holds them now, read in one statement, to
        ask `IdentitySnapshot.active` and `IdentitySnapshot.reviewer_for` of several people."""
        return IdentitySnapshot(self.store.identities.get_many(list(user_ids)))

    def is_empty(self) -> bool:
        """True before the first identity exists (the only time a file may seed without an admin)."""
        return not self.store.identities.list()

    # ---- administration ----------------------------------------------------------------

    def add(self, principal: Principal, *, by: Principal | None, token: str | None = None) -> str | None:
        """Add ``principal`` with a new token (returned once); None when the user id exists.

        ``by`` is the authenticated administrator; None is the trusted bootstrap (a seed file on an
        empty store, or the embedding application itself). Staff review of a further tenant
        (``principal.review_tenants``) is granted by the bootstrap, or by an administrator who
        reviews for that tenant themselves (a staff administrator): a tenant's own administrator
        cannot hand out review of another tenant.
        """
        self._authorize(by, principal.tenant_id, "add")
        for tenant_id in sorted(principal.review_tenants):
            if by is not None and tenant_id not in by.review_tenants:
                self._refuse(
                    by.user_id, "cross_tenant", f"{by.user_id!r} may not grant review of tenant {tenant_id!r}"
                )
        if by is not None and ALL_TENANTS_AUDITOR_ROLE in principal.roles - by.roles:
            self._refuse(
                by.user_id, "cross_tenant", f"{by.user_id!r} may not grant {ALL_TENANTS_AUDITOR_ROLE}"
            )
        issued = token or new_token()
        record = IdentityRecord(
            user_id=principal.user_id,
            tenant_id=principal.tenant_id,
            roles=tuple(sorted(principal.roles)),
            scopes=tuple(sorted(principal.scopes)),
            display_name=principal.display_name,
            token_hash=self.store.identities.token_hash(issued),
            review_tenants=tuple(sorted(principal.review_tenants)),
        )
        if self.store.identities.add(record) is None:
            return None
        self._record(
            "identity.added",
            by,
            record,
            roles=sorted(principal.roles),
            scopes=sorted(principal.scopes),
            review_tenants=sorted(principal.review_tenants),
        )
        return issued

    def revoke(self, user_id: str, *, by: Principal | None) -> IdentityRecord:
        """Revoke ``user_id``: it can no longer act, and its pending decisions stop counting."""
        self._authorize_on(by, user_id, "revoke")
        record = self.store.identities.change(user_id, status="revoked")
        self._record("identity.revoked", by, record)
        return record

    def rotate_token(self, user_id: str, *, by: Principal | None) -> str:
        """Issue a new token for ``user_id`` (returned once); the old one stops working at once."""
        self._widening(by, self._authorize_on(by, user_id, "rotate"), "rotate the token of", token=True)
        issued = new_token()
        record = self.store.identities.change(user_id, token_hash=self.store.identities.token_hash(issued))
        self._record("identity.token_rotated", by, record)
        return issued

    def change_roles(
        self, user_id: str, *, roles: frozenset[str], scopes: frozenset[str] | None, by: Principal | None
    ) -> IdentityRecord:
        """Replace the roles (and, when given, the scopes) of ``user_id``; audited with the
        administrator, the roles and scopes before and after. Granting ``auditor:all`` needs a holder
        of it, as in `add`."""
        before = self._authorize_on(by, user_id, "change roles of")
        if roles - set(before.roles):
            self._widening(by, before, "grant roles to")
        if by is not None and ALL_TENANTS_AUDITOR_ROLE in roles - by.roles:
            self._refuse(
                by.user_id, "cross_tenant", f"{by.user_id!r} may not grant {ALL_TENANTS_AUDITOR_ROLE}"
            )
        record = self.store.identities.change(
            user_id, roles=sorted(roles), scopes=None if scopes is None else sorted(scopes)
        )
        self._record(
            "identity.roles_changed",
            by,
            record,
            roles_before=list(before.roles),
            roles=list(record.roles),
            scopes_before=list(before.scopes),
            scopes=list(record.scopes),
        )
        return record

    def import_file(self, path: Path, *, by: Principal | None) -> list[tuple[str, str | None]]:
        """Add every identity of a seed file; ``(user_id, token or None if it existed)`` each."""
        return [(p.user_id, self.add(p, by=by)) for p in load_seed_file(path)]

    def visible_to(self, by: Principal) -> list[IdentityRecord]:
        """The identities an administrator may list: those of their own tenant."""
        self._authorize(by, by.tenant_id, "list")
        return self.store.identities.list([by.tenant_id])

    # ---- internals ---------------------------------------------------------------------

    def _authorize_on(self, by: Principal | None, user_id: str, action: str) -> IdentityRecord:
        """`_authorize` for acting on the identity ``user_id``, whose row it returns: the admin
        role is judged before the identity is looked up, so a person without it learns nothing
        of which user ids exist, and an identity that does not exist is a refusal like the
        others (audited)."""
        if by is not None and ADMIN_ROLE not in by.roles:
            self._authorize(by, by.tenant_id, action)  # refused: not_admin
        record = self.store.identities.get(user_id)
        if record is None:
            self._refuse(by.user_id if by else None, "unknown_identity", f"unknown identity {user_id!r}")
        assert record is not None
        self._authorize(by, record.tenant_id, action)
        return record

    def _widening(self, by: Principal | None, record: IdentityRecord, action: str, *, token: bool = False) -> None:
        """Refuse ``by`` widening what someone may do beyond their tenant (roles added to a staff
        reviewer, or a new ``token`` shown to ``by``) unless ``by`` could grant it, as `add`
        demands: reviewing for each of their further tenants (their roles and their token carry
        that review), and, for a token, holding ``auditor:all`` when they hold it."""
        if by is None:
            return
        beyond = sorted(set(record.review_tenants) - by.review_tenants)
        if beyond:
            self._refuse(
                by.user_id,
                "cross_tenant",
                f"{by.user_id!r} may not {action} {record.user_id!r}, who reviews for tenant {beyond[0]!r}",
            )
        if token and ALL_TENANTS_AUDITOR_ROLE in set(record.roles) - by.roles:
            self._refuse(
                by.user_id,
                "cross_tenant",
                f"{by.user_id!r} may not {action} {record.user_id!r}, who holds {ALL_TENANTS_AUDITOR_ROLE}",
            )

    def _authorize(self, by: Principal | None, tenant_id: str, action: str) -> None:
        if by is None:
            return
        if ADMIN_ROLE not in by.roles:
            self._refuse(
                by.user_id, "not_admin", f"{by.user_id!r} may not {action} identities (needs role admin)"
            )
        if by.tenant_id != tenant_id:
            self._refuse(by.user_id, "cross_tenant", f"{by.user_id!r} administers another tenant")

    def _fail(
        self,
        user_id: str,
        code: str,
        message: str,
        source: str | None,
        *,
        claimed: bool = True,
        proven: bool = False,
    ) -> None:
        """Refuse one sign-in: counted (and audited when the count writes a row) by the throttle.

        ``claimed``: ``user_id`` is only the name the caller gave, which anyone can give: it is
        counted and recorded as claimed, and is the event's actor only when the token presented
        was theirs (``proven``); otherwise ``user_id`` is the person the token belongs to."""
        self.throttle.failed(
            code,
            source=source,
            identity=user_id if claimed else None,
            user_id=user_id if proven or not claimed else None,
        )
        raise IdentityError(message, code=code)

    def _refuse(self, user_id: str | None, code: str, message: str) -> None:
        if self.auditor is not None and not self.store.read_only:
            self.auditor.record("identity.refused", "refused", user_id=user_id, code=code)
        raise IdentityError(message, code=code)

    def _record(self, event: str, by: Principal | None, record: IdentityRecord, **detail: Any) -> None:
        if self.auditor is None:
            return
        self.auditor.record(
            event,
            record.status,
            user_id=by.user_id if by else None,
            detail={"identity": self.auditor.actor(record.user_id), "tenant_id": record.tenant_id, **detail},
        )


def load_seed_file(path: Path) -> list[Principal]:
    """Parse an identities seed file, refusing unknown schema versions, duplicates and token fields.

    Format::

        {"schema_version": 1,
         "identities": [{"user_id": "rita", "tenant_id": "acme", "roles": ["support"],
                         "scopes": ["orders:read"], "display_name": "Rita (support)"}]}
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigurationError(f"identities file {path} does not exist") from exc
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"identities file {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise ConfigurationError(f"identities file {path}: unsupported schema_version")
    principals: dict[str, Principal] = {}
    for entry in data.get("identities", []):
        if not isinstance(entry, dict):
            raise ConfigurationError(f"identities file {path}: every identity must be an object")
        if {"token", "token_sha256", "token_hash"} & set(entry):
            raise ConfigurationError(
                f"identities file {path}: tokens are issued by toolgate, never read from a file"
            )
        try:
            principal = Principal.from_dict(entry)
        except (KeyError, ValueError) as exc:
            raise ConfigurationError(f"identities file {path}: {exc}") from exc
        if principal.user_id in principals:
            raise ConfigurationError(f"identities file {path}: duplicate user {principal.user_id!r}")
        principals[principal.user_id] = principal
    return list(principals.values())


__all__ = [
    "ADMIN_ROLE",
    "ALL_TENANTS_AUDITOR_ROLE",
    "AUDITOR_ROLE",
    "SCHEMA_VERSION",
    "IdentityDirectory",
    "IdentitySnapshot",
    "active_in",
    "load_seed_file",
    "new_token",
    "principal_of",
    "reviewer_in",
]
