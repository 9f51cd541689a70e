"""Who may read the audit log, what they see, and the record that they read it.

The audit log is evidence about every tenant, so reading it is a privilege: the reader
authenticates like every other person on the CLI (``--as`` names them, ``TOOLGATE_TOKEN`` proves
it; the token alone also identifies them), through the same identity directory as the server's
doors. Who may read what is `toolgate.policy.audit_readers` (the rule every door shares): role
``auditor`` reads the events of its own tenant; role ``auditor:all`` (granted only by the
bootstrap or by an administrator who holds it) reads every tenant's, and the events that belong to
none (process-level ones). Every read, and every refused read, appends an
``audit.read`` event to the same chain, so the log shows who looked at it.
"""

from __future__ import annotations

from typing import Any

from toolgate.cli.common import signed_in
from toolgate.config import Settings
from toolgate.errors import ConfigurationError, IdentityError
from toolgate.graph.bootstrap import App, open_app
from toolgate.policy.audit_readers import ALL_TENANTS, AuditScope, audit_scope, own_tenant_scope
from toolgate.policy.identities import AUDITOR_ROLE
from toolgate.store.factory import open_store


def open_for_audit() -> App:
    """The app for an audit read: refused without the store's secret or on a missing store (nothing
    is created), then opened for writing, because the read itself is recorded.

    A secret that verifies none of the store's identities is another store's (or a guess): that is
    refused before anything is written, because an event appended under the wrong secret would
    break the chain for everyone (so this one refusal is not audited)."""
    settings = Settings.from_env()
    settings.require_store()
    key = settings.audit_key(create=False)
    probe = open_store(settings.database_url, settings.data_dir, key=key, read_only=True)
    try:
        if not any(record.authentic for record in probe.identities.list()):
            raise ConfigurationError(
                "the store secret verifies no identity of this store (wrong TOOLGATE_AUDIT_KEY, "
                "or nobody to read as); nothing was read or written"
            )
    finally:
        probe.close()
    return open_app(settings)


def authenticate_auditor(application: App, as_user: str | None, command: str) -> AuditScope:
    """The caller's audit scope, or `IdentityError` (audited) for a missing, wrong or revoked
    credential and for a person without an auditor role."""
    principal = signed_in(application, as_user, f"audit {command}", "audit reads need a credential")
    scope = audit_scope(principal)
    if scope is None:
        record_read(application, own_tenant_scope(principal), command, result="refused", code="not_auditor")
        raise IdentityError(
            f"{principal.user_id!r} may not read the audit log (needs role {AUDITOR_ROLE})",
            code="not_auditor",
        )
    return scope


def record_read(
    application: App,
    scope: AuditScope,
    command: str,
    *,
    result: str = "read",
    code: str | None = None,
    **facts: Any,
) -> None:
    """Append the ``audit.read`` event of one read (or refused read) of the audit log."""
    application.gateway.auditor.record(
        "audit.read",
        result,
        user_id=scope.principal.user_id,
        code=code,
        tenant_id=scope.principal.tenant_id,
        detail={"command": f"audit {command}", "scope": scope.label, **facts},
    )


__all__ = [
    "ALL_TENANTS",
    "AuditScope",
    "authenticate_auditor",
    "open_for_audit",
    "record_read",
]
