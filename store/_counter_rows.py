"""Rate counters in SQL: one atomic upsert per bucket and fixed window, on the store's clock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from toolgate.clock import iso, parse_iso

if TYPE_CHECKING:
    from toolgate.store.base import Tx


class CounterRows:
    """The rate-limit part of `SqlStore` (mixed in; uses its transactions and clock)."""

    if TYPE_CHECKING:

        def transaction(self, *, write: bool = True) -> Any: ...

        def _tx_now(self, tx: Tx) -> str: ...

    def increment_counter(self, bucket: str, window_s: int) -> int:
        with self.transaction() as tx:
            return self._hit(tx, parse_iso(self._tx_now(tx)).timestamp(), bucket, window_s)

    def count_hits(self, hits: Sequence[tuple[str, int, int]]) -> int | None:
        with self.transaction() as tx:
            moment = parse_iso(self._tx_now(tx)).timestamp()
            for index, (bucket, window_s, limit) in enumerate(hits):
                if self._hit(tx, moment, bucket, window_s) > limit:
                    return index
        return None

    @staticmethod
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

    def counter_value(self, bucket: str, window_s: int) -> int:
        with self.transaction(write=False) as tx:
            moment = parse_iso(self._tx_now(tx)).timestamp()
            window_start = iso(datetime.fromtimestamp(moment - moment % window_s, UTC))
            row = tx.one(
                "SELECT count FROM rate_counters WHERE bucket = ? AND window_start = ?",
                (bucket, window_start),
            )
        return int(row["count"]) if row else 0


__all__ = ["CounterRows"]
