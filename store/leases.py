"""Resource leases: one holder at a time per resource, across threads and processes.

A write that declares a conflicting resource (e.g. an inventory SKU) runs only while its
delivery holds the lease on that resource (`toolgate.graph.delivery.same_resource`). A lease is a row
keyed by resource, taken or taken over in one conditional upsert judged by the store's clock, so
two processes on one PostgreSQL never both hold it; it lapses on its own when its holder dies, and
only its holder can renew or release it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolgate.clock import later
from toolgate.store.tx import Database, Tx


class ResourcesBusy(Exception):
    """One of the wanted resources is leased to another holder: the transaction that wanted them
    (an acquisition, or a claim that takes its leases with it) is rolled back whole."""


class ResourceLeases:
    """The resource leases of one store (``store.leases``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def acquire(self, keys: Sequence[str], holder: str, lease_s: float, *, queued: bool = False) -> bool:
        """Lease every resource in ``keys`` to ``holder`` for ``lease_s`` seconds of the store's
        clock, all or none, in one transaction (keys taken in sorted order, so two callers never
        deadlock). True when each was free, lapsed or already ``holder``'s; False, with nothing
        changed, when any is held by another live lease. ``ValueError`` for ``lease_s <= 0``.
        ``queued``: ``holder`` waits in the queue (`queue`) and leaves it in the same transaction."""
        if lease_s <= 0:
            raise ValueError(f"a resource lease needs a positive duration, got {lease_s!r}")
        wanted = sorted(set(keys))
        if not wanted:
            return True
        try:
            with self._db.transaction() as tx:
                take_in(tx, wanted, holder, self._db._tx_now(tx), lease_s)
                if queued:
                    tx.execute("DELETE FROM lease_waiters WHERE holder = ?", (holder,))
        except ResourcesBusy:
            return False
        return True

    def queue(self, keys: Sequence[str], holder: str, wait_s: float) -> None:
        """Put ``holder`` in line for ``keys`` for ``wait_s`` seconds of the store's clock: when
        a lease on one of them is given up, its notice names the oldest live waiter
        (`toolgate.store.changes`), so one waiter looks again instead of all. A place in line
        is a hint, never a claim: `acquire` decides. Lines left by dead waiters are cleared."""
        wanted = sorted(set(keys))
        if not wanted:
            return
        with self._db.transaction() as tx:
            now = self._db._tx_now(tx)
            tx.execute("DELETE FROM lease_waiters WHERE until <= ?", (now,))
            for key in wanted:
                tx.execute(
                    "INSERT INTO lease_waiters (resource_key, holder, since, until) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (resource_key, holder) DO NOTHING",
                    (key, holder, now, later(now, wait_s)),
                )

    def leave_queue(self, holder: str) -> None:
        """``holder`` stopped waiting without a lease: out of every line it stood in."""
        with self._db.transaction() as tx:
            tx.execute("DELETE FROM lease_waiters WHERE holder = ?", (holder,))

    def renew(self, keys: Sequence[str], holder: str, lease_s: float) -> bool:
        """Extend ``holder``'s leases on ``keys`` to ``lease_s`` from now; True when ``holder``
        still holds every one (a lease another holder took over is never touched)."""
        wanted = sorted(set(keys))
        if not wanted:
            return True
        with self._db.transaction() as tx:
            renewed = tx.execute(
                "UPDATE resource_leases SET expires_at = ? WHERE holder = ? AND resource_key IN ("
                + ", ".join("?" for _ in wanted)
                + ") RETURNING resource_key",
                (later(self._db._tx_now(tx), lease_s), holder, *wanted),
            )
        return len(renewed) == len(wanted)

    def release(self, keys: Sequence[str], holder: str) -> int:
        """Give up ``holder``'s leases on ``keys``; how many it held (another's lease stays)."""
        wanted = sorted(set(keys))
        if not wanted:
            return 0
        with self._db.transaction() as tx:
            return release_in(tx, wanted, holder)


def take_in(tx: Tx, keys: Sequence[str], holder: str, now: str, lease_s: float) -> None:
    """`ResourceLeases.acquire` inside the caller's transaction ``tx`` (``now``: its time): a
    claim takes its leases with it, in one transaction. Raises `ResourcesBusy` when another live
    lease holds any of ``keys``; the caller's transaction must then roll back (some may be taken)."""
    for key in sorted(set(keys)):  # sorted: two acquirers lock shared rows in the same order
        taken = tx.execute(
            "INSERT INTO resource_leases (resource_key, holder, acquired_at, expires_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (resource_key) DO UPDATE SET"
            " holder = excluded.holder, acquired_at = excluded.acquired_at,"
            " expires_at = excluded.expires_at"
            " WHERE resource_leases.expires_at <= ? OR resource_leases.holder = excluded.holder"
            " RETURNING resource_key",
            (key, holder, now, later(now, lease_s), now),
        )
        if not taken:
            raise ResourcesBusy(key)


def take_behind(
    keys: Sequence[str],
    holder: str,
    now: str,
    lease_s: float,
    condition: tuple[str, Sequence[Any]],
    *,
    at: tuple[str, str] | None = None,
) -> list[tuple[str, Sequence[Any]]]:
    """`take_in` as statements to travel behind another in one script (`Tx.many`): each takes
    its key (sorted, as `take_in` does) only while the SQL ``condition`` (with its parameters)
    holds, e.g. that the claim in front of them won, and answers with the key when it took it;
    `all_taken` judges the answers. ``at``: the store's time and the lease's end as SQL (the
    server's clock in the script itself), instead of ``now`` and ``lease_s`` from it."""
    sql, params = condition
    start, until = at if at is not None else ("?", "?")
    times: tuple[Any, ...] = () if at is not None else (now, later(now, lease_s))
    return [
        (
            "INSERT INTO resource_leases (resource_key, holder, acquired_at, expires_at)"
            f" SELECT ?, ?, {start}, {until} WHERE {sql} ON CONFLICT (resource_key) DO UPDATE SET"
            " holder = excluded.holder, acquired_at = excluded.acquired_at,"
            " expires_at = excluded.expires_at"
            f" WHERE resource_leases.expires_at <= {start} OR resource_leases.holder = excluded.holder"
            " RETURNING resource_key",
            (key, holder, *times, *params, *(() if at is not None else (now,))),
        )
        for key in sorted(set(keys))
    ]


def all_taken(keys: Sequence[str], answers: Sequence[Sequence[Any]]) -> None:
    """Raise `ResourcesBusy` unless each `take_behind` statement (its ``answers``) took its key;
    the caller's transaction must then roll back."""
    for key, answer in zip(sorted(set(keys)), answers, strict=True):
        if not answer:
            raise ResourcesBusy(key)


def release_in(tx: Tx, keys: Sequence[str], holder: str) -> int:
    """`ResourceLeases.release` inside the caller's transaction ``tx``: a step that ends a lease
    with another change (an operation's outcome) commits both at once, in one round trip fewer."""
    wanted = sorted(set(keys))
    if not wanted:
        return 0
    released = tx.execute(
        "DELETE FROM resource_leases WHERE holder = ? AND resource_key IN ("
        + ", ".join("?" for _ in wanted)
        + ") RETURNING resource_key",
        (holder, *wanted),
    )
    return len(released)


def release_statements(keys: Sequence[str], holder: str) -> list[tuple[str, Sequence[Any]]]:
    """`release_in` as a statement to travel in a script (`Tx.many`) for a step that does not
    ask how many leases ``holder`` still held (an operation's outcome gives up whatever it took):
    no round trip of its own."""
    wanted = sorted(set(keys))
    if not wanted:
        return []
    return [
        (
            "DELETE FROM resource_leases WHERE holder = ? AND resource_key IN ("
            + ", ".join("?" for _ in wanted)
            + ")",
            (holder, *wanted),
        )
    ]


__all__ = [
    "ResourceLeases",
    "ResourcesBusy",
    "all_taken",
    "release_in",
    "release_statements",
    "take_behind",
    "take_in",
]
