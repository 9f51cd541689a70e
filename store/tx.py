"""One open transaction of the store, and the database an aggregate of the store runs its SQL on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from toolgate.store.keys import Keyring


class Tx(Protocol):
    """One open transaction; SQL uses ``?`` placeholders on both backends."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run one statement; rows (as dicts) when it returns any, else an empty list."""
        ...

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one statement whose result nobody reads (no RETURNING, rowcount unused). On
        PostgreSQL it is queued and reaches the server with the transaction's next answered
        statement, or with its COMMIT: no round trip of its own; its failure fails that statement
        (or the COMMIT), so the whole transaction. Never for a write whose result decides
        something. On SQLite it simply runs."""
        ...

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        """First row of a query, or None."""
        ...

    def many(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[dict[str, Any]]]:
        """Run ``statements`` (``(sql, params)``, one statement each) in order; each one's rows, in
        the same order. For statements a caller needs together (reads; a write and the writes
        that must run only behind it, each conditional in its SQL on the one before): on
        PostgreSQL they travel as one script, one round trip for all of them (with whatever
        `send` queued in front). A failing statement raises and runs none after it; the unit of
        work then fails whole, so nothing of the others stays either. On SQLite they simply run
        one after the other."""
        ...


class LinkHead(NamedTuple):
    """What linking audit events reads under the chain's lock, on PostgreSQL in one round trip."""

    now: str
    """The store's time, as `toolgate.clock.iso` text."""
    last_hash: str
    """The hash of the chain's last event (the genesis hash for an empty chain)."""
    seqs: list[int]
    """The new events' sequence numbers, ascending, where the backend reserves them under the
    lock (PostgreSQL: the events' INSERT then needs no answer and goes with the COMMIT); empty
    where the database numbers them on insert (SQLite)."""
    values: list[Any]
    """The first column of each read asked for (each reads one row at most; None: no row), in order."""
    locked: bool = True
    """Read under the chain's lock. False where the backend read the head without it, behind the
    step's statements (PostgreSQL's `Database._link_behind`): the events' rows then go to the
    server with the COMMIT, behind the lock and a check that the head is still ``last_hash``
    (`Database._link_tail`), and are numbered by the database there."""
    guessed: bool = False
    """Not read at all: the head this process last saw linked, and ``now`` the store's clock as
    this process calibrated it (`Database._head_guess`); the check under the lock then also
    holds ``now`` between the head's own time and the server's clock."""


class Written(NamedTuple):
    """ "This transaction wrote that row": the condition under which a group of audit events is
    linked behind the statements of its transaction (`Database._link_behind`)."""

    statement: int
    """The statement (its index in the script) that writes the row and returns it when it did."""
    table: str
    """The row's table."""
    column: str
    """A unique column of that table."""
    key: str
    """The row's value in ``column``."""


Relink = Callable[[tuple[str, str] | None], tuple[str, Sequence[Any]] | None]
"""How audit events linked after an unlocked chain head are linked again (`Database._link_tail`):
given the head found under the lock, ``(now, last hash)``, the INSERT of the same events linked
after it; or, given None (no head read) or when it cannot (a keyed event, which the chain may
hold by now), it links them itself under the lock (`AuditLog.link`) and returns None."""


WhenWritten = Callable[[str], tuple[str, Sequence[Any]]]
"""The events' INSERT of a step linked ahead of its statements, given the SQL condition under
which it inserts anything (`Database._link_ahead`: "this transaction wrote the row")."""


class Database(Protocol):
    """What an aggregate (`toolgate.store.operations`, ``.audit_log``, ...) uses of the `Store`
    that holds it: its units of work, the store's clock read inside one, the audit chain's lock,
    its keys, and which SQL dialect it speaks (``"sqlite"`` or ``"postgres"``)."""

    dialect: str
    keys: Keyring

    def transaction(self, *, write: bool = True) -> AbstractContextManager[Tx]:
        """A unit of work; ``write=True`` takes the write lock up front."""
        ...

    def _tx_now(self, tx: Tx) -> str:
        """The store's current time as `toolgate.clock.iso` text, read inside ``tx``."""
        ...

    def now(self) -> datetime:
        """The store's clock, read in a unit of work of its own (none on SQLite)."""
        ...

    def _clock_sql(self) -> str | None:
        """SQL for the store's time a read statement can return beside its rows (None: ask `now`)."""
        ...

    def _script_clock(self, plus_s: float = 0.0) -> str | None:
        """SQL for the store's time as every statement of one script sees it (PostgreSQL: when
        the server received the script), ``plus_s`` seconds on; None where the caller reads the
        time instead (SQLite, or a clock put in front of the server's: `_clock_sql` is None)."""
        ...

    def _clock_heard(self, now: str) -> datetime:
        """The store's time a statement read by `_clock_sql`, as a datetime."""
        ...

    def _chain_head(self, tx: Tx) -> tuple[str, str]:
        """Take the audit chain's lock (held until ``tx`` ends) and read under it ``(now, last hash)``."""
        ...

    def _link_head(self, tx: Tx, events: int, values: Sequence[tuple[str, Sequence[Any]]] = ()) -> LinkHead:
        """`_chain_head` for linking ``events`` events, with the one-value reads ``values``
        (``(sql, params)``) the links need; see `LinkHead`."""
        ...

    def _link_behind(
        self,
        tx: Tx,
        statements: Sequence[tuple[str, Sequence[Any]]],
        groups: Sequence[tuple[int, Written]],
        values: Sequence[tuple[str, Sequence[Any]]] = (),
    ) -> tuple[list[list[dict[str, Any]]], LinkHead | None]:
        """Run ``statements`` (`Tx.many`) and then, when the first group's row was written by
        them, `_link_head` for the events of every group (``(how many events, condition)``) whose
        row was: ``(each statement's rows, the head or None)``; on PostgreSQL in one round trip,
        and the head read without the chain's lock (``LinkHead.locked`` False)."""
        ...

    def _head_first(self, tx: Tx, values: Sequence[tuple[str, Sequence[Any]]] = ()) -> LinkHead | None:
        """For a step whose events can be linked before its statements run (a proposal's rows
        are new; an outcome's or a decision's events need only the tenants of rows that exist
        already): the store's time, the chain's head and the one-value reads ``values`` (in
        ``LinkHead.values``), read without the lock as ``tx``'s first script, before its
        statements are known (the time goes into them); None where the backend links behind the
        statements instead (`_link_behind`)."""
        ...

    def _all_written(self, tx: Tx, first: Written, rows: Sequence[Written]) -> str:
        """A statement that fails ``tx`` with `toolgate.store.leases.ResourcesBusy` (naming the
        first row's key that is missing) when ``tx`` wrote ``first`` but not each of ``rows``:
        for a script that commits whatever it did (`AuditLog.link_ahead`), where the caller
        could not roll back after judging its answers (a claim that took some of its leases)."""
        ...

    def _wrote(self, tx: Tx, row: Written) -> str:
        """SQL that holds when ``tx`` wrote ``row`` (for a group of events linked ahead that is
        inserted only behind a later statement of the script: `AuditLog.link_ahead`)."""
        ...

    def _head_guess(self, tx: Tx) -> LinkHead | None:
        """A head to link events after without reading it (``LinkHead.guessed``): the chain's
        head as this process last saw it right after a COMMIT that linked, with the store's
        calibrated time; None where the backend has none (SQLite, or nothing seen yet, or no
        recent reading of the clock)."""
        ...

    def _link_ahead(
        self,
        tx: Tx,
        statements: Sequence[tuple[str, Sequence[Any]]],
        rereads: Sequence[tuple[str, Sequence[Any]]],
        written: Written,
    ) -> list[list[dict[str, Any]]]:
        """Run ``statements`` and COMMIT ``tx`` in one round trip, with the events waiting to go
        with the COMMIT (`_link_tail`, linked after a `_head_first` head) between them, only
        when the row ``written`` names was written by the statements. Each statement's rows;
        ``rereads`` (one per statement) read them again when the head check stopped the
        script. ``tx`` is committed after it."""
        ...

    def _link_tail(
        self,
        tx: Tx,
        insert: WhenWritten,
        last_hash: str,
        keyed: Sequence[str],
        relink: Relink,
        *,
        at: str = "",
    ) -> None:
        """Send ``insert`` (the events linked after ``last_hash``, an unlocked head) with the
        COMMIT of ``tx``, behind the chain's lock and a check that the head is still
        ``last_hash`` and holds none of the ``keyed`` event ids (given ``at``, the time the
        events carry, also that it lies between the head's own time and the server's clock).
        When the check fails (another transaction linked in between), the transaction goes on
        without that INSERT, still holding the lock, and commits the one ``relink`` gives for
        the head (and the server's time) found under it; before any other linking in ``tx``,
        ``relink(None)`` links them under the lock first."""
        ...


__all__ = ["Database", "LinkHead", "Relink", "Tx", "WhenWritten", "Written"]
