"""The store interface: one contract, two backends (SQLite embedded, PostgreSQL).

The store is where effects and their evidence live: proposals, approval records, operations
with their atomic claim, and the hash-chained audit log. The same contract test suite runs
against both backends (``tests/test_store_contract.py``).
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import cached_property

from toolgate.store.approvals import Approvals
from toolgate.store.audit_log import AuditLog
from toolgate.store.breakers import BreakerStates
from toolgate.store.counters import Counters
from toolgate.store.delegations import SealedDelegations
from toolgate.store.identities import Identities
from toolgate.store.keys import Keyring
from toolgate.store.leases import ResourceLeases
from toolgate.store.migrations import Migration
from toolgate.store.operations import Operations
from toolgate.store.proposals import Proposals
from toolgate.store.slots import AdmissionSlots
from toolgate.store.tx import Tx
from toolgate.store.waits import DurableWaits


class Store(
    abc.ABC
):
    """Durable state with consequences. Every method is safe to call from many threads and processes."""

    url: str
    """Where the store lives (SQLite path or PostgreSQL URL without password)."""
    keys: Keyring
    """The store's secret and its purpose keys: the audit chain, approval and identity MACs,
    token hashes and state seals. Every process sharing one database must hold the same secret."""
    read_only: bool = False
    """True for stores opened only to read (verification commands): every write fails."""
    dialect: str = "sql"
    """The SQL dialect the aggregates speak to it: ``"sqlite"`` or ``"postgres"``."""

    # ---- the aggregates (each a module with its API and both dialects' SQL) ----------

    @cached_property
    def leases(self) -> ResourceLeases:
        """Resource leases: one holder per resource."""
        return ResourceLeases(self)

    @cached_property
    def slots(self) -> AdmissionSlots:
        """Admission slots: a cluster-wide cap on work in flight per scope."""
        return AdmissionSlots(self)

    @cached_property
    def delegations(self) -> SealedDelegations:
        """Sealed user credentials kept for one approved write."""
        return SealedDelegations(self)

    @cached_property
    def breakers(self) -> BreakerStates:
        """Circuit-breaker state shared by every process."""
        return BreakerStates(self)

    @cached_property
    def waits(self) -> DurableWaits:
        """Durable waits for the jobs writes started."""
        return DurableWaits(self)

    @cached_property
    def counters(self) -> Counters:
        """Rate-limit counters."""
        return Counters(self)

    @cached_property
    def identities(self) -> Identities:
        """Who may act, MAC-bound."""
        return Identities(self)

    @cached_property
    def audit(self) -> AuditLog:
        """The hash-chained audit log."""
        return AuditLog(self)

    @cached_property
    def operations(self) -> Operations:
        """Operations with their atomic claim, and dead letters."""
        return Operations(self, self.audit)

    @cached_property
    def proposals(self) -> Proposals:
        """Proposals, each inserted with its operation."""
        return Proposals(self, self.audit)

    @cached_property
    def approvals(self) -> Approvals:
        """Reviewers' decisions, and the operation change a completing one settles."""
        return Approvals(self, self.audit)

    # ---- the connection layer a backend provides -------------------------------------

    @abc.abstractmethod
    def _tx_now(self, tx: Tx) -> str:
        """The database's current time as `iso` text, read inside ``tx``."""

    @abc.abstractmethod
    def _chain_head(self, tx: Tx) -> tuple[str, str]:
        """Take the audit chain's lock (held until ``tx`` ends) and read, under it, the store's
        time and the hash of the chain's last event: ``(now, last_hash)``, the genesis hash for an
        empty chain. Called as the last step of a transaction, so the lock covers only linking the
        new events and the commit, never the state change's own round trips."""

    @abc.abstractmethod
    def now(self) -> datetime:
        """The store's clock (PostgreSQL's ``clock_timestamp()``; on SQLite, the host clock).

        Expiry, leases, rate-limit windows and recorded times are judged by this clock, never by a
        worker's own, so a process with a skewed clock cannot stretch an approval or a lease."""

    @abc.abstractmethod
    def transaction(self, *, write: bool = True) -> AbstractContextManager[Tx]:
        """A unit of work on the same database (used by systems of record that share it)."""

    @abc.abstractmethod
    def setup(self) -> None:
        """Create or upgrade the schema (explicit; never done at import)."""

    @abc.abstractmethod
    def require_schema(self) -> None:
        """Refuse (`ConfigurationError`) unless the store exists at this toolgate's schema version."""

    @abc.abstractmethod
    def migrate(self, component: str, migrations: Sequence[Migration]) -> int:
        """Apply the missing migrations of ``component``; returns how many ran."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections."""

    # proposals and approvals
    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_statements(script: str) -> Iterator[str]:
    """Split a SQLite migration script into statements (trigger bodies keep ``; END`` on one line)."""
    for statement in script.split(";\n"):
        if statement.strip():
            yield statement.strip()


__all__ = ["Store", "Tx", "iter_statements"]
