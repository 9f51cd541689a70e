"""The LangGraph server's auth handler (``langgraph.json`` -> ``auth.path``): who is calling, and what
they may touch.

Authentication: ``Authorization: Bearer <token>`` (or ``X-Api-Key: <token>``, as clients built on
the LangGraph SDK's ``apiKey`` send it) names one person of the identity store
(`IdentityDirectory.authenticate_bearer`; tokens are kept only as keyed hashes). The user handed
to the graph carries that person's user id, tenant, roles and scopes, plus their own forwarded
credentials from ``X-Toolgate-Credential-<name>`` headers (never from ``context`` or state),
sealed: the server keeps the user in every run's record, which the thread's reviewers read
(`toolgate.graph.server.context.seal_forwarded`).

Authorization, on every thread and run:

* threads are owned: created with the caller as ``owner`` and their ``tenant`` in metadata
  (whatever the client sent there); the owner reads, runs, streams and cancels them (and is the
  only one a create naming an existing thread answers);
* reviewers (people holding a role that approves some tool of the release) may read their
  tenant's threads and *resume* them, with decisions or as a wake-up, in any shape LangChain's
  clients send it (`is_resume_only`), from the thread's latest checkpoint (`at_latest_checkpoint`);
  nothing else: a new turn in someone else's thread is refused;
* nobody names a principal in ``context`` (the principal is the authenticated caller);
* state updates (``update_state``) are refused unless the caller is an ``operator``, and even
  then state carries no authority (the graph seals it and refuses a rewritten thread); nobody
  changes a thread's ``owner`` or ``tenant`` metadata, which every check here filters on;
* assistants are read-only for clients; the store API (long-term memory) is not used and closed.

Every refusal is audited and answers with a stable code in its message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx
from langgraph_sdk import Auth

from toolgate.errors import IdentityError
from toolgate.graph.server.client_address import client_address
from toolgate.graph.server.context import seal_forwarded
from toolgate.graph.server.process import server_parts
from toolgate.graph.worker.waker import langgraph_client

auth = Auth()

OPERATOR_ROLE = "operator"
"""May update thread state (for repairs); the graph still trusts nothing in it."""
OWNERSHIP_KEYS = frozenset({"owner", "tenant"})
"""Thread metadata the server sets at creation and every access check filters on; no update
changes it."""
CREDENTIAL_HEADER = "x-toolgate-credential-"
API_KEY_HEADER = "x-api-key"
"""Where the LangGraph SDK's ``apiKey`` travels; a toolgate token there counts as a bearer token."""


async def _refuse(
    status: int, code: str, message: str, user_id: str | None = None
) -> Auth.exceptions.HTTPException:
    """The exception to raise for a refusal, after auditing it (off the event loop)."""
    auditor = server_parts().gateway.auditor
    await asyncio.to_thread(
        auditor.record, "access.refused", "refused", user_id=user_id, code=code, detail={"reason": message}
    )
    return Auth.exceptions.HTTPException(status_code=status, detail=f"{code}: {message}")


def _reviewer_roles() -> frozenset[str]:
    """Roles that approve some tool of the loaded release."""
    return frozenset(role for spec in server_parts().registry.tools.values() for role in spec.approval.roles)


@auth.authenticate
async def authenticate(
    scope: Mapping[str, Any], authorization: str | None, headers: dict[bytes, bytes]
) -> dict[str, Any]:
    """The caller's identity from their bearer token (401 when missing, unknown, revoked or forged;
    also 401, with the code ``sign_in_throttled``, once the client's address has failed too often
    in a window, whatever it sends: `toolgate.policy.sign_in_throttle`. The runtime answers only
    401 or 403 from this handler, so the 429 with ``Retry-After`` comes from toolgate's own routes).

    Clients built on the LangGraph SDK's ``apiKey`` (agent-chat-ui's "API key" field, its API
    passthrough) carry the token as ``X-Api-Key`` instead: it is read only when no Authorization
    header came, and proves exactly what a bearer token proves."""
    scheme, _, token = (authorization or "").partition(" ")
    api_key = next(
        (
            v.decode("latin-1").strip()
            for k, v in headers.items()
            if k.decode("latin-1").lower() == API_KEY_HEADER
        ),
        "",
    )
    if not (authorization or "").strip() and api_key:
        scheme, token = "bearer", api_key
    directory = server_parts().gateway.directory
    source = client_address(scope)  # the connection's, or a trusted proxy's client
    try:
        if scheme.lower() != "bearer" or not token.strip():
            # counted like a wrong token (an empty header is a guess too)
            await asyncio.to_thread(directory.authenticate_bearer, None, source=source)
        principal = await asyncio.to_thread(directory.authenticate_bearer, token.strip(), source=source)
    except IdentityError as exc:
        message = (
            "send Authorization: Bearer <token> (or X-Api-Key: <token>)"
            if exc.code == "missing_token"
            else exc
        )
        raise Auth.exceptions.HTTPException(status_code=401, detail=f"{exc.code}: {message}") from None
    credentials = {
        key.decode("latin-1")[len(CREDENTIAL_HEADER) :].replace("-", "_"): value.decode("latin-1")
        for key, value in headers.items()
        if key.decode("latin-1").lower().startswith(CREDENTIAL_HEADER)
    }
    keys = server_parts().gateway.store.keys
    sealed = seal_forwarded(keys, credentials, principal.user_id, principal.tenant_id)  # the run record keeps it
    return {
        "identity": principal.user_id,
        "display_name": principal.display_name or principal.user_id,
        "permissions": sorted(principal.roles),
        "tenant_id": principal.tenant_id,
        "roles": sorted(principal.roles),
        "scopes": sorted(principal.scopes),
        "credentials": sealed,
    }


def _user(ctx: Auth.types.AuthContext) -> tuple[str, str, frozenset[str]]:
    user = ctx.user
    return str(user.identity), str(user["tenant_id"]), frozenset(user["roles"])


def _thread_filter(ctx: Auth.types.AuthContext) -> dict[str, str]:
    """Owners see their threads; reviewers their tenant's."""
    identity, tenant, roles = _user(ctx)
    if roles & _reviewer_roles():
        return {"tenant": tenant}
    return {"owner": identity, "tenant": tenant}


@auth.on.threads.create
async def on_thread_create(ctx: Auth.types.AuthContext, value: Auth.types.ThreadsCreate) -> dict[str, str]:
    """A new thread belongs to its creator, in their tenant (client metadata cannot say otherwise).

    A create naming an existing thread (``thread_id`` with ``if_exists: "do_nothing"``) answers
    that thread, its whole state included: the caller's own filter is returned, which the runtime
    checks against the existing thread's metadata, so someone else's thread is a 409 and nothing
    of it is answered (without it, anyone who knew a thread's id read it).

    A copy (``POST /threads/{id}/copy``) comes here without metadata: the runtime gives the copy
    the *source's* metadata, its owner included, whatever this handler sets. Its read check lets a
    reviewer read their tenant's threads, so a reviewer's copy would be a new thread owned by a
    customer, made by someone else: refused (``thread_copy_refused``). Anyone else can only read,
    so only copy, a thread of their own."""
    identity, tenant, roles = _user(ctx)
    if "metadata" not in value and roles & _reviewer_roles():
        raise await _refuse(
            403,
            "thread_copy_refused",
            "a reviewer may not copy threads: a copy keeps the source thread's owner",
            identity,
        )
    metadata = value.setdefault("metadata", {})
    metadata["owner"], metadata["tenant"] = identity, tenant
    return {"owner": identity, "tenant": tenant}


@auth.on.threads.read
async def on_thread_read(ctx: Auth.types.AuthContext, value: Auth.types.ThreadsRead) -> dict[str, str]:
    """Read, stream and join: the caller's own threads, or their tenant's for reviewers."""
    return _thread_filter(ctx)


@auth.on.threads.search
async def on_thread_search(ctx: Auth.types.AuthContext, value: Auth.types.ThreadsSearch) -> dict[str, str]:
    """Search finds the same threads a read may open."""
    return _thread_filter(ctx)


@auth.on.threads.create_run
async def on_run_create(ctx: Auth.types.AuthContext, value: Auth.types.RunsCreate) -> dict[str, str]:
    """Runs: the owner runs their thread; a reviewer of the tenant may only resume it."""
    identity, tenant, roles = _user(ctx)
    kwargs = value.get("kwargs") or {}
    context = kwargs.get("context") or {}
    configurable = (kwargs.get("config") or {}).get("configurable") or {}
    if (isinstance(context, dict) and "principal" in context) or "principal" in configurable:
        raise await _refuse(
            403,
            "principal_in_context",
            "the principal is the authenticated caller; remove 'principal' from context",
            identity,
        )
    metadata = value.setdefault("metadata", {})
    metadata["owner"], metadata["tenant"] = identity, tenant  # used when the run creates its thread
    if (
        is_resume_only(kwargs)
        and roles & _reviewer_roles()
        and await at_latest_checkpoint(value.get("thread_id"), configurable)
    ):
        return {"tenant": tenant}
    return {"owner": identity, "tenant": tenant}


async def at_latest_checkpoint(thread_id: Any, configurable: Mapping[str, Any]) -> bool:
    """True when a run starts from the thread's latest checkpoint: it names none, or names that one
    (agent-chat-ui sends the head checkpoint it fetched with every resume). A run naming an earlier
    checkpoint (``checkpoint_id`` or ``checkpoint``, both in ``config.configurable``) forks the
    thread there and runs it again from that step, the owner's turn, its model request and its
    reads included: that is a new turn, never a reviewer's resume. The head is read through the
    server's own loopback client (`toolgate.graph.worker.waker.langgraph_client`)."""
    if not isinstance(configurable, Mapping) or configurable.get("checkpoint_map") or configurable.get(
        "checkpoint_ns"
    ):
        return False
    named = configurable.get("checkpoint_id")
    if not named:
        return True
    if thread_id is None:
        return False
    try:
        head = await langgraph_client().threads.get_state(str(thread_id))
    except httpx.HTTPError:  # no such thread, or the loopback failed: not shown to be the head
        return False
    return bool((head.get("checkpoint") or {}).get("checkpoint_id") == str(named))


def is_resume_only(kwargs: Mapping[str, Any]) -> bool:
    """True when a run only answers the thread's interrupt: ``command.resume`` with no ``update``
    and no ``goto`` (a step of the thread's own), and no input of its own.

    LangChain's clients send the same answer three ways: the Python SDK and Studio leave ``input``
    out (``None``), and agent-chat-ui's ``useStream().submit({}, {command: {resume}})`` sends
    ``input: {}``. An empty input carries nothing, so all three are the same resume; input with
    anything in it (a new turn's messages) is not a resume, whatever command rides along."""
    command = kwargs.get("command") or {}
    inp = kwargs.get("input")
    return (
        isinstance(command, Mapping)
        and "resume" in command
        and not command.get("update")
        and not command.get("goto")
        and (inp is None or (isinstance(inp, Mapping) and not inp))
    )


@auth.on.threads.update
async def on_thread_update(ctx: Auth.types.AuthContext, value: Auth.types.ThreadsUpdate) -> dict[str, str]:
    """Cancelling one's own run is fine; changing a thread's state or metadata is for operators.

    Never its ``owner`` or ``tenant``: those are what every read and run check filters on, set
    when the thread is created (an operator rewriting them handed a customer's thread to another
    person, who then read it, or took it to delete it): refused ``thread_owner_refused``."""
    identity, tenant, roles = _user(ctx)
    if value.get("action") in ("interrupt", "rollback"):
        return {"owner": identity, "tenant": tenant}
    if OPERATOR_ROLE not in roles:
        raise await _refuse(
            403,
            "state_update_refused",
            "thread state is written by the gateway only; updates need the operator role",
            identity,
        )
    if OWNERSHIP_KEYS & set(value.get("metadata") or {}):
        raise await _refuse(
            403,
            "thread_owner_refused",
            "a thread's owner and tenant are set when it is created and never change",
            identity,
        )
    return {"tenant": tenant}


@auth.on.threads.delete
async def on_thread_delete(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Only the owner deletes a thread (its evidence stays in the store)."""
    identity, tenant, _ = _user(ctx)
    return {"owner": identity, "tenant": tenant}


@auth.on.assistants.read
async def on_assistant_read(ctx: Auth.types.AuthContext, value: Auth.types.AssistantsRead) -> None:
    """Every authenticated caller may see the toolgate assistant."""


@auth.on.assistants.search
async def on_assistant_search(ctx: Auth.types.AuthContext, value: Auth.types.AssistantsSearch) -> None:
    """And find it."""


@auth.on
async def deny_everything_else(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """Assistants' changes, crons, the store API and anything new: refused by default."""
    identity, _, _ = _user(ctx)
    raise await _refuse(
        403, "not_allowed", f"{ctx.resource}.{ctx.action} is not available to clients", identity
    )


__all__ = ["at_latest_checkpoint", "auth", "is_resume_only"]
