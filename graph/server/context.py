"""The run context on the LangGraph server, rebuilt from what the server itself authenticated.

On the server, ``context`` is whatever the client sent. Nothing in it is trusted for authority:
the acting principal comes from the auth handler (`toolgate.graph.server.auth`, through
``runtime.server_info.user``) and is re-read from the identity store; the client may *lower*
budgets and limits, never raise them; leases, worker ids, waits and batch settings are the
server's own; the user's forwarded credentials come from the authenticated request (the auth
handler takes them from ``X-Toolgate-Credential-*`` headers and seals them), never from
``context`` or state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from toolgate.canonical import canonical_json
from toolgate.graph.context import Context
from toolgate.graph.delivery.delegation import DelegationRefused, open_text, seal_text
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.store.keys import Keyring

CLIENT_MAY_LOWER = (
    "max_model_turns",
    "max_tool_calls",
    "max_calls_per_turn",
    "deadline_s",
    "max_validation_retries",
    "max_identical_calls",
)
"""Budgets a client may tighten for its own run (the smaller of the client's and the server's)."""
CLIENT_MAY_SET = ("request_id", "trace_id")
"""Correlation ids: no authority, useful to join a client's logs with the audit trail."""


FORWARDED_PURPOSE = "toolgate/forwarded-credentials"
"""Associated data of sealed forwarded credentials: no other sealed text of the store opens as one."""


def _forwarded_bound(user_id: str, tenant_id: str) -> bytes:
    return canonical_json({"purpose": FORWARDED_PURPOSE, "tenant_id": tenant_id, "user_id": user_id}).encode()


def seal_forwarded(keys: Keyring, credentials: Mapping[str, str], user_id: str, tenant_id: str) -> str:
    """``credentials`` of ``user_id`` sealed for the graph ("" when there are none).

    The auth handler hands them to the graph inside the authenticated user, the only per-request
    channel the LangGraph server has, and the server keeps that user in each run's record
    (``kwargs.config.configurable.langgraph_auth_user``), which whoever may read the thread reads:
    a reviewer listing the runs of a customer's thread read the customer's CRM session there. So
    they travel sealed (AES-GCM under the store's sealing key, `toolgate.graph.delivery.delegation`),
    bound to their person; `server_context` opens them."""
    return seal_text(keys, credentials, _forwarded_bound(user_id, tenant_id)) if credentials else ""


def open_forwarded(keys: Keyring, sealed: str, user_id: str, tenant_id: str) -> dict[str, str]:
    """The credentials ``sealed`` holds for ``user_id``; none when it is empty or does not open
    for them (another person's, or sealed under another secret)."""
    if not sealed:
        return {}
    try:
        return open_text(keys, sealed, _forwarded_bound(user_id, tenant_id))
    except DelegationRefused:
        return {}


def _user_field(user: Any, name: str) -> Any:
    if isinstance(user, Mapping):
        return user.get(name)
    try:
        return user[name]
    except (KeyError, TypeError):
        return getattr(user, name, None)


def acting_principal(user: Any, directory: IdentityDirectory) -> Principal | None:
    """The authenticated user of the request, as the identity store records them now (or None)."""
    if user is None:
        return None
    identity = _user_field(user, "identity")
    tenant = _user_field(user, "tenant_id")
    if not identity or not tenant:
        return None
    return directory.active(str(identity), str(tenant))


def server_context(
    client: Context | None, user: Any, directory: IdentityDirectory, keys: Keyring | None = None
) -> Context:
    """The context a server run may use: the server's defaults, the authenticated principal, the
    client's correlation ids and any budget the client lowered.

    The user's forwarded credentials come sealed from the auth handler (opened with the store's
    ``keys``, for the user they were sealed for: `seal_forwarded`); a user made in process may
    carry them as a mapping."""
    trusted = Context()
    principal = acting_principal(user, directory)
    changes: dict[str, Any] = {"principal": principal}
    credentials = _user_field(user, "credentials") if user is not None else None
    if isinstance(credentials, str) and keys is not None and principal is not None:
        changes["credentials"] = open_forwarded(keys, credentials, principal.user_id, principal.tenant_id)
    else:
        changes["credentials"] = dict(credentials) if isinstance(credentials, Mapping) else {}
    if client is not None:
        for name in CLIENT_MAY_SET:
            value = getattr(client, name)
            if isinstance(value, str) and value and len(value) <= 128:
                changes[name] = value
        for name in CLIENT_MAY_LOWER:
            value, limit = getattr(client, name), getattr(trusted, name)
            if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < limit:
                changes[name] = type(limit)(value)
    return dataclasses.replace(trusted, **changes)


__all__ = [
    "CLIENT_MAY_LOWER",
    "CLIENT_MAY_SET",
    "FORWARDED_PURPOSE",
    "acting_principal",
    "open_forwarded",
    "seal_forwarded",
    "server_context",
]
