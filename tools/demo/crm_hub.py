"""Globex's own CRM: the demo's per-tenant override of ``crm_lookup_contact``.

Acme looks contacts up in the shared CRM (`toolgate.tools.demo.crm`) with each user's own CRM
session. Globex runs a different CRM, "HubCRM", that the integration reaches with an
organisation-level service credential instead: a short-lived token for audience ``hubcrm``,
scope ``contacts:read``, bound to tenant ``globex`` (`toolgate.tools.credentials.ServiceScope`).
The release resolves the tool name to this implementation for globex only
(`toolgate.tools.tenant_overrides`), transparently to the model: the same arguments, the same
result, the same approval class.

`HubCrmApi` is the fake downstream with records of its own. It accepts only a valid credential for
its audience bound to the tenant asked about, and shows only that tenant's contacts, so a
credential issued for one tenant is refused for another even though both come from one signer.
"""

from __future__ import annotations

import secrets
from dataclasses import InitVar, dataclass, field
from typing import Any

from toolgate.clock import iso, utcnow
from toolgate.errors import ToolExecutionError
from toolgate.store import Migration, Store
from toolgate.store.records_scope import RecordsScope, ServiceRecords
from toolgate.tools.credentials import HmacCredentialProvider, ServiceScope
from toolgate.tools.demo.crm import LookupContactArgs, LookupContactResult
from toolgate.tools.demo.service import DemoService, Seed, records_of
from toolgate.tools.spec import HandlerContext
from toolgate.tools.tenant_overrides import TenantOverride

_SCHEMA = """
CREATE TABLE sor_hubcrm_contacts (
    contact_id TEXT NOT NULL, tenant_id TEXT NOT NULL, region TEXT NOT NULL, name TEXT NOT NULL,
    email TEXT NOT NULL, PRIMARY KEY (tenant_id, contact_id)
);
CREATE TABLE sor_hubcrm_requests (
    request_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, subject TEXT NOT NULL, contact_id TEXT NOT NULL,
    outcome TEXT NOT NULL, received_at TEXT NOT NULL
)"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(name="demo HubCRM: contacts, requests", sqlite=_SCHEMA, postgres=_SCHEMA),
)

AUDIENCE = "hubcrm"
"""Who HubCRM's credentials are for."""
SCOPE = ServiceScope(AUDIENCE, frozenset({"contacts:read"}))
"""What globex's lookup may do there (bound to globex when the override is applied)."""
TENANT = "globex"
"""The tenant that runs HubCRM."""

SEED_CONTACTS = (("C-200", "globex", "emea", "Gina Globex", "gina@globex.example"),)

HUB_API_SCOPE = RecordsScope(
    "demo_hubcrm_api",
    frozenset({"sor_hubcrm_contacts", "sor_hubcrm_requests"}),
    read_appends=frozenset({"sor_hubcrm_requests"}),  # its request log, kept when a read asks too
)
"""HubCRM's own records: its contacts and the requests it received."""


@dataclass
class HubCrmApi:
    """The fake HubCRM. It knows callers only by the service credential they present."""

    store: InitVar[Store | None]
    verifier: HmacCredentialProvider | None = field(default=None, repr=False)
    """Checks a presented credential (the signer's keys: the demo shares the store's secret)."""
    records: ServiceRecords = field(init=False, repr=False, compare=False)

    def __post_init__(self, store: Store | None) -> None:
        self.records = records_of(store, HUB_API_SCOPE)

    def get_contact(self, token: str, tenant_id: str, contact_id: str) -> dict[str, Any]:
        """``GET /contacts/{id}`` for ``tenant_id`` with ``Authorization: Bearer <service token>``."""
        outcome, subject, contact = "ok", "-", None
        try:
            if self.verifier is None:
                raise ToolExecutionError("credential_refused", "HubCRM has no key to check credentials with")
            claims = self.verifier.verify(token, AUDIENCE, tenant=tenant_id)
            subject = str(claims.get("sub", "-"))
            if "contacts:read" not in str(claims.get("scope", "")).split():
                raise ToolExecutionError("credential_refused", "the HubCRM credential may not read contacts")
        except ToolExecutionError:
            outcome = "unauthenticated"
        with self.records.transaction() as tx:
            if outcome == "ok":
                contact = tx.one(
                    "SELECT contact_id, name, email, region FROM sor_hubcrm_contacts"
                    " WHERE tenant_id = ? AND contact_id = ?",
                    (tenant_id, contact_id),
                )
                outcome = "ok" if contact is not None else "not_found"
            tx.execute(
                "INSERT INTO sor_hubcrm_requests VALUES (?, ?, ?, ?, ?, ?)",
                ("hreq_" + secrets.token_hex(8), tenant_id, subject, contact_id, outcome, iso(utcnow())),
            )
        if outcome == "unauthenticated":
            raise ToolExecutionError("credential_refused", "HubCRM refused the integration's credential")
        if contact is None:
            raise ToolExecutionError("caller_error", f"no contact {contact_id} in HubCRM")
        return dict(contact)


@dataclass
class HubCrmClient(DemoService):
    """Our HubCRM integration: presents the call's service credential, never a user's token."""

    api: HubCrmApi | None = None

    component = "demo_hubcrm"
    migrations = MIGRATIONS
    seeds = (
        Seed("sor_hubcrm_contacts", ("contact_id", "tenant_id", "region", "name", "email"), SEED_CONTACTS),
    )
    countable = frozenset({"sor_hubcrm_requests"})
    tables = frozenset()
    reads = frozenset({"sor_hubcrm_requests"})
    """Our side owns nothing: HubCRM writes its request log; we only count it."""

    def scopes(self) -> list[RecordsScope]:
        """This client's records and HubCRM's own."""
        return [self.scope(), *([self.api.records.scope] if self.api is not None else [])]

    def lookup(self, ctx: HandlerContext, contact_id: str) -> dict[str, Any]:
        """Look a contact up with the call's service credential (refused without one)."""
        credential = ctx.service_credential
        if credential is None or self.api is None:
            raise ToolExecutionError("credential_refused", "no HubCRM credential was issued for this call")
        return self.api.get_contact(credential.token, ctx.tenant_id, contact_id)


def hubcrm_overrides(client: HubCrmClient) -> list[TenantOverride]:
    """Globex's ``crm_lookup_contact``, bound to ``client``."""

    def crm_lookup_contact_hubcrm(args: LookupContactArgs, ctx: HandlerContext) -> LookupContactResult:
        return LookupContactResult.model_validate(client.lookup(ctx, args.contact_id))

    return [
        TenantOverride(
            tenant_id=TENANT,
            tool="crm_lookup_contact",
            handler=crm_lookup_contact_hubcrm,
            handler_revision="crm-lookup-contact/hubcrm-1.0.0",
            service_credential=SCOPE,  # the organisation's HubCRM integration, never a user's CRM token
        )
    ]


__all__ = ["AUDIENCE", "HUB_API_SCOPE", "SCOPE", "TENANT", "HubCrmApi", "HubCrmClient", "hubcrm_overrides"]
