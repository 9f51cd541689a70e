"""`DemoService`: what every demo system of record shares, declared once.

Each demo service owns some ``sor_*`` tables in the toolgate store. A service declares, as class
attributes, its migrations, its demo rows, where each resource kind records its owning tenant,
which tables tests may count and which downstream it builds when given none. This base turns
those declarations into ``setup``, ``resource_status``, ``count`` and the status query by
idempotency key, so a service module holds only what is its own. Every statement is fixed SQL
built from the declarations, with bound parameters: no model string ever becomes SQL text.

A service never keeps the gateway's `Store`. It is built *from* one (trusted wiring), and keeps
only `ServiceRecords`: a capability the database engine confines to the tables it declares
(``tables`` it owns, ``reads`` of another service's). Its handlers close over the service, so
they reach their own system of record and nothing that holds proposals, approvals, operations
or the audit log. Creating the tables, seeding them and provisioning the capability (a database
role on PostgreSQL) is trusted setup: `DemoService.setup` takes the store as an argument.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import InitVar, dataclass, field
from typing import Any, ClassVar, Protocol

from toolgate.store import Migration, Store
from toolgate.store.records_scope import RecordsScope, ServiceRecords, UnboundRecords
from toolgate.store.service_records import open_service_records, provision_service_records
from toolgate.tools.spec import ResourceStatus


@dataclass(frozen=True)
class Seed:
    """Demo rows of one table, inserted once: a row already there is left as it is."""

    table: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    """Values in the order of ``columns``."""

    @property
    def sql(self) -> str:
        """The insert of one row."""
        places = ", ".join("?" for _ in self.columns)
        return (
            f"INSERT INTO {self.table} ({', '.join(self.columns)}) VALUES ({places}) ON CONFLICT DO NOTHING"
        )


@dataclass(frozen=True)
class Owner:
    """Where one resource kind records the tenant that owns it (its ``tenant_id`` column)."""

    table: str
    column: str
    """The column holding the id a tool argument names."""
    within_tenant: bool = False
    """The id is unique only inside a tenant (a service alias): another tenant's is missing, never foreign."""
    stored_id: Callable[[str], str | None] | None = None
    """Turns the argument into the stored id (``None`` when malformed: missing); the argument as is by default."""

    @property
    def sql(self) -> str:
        """The lookup of every row naming the id (one, unless the id is shared by tenants)."""
        scope = " AND tenant_id = ?" if self.within_tenant else ""
        return f"SELECT tenant_id FROM {self.table} WHERE {self.column} = ?{scope}"


def records_of(store: Store | None, scope: RecordsScope) -> ServiceRecords:
    """The capability over ``scope`` in ``store``'s database (unbound without a store: specs only)."""
    return UnboundRecords(scope) if store is None else open_service_records(store, scope)


def count_rows(records: ServiceRecords, table: str, allowed: frozenset[str], where: dict[str, Any]) -> int:
    """Rows of ``table`` (one of ``allowed``) matching ``where``; table and columns never come from a model."""
    if table not in allowed:
        raise ValueError(f"not a countable table: {table}")
    if not all(column.isidentifier() for column in where):
        raise ValueError("column names must be identifiers")
    clauses = " AND ".join(f"{column} = ?" for column in where)
    sql = f"SELECT COUNT(*) AS n FROM {table}" + (f" WHERE {clauses}" if clauses else "")
    with records.transaction(write=False) as tx:
        row = tx.one(sql, tuple(where.values()))
    return int(row["n"]) if row else 0


class Downstream(Protocol):
    """A downstream system a service builds by default: it holds its own records capability."""

    records: ServiceRecords


@dataclass
class DemoService:
    """A demo system of record built from ``store`` (never kept: see the module docstring);
    subclasses declare the class attributes below."""

    store: InitVar[Store | None]
    """Trusted wiring: what the records capability is opened on (``None``: specs only)."""
    records: ServiceRecords = field(init=False, repr=False, compare=False)
    """The capability over ``tables`` and ``reads``: everything a handler of this service can reach."""

    component: ClassVar[str]
    """The name its migrations are recorded under."""
    migrations: ClassVar[tuple[Migration, ...]]
    seeds: ClassVar[tuple[Seed, ...]] = ()
    """Demo rows, in insert order (a referenced row first)."""
    owners: ClassVar[Mapping[str, Owner]] = {}
    """Per resource kind this service resolves, where its owner is recorded."""
    resource_kinds: ClassVar[frozenset[str]] = frozenset()
    """The kinds of ``owners``: the resolver asks this service about exactly these."""
    countable: ClassVar[frozenset[str]] = frozenset()
    """Tables `count` may read: request logs and effects, the evidence tests count."""
    tables: ClassVar[frozenset[str]]
    """The tables this service owns: its capability reads and writes them."""
    reads: ClassVar[frozenset[str]] = frozenset()
    """Tables of another system its capability may only read."""
    read_appends: ClassVar[frozenset[str]] = frozenset()
    """Owned tables its *read* tools append to by design (`RecordsScope.read_appends`): in a read
    call, the only writes its capability allows, and only inserts."""
    downstreams: ClassVar[Mapping[str, Callable[[Store | None], Downstream]]] = {}
    """Per field left ``None``, what builds its default downstream system (with its own records)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.resource_kinds = frozenset(cls.owners)

    @classmethod
    def scope(cls) -> RecordsScope:
        """What this service's records capability may touch."""
        return RecordsScope(cls.component, cls.tables, cls.reads, cls.read_appends)

    def __post_init__(self, store: Store | None) -> None:
        self.records = records_of(store, self.scope())
        for name, build in self.downstreams.items():
            if getattr(self, name) is None:
                setattr(self, name, build(store))

    def scopes(self) -> list[RecordsScope]:
        """The records scopes of this service and of its downstream systems."""
        found = [self.scope()]
        for name in self.downstreams:
            downstream = getattr(self, name)
            if downstream is not None:
                found.append(downstream.records.scope)
        return found

    def setup(self, store: Store, *, seed: bool = True) -> None:
        """Trusted setup on ``store``: create the tables, once the demo rows, and provision the
        records capabilities (of this service and its downstreams) on exactly their tables."""
        store.migrate(self.component, self.migrations)
        if seed:
            self.seed(store)
        for scope in self.scopes():
            provision_service_records(store, scope)

    def seed(self, store: Store) -> None:
        """Insert the demo rows (idempotent; trusted setup, on the store)."""
        seeds = self.seed_rows()
        if not seeds:
            return
        with store.transaction() as tx:
            for seed in seeds:
                for row in seed.rows:
                    tx.execute(seed.sql, row)

    def seed_rows(self) -> tuple[Seed, ...]:
        """The demo rows to insert; a service whose rows depend on the moment of setup builds them here."""
        return self.seeds

    def resource_status(self, kind: str, resource_id: str, tenant_id: str) -> ResourceStatus:
        """Ownership of ``(kind, resource_id)`` relative to ``tenant_id``: ``owned`` when a row naming
        it is the tenant's, ``foreign`` when only other tenants' are, else ``missing``."""
        owner = self.owners.get(kind)
        if owner is None:
            return "missing"
        stored_id = owner.stored_id(resource_id) if owner.stored_id else resource_id
        if stored_id is None:
            return "missing"
        params = (stored_id, tenant_id) if owner.within_tenant else (stored_id,)
        rows = self.records.read(owner.sql, params)  # one statement: one round trip on PostgreSQL
        if any(row["tenant_id"] == tenant_id for row in rows):
            return "owned"
        return "foreign" if rows else "missing"

    def count(self, table: str, **where: Any) -> int:
        """Rows in one of this service's countable tables matching ``where`` (test and demo evidence)."""
        return count_rows(self.records, table, self.countable, where)

    def _by_key(self, table: str, tenant_id: str, idempotency_key: str) -> dict[str, Any] | None:
        """The row of ``table`` made under ``idempotency_key`` for the tenant, if any: a downstream's
        status query by key, with no side effect (reconciliation asks it after an unknown outcome)."""
        with self.records.transaction(write=False) as tx:
            return tx.one(
                f"SELECT * FROM {table} WHERE tenant_id = ? AND idempotency_key = ?",
                (tenant_id, idempotency_key),
            )


__all__ = ["DemoService", "Downstream", "Owner", "Seed", "count_rows", "records_of"]
