"""What ``toolgate release init`` writes into the release package itself: ``__init__.py``, the
system of record (``records.py``), the tools with their operator policy (``tools.py``), the
``Release`` value (``release.py``) and ``policy.json``.

These are the files toolgate loads to serve the release (its manifest pins their tools' code,
schemas and policy), so they are kept apart from the project around them
(`toolgate.scaffold.project`) and from the writing of both (`toolgate.scaffold.command`): a change here
changes what every new release serves. Each template is `string.Template` text over ``$name``
(the distribution) and ``$package`` (its Python package); a literal dollar sign is ``$$``.
"""

from __future__ import annotations

INIT = '''\
"""The $name tool release for toolgate."""
'''

RECORDS = '''\
"""The system of record of $name: support tickets, each owned by one customer of one tenant.

Kept in the toolgate store's database, in tables of its own (migrated by `setup`). Handlers never
get the store: `Tickets` holds a `ServiceRecords` capability that trusted wiring (`Tickets.on`,
called by the release's ``tools`` function) opens on the store, and the database engine confines
it to the two tables in `SCOPE` (SQLite: the connection's authorizer; PostgreSQL: a login role
with privileges on those tables only, created by `setup`). Proposals, approvals, operations,
identities and the audit log are out of its reach, and inside a read tool's call every unit of
work is read-only, whatever it asks for. Queries are fixed SQL with bound parameters, never text
a model wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolgate.errors import ToolExecutionError
from toolgate.store import Migration, Store
from toolgate.store.records_scope import RecordsScope, ServiceRecords
from toolgate.store.service_records import open_service_records, provision_service_records
from toolgate.tools import HandlerContext, ResourceStatus
from toolgate.tools.spec import ownership

_SCHEMA = """
CREATE TABLE ${package}_tickets (
    ticket_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    customer_id TEXT NOT NULL,
    title TEXT NOT NULL,
    status TEXT NOT NULL,
    resolution TEXT
);
CREATE TABLE ${package}_closures (
    idempotency_key TEXT PRIMARY KEY,
    ticket_id TEXT NOT NULL
)"""

MIGRATIONS = (Migration(name="tickets", sqlite=_SCHEMA, postgres=_SCHEMA),)

SCOPE = RecordsScope("$package", frozenset({"${package}_tickets", "${package}_closures"}))
"""Everything the handlers can reach: these two tables."""

SEED = (
    ("T-100", "acme", "ada", "Blender arrived broken"),
    ("T-101", "acme", "bob", "Invoice address is wrong"),
)


def setup(store: Store) -> None:
    """Trusted setup (idempotent): create the tables and the example tickets, and provision the
    records capability on exactly those tables."""
    store.migrate("$package", MIGRATIONS)
    with store.transaction() as tx:
        for ticket_id, tenant_id, customer_id, title in SEED:
            tx.execute(
                "INSERT INTO ${package}_tickets (ticket_id, tenant_id, customer_id, title, status)"
                " VALUES (?, ?, ?, ?, 'open') ON CONFLICT DO NOTHING",
                (ticket_id, tenant_id, customer_id, title),
            )
    provision_service_records(store, SCOPE)


@dataclass(frozen=True)
class Tickets:
    """Typed access to the tickets, through the records capability (never the store)."""

    records: ServiceRecords

    @classmethod
    def on(cls, store: Store) -> Tickets:
        """Trusted wiring: the tickets in ``store``'s database (the store itself is not kept)."""
        return cls(open_service_records(store, SCOPE))

    def ownership(self, ticket_id: str, ctx: HandlerContext) -> ResourceStatus:
        """Whose ticket this is, for the authenticated tenant and user (checked by toolgate at
        dispatch and again right before execution)."""
        with self.records.transaction(write=False) as tx:
            row = tx.one("SELECT tenant_id, customer_id FROM ${package}_tickets WHERE ticket_id = ?", (ticket_id,))
        return ownership(row, ctx.tenant_id, ctx.user_id, owner_column="customer_id")

    def get(self, tenant_id: str, ticket_id: str) -> dict[str, Any]:
        """One ticket of the tenant, or a caller error."""
        with self.records.transaction(write=False) as tx:
            row = tx.one(
                "SELECT ticket_id, title, status FROM ${package}_tickets WHERE tenant_id = ? AND ticket_id = ?",
                (tenant_id, ticket_id),
            )
        if row is None:
            raise ToolExecutionError("caller_error", f"no ticket {ticket_id} for this account")
        return dict(row)

    def close(self, tenant_id: str, ticket_id: str, resolution: str, idempotency_key: str) -> dict[str, Any]:
        """Close a ticket once per idempotency key (a redelivery changes nothing)."""
        with self.records.transaction() as tx:
            done = tx.execute(
                "INSERT INTO ${package}_closures (idempotency_key, ticket_id) VALUES (?, ?)"
                " ON CONFLICT DO NOTHING RETURNING ticket_id",
                (idempotency_key, ticket_id),
            )
            if done:
                tx.execute(
                    "UPDATE ${package}_tickets SET status = 'closed', resolution = ? WHERE tenant_id = ? AND ticket_id = ?",
                    (resolution, tenant_id, ticket_id),
                )
        return self.get(tenant_id, ticket_id)

    def closures(self) -> int:
        """How many closures the system performed (tests count effects here)."""
        with self.records.transaction(write=False) as tx:
            row = tx.one("SELECT COUNT(*) AS n FROM ${package}_closures", ())
        return int(row["n"]) if row else 0
'''

TOOLS = '''\
"""The tools of $name: plain typed functions, each with the operator policy that makes it safe.

The model sees each function's name, docstring and typed parameters. It never sees ``ctx``:
identity (tenant and user) comes from the authenticated session through `HandlerContext`, never
from arguments. Risk, approval, timeout, ownership and rollback are the operator's decisions,
stated here and pinned by the release manifest.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from toolgate import ReleaseEnv
from toolgate.tools import ApprovalClass, HandlerContext, NoRollback, ResourceRef, ToolSpec
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.shapes.functions import from_function
from toolgate.tools.spec import ToolResult

from $package.records import Tickets

TicketId = Annotated[str, Field(pattern=r"^T-[0-9]{1,8}$$", description="Ticket id as shown, e.g. 'T-100'.")]
"""Every argument has a bound (an enum, pattern or maximum length): the registry audit refuses any other."""
Resolution = Annotated[str, Field(min_length=1, max_length=500, description="Short resolution note.")]

SUPPORT = frozenset({"support"})
"""Staff who may act on any customer's ticket of their own tenant (and review writes)."""


class Ticket(ToolResult):
    """What the tools return about a ticket (only these fields reach the model)."""

    ticket_id: str
    title: str
    status: str


def specs(env: ReleaseEnv) -> list[ToolSpec]:
    """The release's tools, bound to the system of record in ``env``'s store: trusted wiring opens
    the tickets' records capability there, and the handlers close over that, never the store."""
    tickets = Tickets.on(env.store)

    def get_ticket(ticket_id: TicketId, ctx: HandlerContext) -> Ticket:
        """Read one of the customer's support tickets by id (e.g. 'T-100'): title and status.
        Changes nothing."""
        return Ticket(**tickets.get(ctx.tenant_id, ticket_id))

    def close_ticket(ticket_id: TicketId, resolution: Resolution, ctx: HandlerContext) -> Ticket:
        """Propose closing one of the customer's tickets with a short resolution note. A support
        reviewer approves it before it runs; until then the result says pending_approval."""
        closed = tickets.close(ctx.tenant_id, ticket_id, resolution, ctx.require_idempotency_key())
        return Ticket(**closed)

    def ticket(conflict: bool) -> ResourceRef:
        return ResourceRef(
            kind="ticket", argument="ticket_id", conflict=conflict, owner=tickets.ownership, staff_roles=SUPPORT
        )

    return [
        from_function(
            get_ticket,
            OperatorPolicy(
                risk="read-only",
                owner="$name",
                scopes=frozenset({"tickets:read"}),
                resource=ticket(conflict=False),
                audit_fields=frozenset({"ticket_id"}),
            ),
        ),
        from_function(
            close_ticket,
            OperatorPolicy(
                risk="caution",
                owner="$name",
                scopes=frozenset({"tickets:write"}),
                approval=ApprovalClass.role("support"),
                effect="Closes the ticket and records the resolution; the customer sees it as closed.",
                rollback=NoRollback("a closed ticket is re-opened by a new ticket, not by undoing this one"),
                timeout_s=10,
                resource=ticket(conflict=True),
                audit_fields=frozenset({"ticket_id"}),
            ),
        ),
    ]
'''

RELEASE = '''\
"""The $name release: its tools, system of record, policy and reviewed manifest, as one value.

toolgate loads it from ``TOOLGATE_RELEASE`` (``path/to/$package/release.py:release``, or
``$name/0.1.0`` once the package is installed); ``policy.json`` and ``manifest.json`` live beside
this file.
"""

from __future__ import annotations

from pathlib import Path

from toolgate import Release

from $package import records, tools

release = Release.from_directory(
    Path(__file__).resolve().parent,
    id="$name/0.1.0",
    tools=tools.specs,
    setup=records.setup,
)
'''

POLICY = {
    "schema_version": 1,
    "policy_version": "0.1.0",
    "approval_minutes": 15,
    "rules": [],
    "rate_limits": {"per_principal_tool": {"limit": 60, "window_s": 3600}},
}


__all__ = ["INIT", "POLICY", "RECORDS", "RELEASE", "TOOLS"]
