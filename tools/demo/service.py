"""`DemoService`: what every demo system of record shares, declared once.

Each demo service owns some ``sor_*`` tables in the toolgate store. A service declares, as class
attributes, its migrations, its demo rows, where each resource kind records its owning tenant,
which tables tests may count and which downstream it builds when given none. This base turns
those declarations into ``setup``, ``resource_status``, ``count`` and the status query by
idempotency key, so a service module holds only what is its own. Every statement is fixed SQL
built from the declarations, with bound parameters: no model string ever becomes SQL text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from toolgate.store import Migration, Store
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


def count_rows(store: Store, table: str, allowed: frozenset[str], where: dict[str, Any]) -> int:
    """Rows of ``table`` (one of ``allowed``) matching ``where``; table and columns never come from a model."""
    if table not in allowed:
        raise ValueError(f"not a countable table: {table}")
    if not all(column.isidentifier() for column in where):
        raise ValueError("column names must be identifiers")
    clauses = " AND ".join(f"{column} = ?" for column in where)
    sql = f"SELECT COUNT(*) AS n FROM {table}" + (f" WHERE {clauses}" if clauses else "")
    with store.transaction(write=False) as tx:
        row = tx.one(sql, tuple(where.values()))
    return int(row["n"]) if row else 0


@dataclass
class DemoService:
    """A demo system of record over ``store``; subclasses declare the class attributes below."""

    store: Store

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
    downstreams: ClassVar[Mapping[str, Callable[[Store], object]]] = {}
    """Per field left ``None``, what builds its default downstream system on the same store."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.resource_kinds = frozenset(cls.owners)

    def __post_init__(self) -> None:
        for name, build in self.downstreams.items():
            if getattr(self, name) is None:
                setattr(self, name, build(self.store))

    def setup(self, *, seed: bool = True) -> None:
        """Create the tables and, once, the demo rows."""
        self.store.migrate(self.component, self.migrations)
        if seed:
            self.seed()

    def seed(self) -> None:
        """Insert the demo rows (idempotent)."""
        seeds = self.seed_rows()
        if not seeds:
            return
        with self.store.transaction() as tx:
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
        with self.store.transaction(write=False) as tx:
            rows = tx.execute(owner.sql, params)
        if any(row["tenant_id"] == tenant_id for row in rows):
            return "owned"
        return "foreign" if rows else "missing"

    def count(self, table: str, **where: Any) -> int:
        """Rows in one of this service's countable tables matching ``where`` (test and demo evidence)."""
        return count_rows(self.store, table, self.countable, where)

    def _by_key(self, table: str, tenant_id: str, idempotency_key: str) -> dict[str, Any] | None:
        """The row of ``table`` made under ``idempotency_key`` for the tenant, if any: a downstream's
        status query by key, with no side effect (reconciliation asks it after an unknown outcome)."""
        with self.store.transaction(write=False) as tx:
            return tx.one(
                f"SELECT * FROM {table} WHERE tenant_id = ? AND idempotency_key = ?",
                (tenant_id, idempotency_key),
            )


__all__ = ["DemoService", "Owner", "Seed", "count_rows"]
