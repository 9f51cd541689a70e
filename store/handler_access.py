"""What a handler call may do to the databases: the access scope trusted code sets around each call.

A tool declared read-only must not change anything, whatever its handler reaches for. Trusted
code (`toolgate.tools.loaded_code.start`) runs every handler call, and every status check,
with a `HandlerAccess` as the worker thread's `HANDLER_ACCESS`; the records capability and the
store consult it:

- `toolgate.store.records_scope.ServiceRecords`: in a call that may not write (a read, a status
  check, a job-status check), a unit of work asked with ``write=True`` opens read-only, exactly
  as ``write=False`` does, so the *database engine* refuses every write statement in it
  (SQLite: the connection's authorizer; PostgreSQL: ``BEGIN READ ONLY``, which the handler's
  statements cannot undo: `toolgate.store._records_postgres`) and the
  refusal names the table the handler wrote to. A read tool's handler that only reads in such a
  unit of work still works; one that writes changes nothing. Only an approved write's handler
  (``writes=True``) gets units of work that write its own tables. The one exception is declared
  by the service, never the handler: tables its reads append to by design
  (`toolgate.store.records_scope.RecordsScope.read_appends`: a downstream's request log, a
  stored preview), which a read call may INSERT into and nothing more (SQLite: the authorizer
  allows exactly those inserts; PostgreSQL: a second login role of the service with SELECT on
  its tables and INSERT on those only).
- The gateway `toolgate.store.base.Store`: refused entirely inside any handler call, read or
  write (`refuse_store`: `CapabilityDenied` ``store``), and so is building a records capability
  from it (`toolgate.store.service_records.open_service_records`: trusted wiring, done before
  any call). Handlers are never given the Store (README): one that holds it anyway reads every
  tenant's proposals, identities and token hashes, and writes the audit log. Refusing reads too
  closes that leak; a write-only refusal would leave it open. No gateway code opens a store
  transaction in the handler's thread: service credentials and egress clients are built before
  the call, the egress audit hook reads no database, and lease renewal, late outcomes and audit
  appends run in the caller's thread or threads of their own, which do not carry the scope.

Every refusal is remembered on the `HandlerAccess` (`HandlerAccess.denials`), so the call fails
even when the handler swallowed the `CapabilityDenied`, and the caller audits each one as
``handler.capability_denied``.

No records unit of work of a handler call stays open longer than the call's timeout
(`HandlerAccess.timeout_s`; `toolgate.store.records_expiry`): a hung handler's Python thread
cannot be killed, but its transaction is ended, which would otherwise hold its rows' locks
(PostgreSQL) or the write lock of the whole file the gateway's own store shares (SQLite).

What this does not do: the scope is a context variable of the handler's thread. A handler that
starts threads of its own, resets the variable, opens the database file or a connection itself,
or reaches a connection's private attributes is not stopped by it (as with egress, the boundary
holds for what goes through the capabilities; on PostgreSQL the records role's privileges hold
for anything done with its credentials).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from toolgate.errors import CapabilityDenied


@dataclass(eq=False)
class HandlerAccess:
    """What one handler call may do to the databases, and what it was refused."""

    tool: str = ""
    """The tool whose handler (or status check) runs ("" when unnamed)."""
    writes: bool = False
    """True only for an approved write's handler: its records capability writes its own tables."""
    timeout_s: float | None = None
    """The call's timeout: how long one of its records units of work may stay open (None: the
    default bound, `toolgate.store.records_expiry.UNIT_TIMEOUT_S`)."""
    denials: list[CapabilityDenied] = field(default_factory=list)
    """Every refusal during the call, in order (the first fails the call)."""

    def note(self, denied: CapabilityDenied) -> CapabilityDenied:
        """Remember ``denied`` (a refusal raised during the call) and return it."""
        self.denials.append(denied)
        return denied


HANDLER_ACCESS: contextvars.ContextVar[HandlerAccess | None] = contextvars.ContextVar(
    "toolgate_handler_access", default=None
)
"""The running handler call's access (set around the call, in its worker thread; None outside)."""


@contextmanager
def handler_access(access: HandlerAccess) -> Iterator[HandlerAccess]:
    """Run the body as a handler call with ``access`` (trusted code only)."""
    token = HANDLER_ACCESS.set(access)
    try:
        yield access
    finally:
        HANDLER_ACCESS.reset(token)


UnitOfWork = Literal["write", "append", "read"]
"""What a records unit of work may do: write the service's tables, only append to the tables its
reads append to by design (`toolgate.store.records_scope.RecordsScope.read_appends`), or read."""


def unit_of_work(write: bool) -> UnitOfWork:
    """What a records unit of work asked with ``write`` may do here: inside a handler call that
    may not write, a write unit of work may only append to the scope's ``read_appends``."""
    if not write:
        return "read"
    access = HANDLER_ACCESS.get()
    return "write" if access is None or access.writes else "append"


@contextmanager
def outside_handler_call() -> Iterator[None]:
    """Run the body as trusted code of the harness around a handler, in the handler's thread
    (the hidden-write digest of tests and evaluations): no access scope applies to it. Not a
    boundary against the handler itself (see the module docstring)."""
    token = HANDLER_ACCESS.set(None)
    try:
        yield
    finally:
        HANDLER_ACCESS.reset(token)


def noted(denied: CapabilityDenied) -> CapabilityDenied:
    """``denied``, remembered by the running handler call, if any (so it fails even if swallowed)."""
    access = HANDLER_ACCESS.get()
    return denied if access is None else access.note(denied)


def refuse_store(what: str) -> None:
    """Raise `CapabilityDenied` (``store``) inside a handler call: the gateway's store, and
    capabilities built from it, are trusted code's, never a handler's."""
    access = HANDLER_ACCESS.get()
    if access is None:
        return
    tool = f"tool {access.tool!r}" if access.tool else "a handler"
    message = f"{tool} may not use the gateway's store ({what}): handlers get capabilities"
    raise access.note(CapabilityDenied("store", what, message))


__all__ = [
    "HANDLER_ACCESS",
    "HandlerAccess",
    "UnitOfWork",
    "handler_access",
    "noted",
    "outside_handler_call",
    "refuse_store",
    "unit_of_work",
]
