"""Rate-limit counters, as the store keeps them: one atomic upsert per bucket and fixed window,
on the store's clock, so every process counts into the same window.

A counter's row goes once its window has ended: the transaction that opens a new window deletes
the ended ones (`_forget_ended`, sent with its other statements), so the table holds about one
row per bucket in use, not one per bucket and window ever counted.

A process may also take a share of a window's allowance at once (`Counters.take_shares`): the
store counts the whole share when it grants it, never past the limit, so the shares handed to
every process together never exceed it; the process spends them without asking again and gives
back what it did not spend (`Counters.give_back`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from toolgate.clock import iso, parse_iso
from toolgate.store.tx import Database, Tx

FORGET_AT_ONCE = 500
"""At most this many ended windows are deleted by one transaction (the rest go with the next)."""

FORGET_AFTER_S = 300
"""A window is forgotten this long after its end, not at once: a transaction that read the
store's time just before the end may still be counting into it (it would otherwise count into a
fresh row and the window's earlier hits would be lost)."""


def _window(moment: float, window_s: int) -> tuple[str, str]:
    """The start and end of the ``window_s``-second window holding ``moment``, as stored."""
    start = moment - moment % window_s
    return iso(datetime.fromtimestamp(start, UTC)), iso(datetime.fromtimestamp(start + window_s, UTC))


def _forget_ended(tx: Tx, dialect: str, moment: float) -> None:
    """Delete windows that ended `FORGET_AFTER_S` before ``moment`` (the store's time), at most
    `FORGET_AT_ONCE`. Nothing reads an ended window again (`Counters.give_back` leaves a
    forgotten one alone). On PostgreSQL rows another transaction holds are skipped, not waited
    for: two processes forgetting the same rows in different orders would otherwise deadlock."""
    before = (iso(datetime.fromtimestamp(moment - FORGET_AFTER_S, UTC)),)
    if dialect == "postgres":
        tx.send(
            "DELETE FROM rate_counters WHERE (bucket, window_start) IN (SELECT bucket, window_start"
            f" FROM rate_counters WHERE window_ends < ? LIMIT {FORGET_AT_ONCE} FOR UPDATE SKIP LOCKED)",
            before,
        )
    else:
        tx.send(
            "DELETE FROM rate_counters WHERE rowid IN (SELECT rowid FROM rate_counters WHERE window_ends < ?"
            f" LIMIT {FORGET_AT_ONCE})",
            before,
        )


def _hit(tx: Tx, dialect: str, moment: float, bucket: str, window_s: int) -> int:
    """One atomic upsert of ``bucket``'s count in the window holding ``moment``; the hit that
    opens the window forgets ended ones."""
    window_start, window_ends = _window(moment, window_s)
    rows = tx.execute(
        "INSERT INTO rate_counters (bucket, window_start, count, window_ends) VALUES (?, ?, 1, ?)"
        " ON CONFLICT (bucket, window_start) DO UPDATE SET count = rate_counters.count + 1"
        " RETURNING count",
        (bucket, window_start, window_ends),
    )
    count = int(rows[0]["count"])
    if count == 1:
        _forget_ended(tx, dialect, moment)
    return count


def _take(tx: Tx, dialect: str, moment: float, bucket: str, window_s: int, limit: int, want: int) -> int:
    """Count up to ``want`` hits of ``bucket`` in the window holding ``moment``, never past
    ``limit``; how many were counted (0: the window was full, and the refused hit is counted)."""
    window_start, window_ends = _window(moment, window_s)
    tx.send(
        "INSERT INTO rate_counters (bucket, window_start, count, window_ends) VALUES (?, ?, 0, ?)"
        " ON CONFLICT (bucket, window_start) DO NOTHING",
        (bucket, window_start, window_ends),
    )
    lock = " FOR UPDATE" if dialect == "postgres" else ""  # SQLite's write lock is whole-database
    row = tx.one(
        f"SELECT count FROM rate_counters WHERE bucket = ? AND window_start = ?{lock}", (bucket, window_start)
    )
    assert row is not None
    if int(row["count"]) == 0:  # a window just opened (or every hit of it was given back)
        _forget_ended(tx, dialect, moment)
    granted = max(0, min(want, limit - int(row["count"])))
    tx.execute(
        "UPDATE rate_counters SET count = count + ? WHERE bucket = ? AND window_start = ?",
        (granted or 1, bucket, window_start),
    )
    return granted


@dataclass(frozen=True)
class Shares:
    """What `Counters.take_shares` granted."""

    grants: tuple[int, ...]
    """Hits counted per window asked for, in order; it ends at the first 0 (that window was full)."""
    store_time: float
    """The store's time of the grant (epoch seconds)."""
    window_ends: tuple[float, ...]
    """When each window ends on the store's clock (epoch seconds): its share is spent before then."""


class Counters:
    """The rate-limit counters of one store (``store.counters``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def increment(self, bucket: str, window_s: int) -> int:
        """Atomically count one hit in ``bucket`` for the current ``window_s``-second window of the
        store's clock; returns the new count (all processes)."""
        with self._db.transaction() as tx:
            return _hit(tx, self._db.dialect, parse_iso(self._db._tx_now(tx)).timestamp(), bucket, window_s)

    def count_hits(self, hits: Sequence[tuple[str, int, int]]) -> int | None:
        """Count one hit in each ``(bucket, window_s, limit)`` in order, stopping at the first whose
        new count exceeds its limit: its index, or None when every hit fit. One transaction (a
        call's limits cost one commit, not one per limit)."""
        with self._db.transaction() as tx:
            moment = parse_iso(self._db._tx_now(tx)).timestamp()
            for index, (bucket, window_s, limit) in enumerate(hits):
                if _hit(tx, self._db.dialect, moment, bucket, window_s) > limit:
                    return index
        return None

    def take_shares(self, wants: Sequence[tuple[str, int, int, int]]) -> Shares:
        """For each ``(bucket, window_s, limit, want)`` in order, count up to ``want`` hits at once
        in the current window, never past ``limit`` (at least one: a share of one is one hit, as
        `count_hits` counts it), stopping at the first window that has none left: that one is
        counted as a refused hit (like `count_hits`) and nothing after it. One transaction,
        judged by the store's clock; returns the grants, the store's time and the windows' ends."""
        grants: list[int] = []
        with self._db.transaction() as tx:
            now = self._db._tx_now(tx)
            moment = parse_iso(now).timestamp()
            ends: list[float] = []
            for bucket, window_s, limit, want in wants:
                ends.append(moment - moment % window_s + window_s)
                if want <= 1:
                    granted = 1 if _hit(tx, self._db.dialect, moment, bucket, window_s) <= limit else 0
                else:
                    granted = _take(tx, self._db.dialect, moment, bucket, window_s, limit, want)
                grants.append(granted)
                if not granted:
                    break
        return Shares(grants=tuple(grants), store_time=moment, window_ends=tuple(ends))

    def give_back(self, returns: Sequence[tuple[str, float, int]]) -> None:
        """Give back ``count`` unspent hits of ``bucket``'s window starting at ``window_start``
        (epoch seconds, as `Shares` names it), one transaction for all; a window already gone
        (forgotten) is left alone, and no count goes below zero."""
        if not returns:
            return
        with self._db.transaction() as tx:
            for bucket, window_start, count in returns:
                tx.execute(
                    "UPDATE rate_counters SET count = CASE WHEN count > ? THEN count - ? ELSE 0 END"
                    " WHERE bucket = ? AND window_start = ?",
                    (count, count, bucket, iso(datetime.fromtimestamp(window_start, UTC))),
                )

    def forget_ended(self, prefix: str, window_s: int) -> int:
        """Delete the counts of buckets starting with ``prefix`` whose ``window_s`` window has ended
        on the store's clock (what a window-bound throttle no longer reads); returns how many."""
        with self._db.transaction() as tx:
            moment = parse_iso(self._db._tx_now(tx)).timestamp()
            current = iso(datetime.fromtimestamp(moment - moment % window_s, UTC))
            rows = tx.execute(
                "DELETE FROM rate_counters WHERE substr(bucket, 1, ?) = ? AND window_start < ? RETURNING bucket",
                (len(prefix), prefix, current),
            )
        return len(rows)

    def value(self, bucket: str, window_s: int) -> int:
        """The count in ``bucket`` for the current window, counting nothing (a shadow judge peeks
        at rate limits without spending them)."""
        with self._db.transaction(write=False) as tx:
            moment = parse_iso(self._db._tx_now(tx)).timestamp()
            window_start = iso(datetime.fromtimestamp(moment - moment % window_s, UTC))
            row = tx.one(
                "SELECT count FROM rate_counters WHERE bucket = ? AND window_start = ?",
                (bucket, window_start),
            )
        return int(row["count"]) if row else 0


__all__ = ["Counters", "Shares"]
