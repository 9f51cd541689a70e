"""A system of record's capability and its scope: what a service may touch, and the object it
touches it through (`toolgate.store.service_records` opens one per backend and explains the
boundary each backend's database engine enforces)."""

from __future__ import annotations

import abc
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from toolgate.errors import CapabilityDenied, ConfigurationError
from toolgate.store.handler_access import noted
from toolgate.store.tx import Tx

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class RecordsScope:
    """What one system of record may touch: ``tables`` it owns (read and write) and ``reads``,
    tables of another service it may only read. Names are lower-case SQL identifiers."""

    name: str
    """The service's name (its database role derives from it)."""
    tables: frozenset[str]
    reads: frozenset[str] = frozenset()
    read_appends: frozenset[str] = frozenset()
    """Owned tables the service appends to even when a *read* tool calls it, by design (the
    request log a downstream keeps, a stored preview a later write consumes): inside a read call
    (`toolgate.store.handler_access`) a ``write=True`` unit of work may INSERT into these and
    nothing else, never UPDATE or DELETE. Empty for most services: their reads write nothing."""

    def __post_init__(self) -> None:
        names = (self.name, *self.tables, *self.reads)
        if not self.name or not all(_NAME.match(n) for n in names):
            raise ConfigurationError(f"records scope {self.name!r}: names must be lower-case SQL identifiers")
        if self.tables & self.reads:
            raise ConfigurationError(
                f"records scope {self.name!r}: a table is either owned or read, not both"
            )
        if not self.read_appends <= self.tables:
            raise ConfigurationError(
                f"records scope {self.name!r}: a table reads append to must be one it owns"
            )

    @property
    def readable(self) -> frozenset[str]:
        """Every table a statement may read."""
        return self.tables | self.reads


def records_denied(scope: RecordsScope, target: str, what: str) -> CapabilityDenied:
    """The refusal of one statement (``target``: the table, or ``statement``), remembered by the
    handler call it happens in (`toolgate.store.handler_access`), so it fails even if swallowed."""
    return noted(
        CapabilityDenied(
            "records", target, f"the records capability of {scope.name} does not allow {what} ({target})"
        )
    )


class ServiceRecords(abc.ABC):
    """A capability over one service's tables (see the module docstring)."""

    scope: RecordsScope
    read_only: bool

    @abc.abstractmethod
    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        """A unit of work on the service's tables; ``write=False`` refuses every write, and so does
        ``write=True`` inside a handler call that may not write
        (`toolgate.store.handler_access.writable`): it opens read-only."""

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """The rows of one statement, run in a read-only unit of work of its own (refused as
        ``write=False`` refuses: the engine refuses every write in it). For a lookup that is a
        single read (an ownership check): a backend may send it in fewer round trips than a
        unit of work it must keep open for statements still to come."""
        with self.transaction(write=False) as tx:
            return tx.execute(sql, params)

    @abc.abstractmethod
    def close(self) -> None:
        """Close idle connections (a unit of work still running closes its own when it ends)."""


class UnboundRecords(ServiceRecords):
    """Records of a service built without a store (to list its tools): every use is refused."""

    def __init__(self, scope: RecordsScope) -> None:
        self.scope = scope
        self.read_only = True

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        raise ConfigurationError(f"{self.scope.name} was built without a store: it has no records")
        yield  # pragma: no cover

    def close(self) -> None:
        """Nothing is open."""


__all__ = ["RecordsScope", "ServiceRecords", "UnboundRecords", "records_denied"]
