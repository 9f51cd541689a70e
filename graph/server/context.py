"""The run context on the LangGraph server, rebuilt from what the server itself authenticated.

On the server, ``context`` is whatever the client sent. Nothing in it is trusted for authority:
the acting principal comes from the auth handler (`toolgate.graph.server.auth`, through
``runtime.server_info.user``) and is re-read from the identity store; the client may *lower*
budgets and limits, never raise them; leases, worker ids, waits and batch settings are the
server's own; the user's forwarded credentials come from the authenticated request (the auth
handler takes them from ``X-Toolgate-Credential-*`` headers), never from ``context`` or state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from toolgate.graph.context import Context
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal

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


def server_context(client: Context | None, user: Any, directory: IdentityDirectory) -> Context:
    """The context a server run may use: the server's defaults, the authenticated principal, the
    client's correlation ids and any budget the client lowered."""
    trusted = Context()
    changes: dict[str, Any] = {"principal": acting_principal(user, directory)}
    credentials = _user_field(user, "credentials") if user is not None else None
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


__all__ = ["CLIENT_MAY_LOWER", "CLIENT_MAY_SET", "acting_principal", "server_context"]
