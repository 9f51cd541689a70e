"""Rate-limit counters, as the store keeps them: one atomic upsert per bucket and fixed window,
on the store's clock, so every process counts into the same window."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from toolgate.clock import iso, parse_iso
from toolgate.store.tx import Database, Tx


def _hit(tx: Tx, moment: float, bucket: str, window_s: int) -> int:
    """One atomic upsert of ``bucket``'s count in the window holding ``moment``."""
    window_start = iso(datetime.fromtimestamp(moment - moment % window_s, UTC))
    rows = tx.execute(
        "INSERT INTO rate_counters (bucket, window_start, count) VALUES (?, ?, 1)"
        " ON CONFLICT (bucket, window_start) DO UPDATE SET count = rate_counters.count + 1"
        " RETURNING count",
        (bucket, window_start),
    )
    return int(rows[0]["count"])


class Counters:
    """The rate-limit counters of one store (``store.counters``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def increment(self, bucket: str, window_s: int) -> int:
        """Atomically count one hit in ``bucket`` for the current ``window_s``-second window of the
        store's clock; returns the new count (all processes)."""
        with self._db.transaction() as tx:
            return _hit(tx, parse_iso(self._db._tx_now(tx)).timestamp(), bucket, window_s)

    def count_hits(self, hits: Sequence[tuple[str, int, int]]) -> int | None:
        """Count one hit in each ``(bucket, window_s, limit)`` in order, stopping at the first whose
        new count exceeds its limit: its index, or None when every hit fit. One transaction (a
        call's limits cost one commit, not one per limit)."""
        with self._db.transaction() as tx:
            moment = parse_iso(self._db._tx_now(tx)).timestamp()
            for index, (bucket, window_s, limit) in enumerate(hits):
                if _hit(tx, moment, bucket, window_s) > limit:
                    return index
        return None

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


__all__ = ["Counters"]
