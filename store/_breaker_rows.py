"""Shared circuit-breaker state in SQL: one row per breaker, changed by conditional updates on the
store's clock (`toolgate.store.breakers`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolgate.clock import later, parse_iso
from toolgate.store.breakers import Admit, BreakerRow

if TYPE_CHECKING:
    from toolgate.store.base import Tx

_COLUMNS = "name, state, failures, open_until, probe_owner, probe_until, times_opened"


def _row(raw: dict[str, Any], now: str) -> BreakerRow:
    retry = 0.0
    if raw["state"] == "open":
        retry = max(0.0, (parse_iso(raw["open_until"]) - parse_iso(now)).total_seconds())
    elif raw["state"] == "half_open":
        retry = max(0.0, (parse_iso(raw["probe_until"]) - parse_iso(now)).total_seconds())
    return BreakerRow(
        name=str(raw["name"]),
        state=raw["state"],
        failures=int(raw["failures"]),
        retry_in_s=retry,
        probe_owner=raw["probe_owner"],
        times_opened=int(raw["times_opened"]),
    )


class BreakerRows:
    """The breaker part of `SqlStore` (mixed in; uses its transactions and clock)."""

    if TYPE_CHECKING:

        def transaction(self, *, write: bool = True) -> Any: ...

        def _tx_now(self, tx: Tx) -> str: ...

    def breaker_admit(self, name: str, holder: str, probe_lease_s: float) -> tuple[Admit, float, int]:
        with self.transaction(write=False) as tx:
            now = self._tx_now(tx)
            raw = tx.one(f"SELECT {_COLUMNS} FROM breaker_states WHERE name = ?", (name,))
        if raw is None or raw["state"] == "closed":
            return "closed", 0.0, int(raw["failures"]) if raw else 0
        row = _row(raw, now)
        if row.retry_in_s > 0:
            return "open", row.retry_in_s, row.failures
        with self.transaction() as tx:  # the one probe: whoever's conditional update matches
            now = self._tx_now(tx)
            taken = tx.execute(
                "UPDATE breaker_states SET state = 'half_open', probe_owner = ?, probe_until = ?"
                " WHERE name = ? AND ((state = 'open' AND open_until <= ?)"
                " OR (state = 'half_open' AND probe_until <= ?)) RETURNING failures",
                (holder, later(now, probe_lease_s), name, now, now),
            )
            if taken:
                return "probe", 0.0, int(taken[0]["failures"])
            raw = tx.one(f"SELECT {_COLUMNS} FROM breaker_states WHERE name = ?", (name,))
        if raw is None or raw["state"] == "closed":  # closed meanwhile by another's probe
            return "closed", 0.0, int(raw["failures"]) if raw else 0
        row = _row(raw, now)
        return "open", row.retry_in_s, row.failures

    def breaker_report(
        self, name: str, holder: str, *, failed: bool, failure_threshold: int, reset_timeout_s: float
    ) -> BreakerRow:
        with self.transaction() as tx:
            now = self._tx_now(tx)
            if failed:
                raw = tx.execute(
                    f"INSERT INTO breaker_states ({_COLUMNS}) VALUES (?, 'closed', 1, ?, NULL, ?, 0)"
                    " ON CONFLICT (name) DO UPDATE SET failures = breaker_states.failures + 1"
                    f" RETURNING {_COLUMNS}",
                    (name, now, now),
                )[0]
                probe = raw["state"] == "half_open" and raw["probe_owner"] == holder
                if probe or (raw["state"] == "closed" and int(raw["failures"]) >= failure_threshold):
                    raw = tx.execute(
                        "UPDATE breaker_states SET state = 'open', open_until = ?, probe_owner = NULL,"
                        " probe_until = ?, times_opened = times_opened + 1 WHERE name = ?"
                        f" RETURNING {_COLUMNS}",
                        (later(now, reset_timeout_s), now, name),
                    )[0]
                return _row(raw, now)
            tx.execute(
                "UPDATE breaker_states SET state = 'closed', failures = 0, probe_owner = NULL"
                " WHERE name = ? AND ((state = 'closed' AND failures > 0)"
                " OR (state = 'half_open' AND probe_owner = ?))",
                (name, holder),
            )
            raw = tx.one(f"SELECT {_COLUMNS} FROM breaker_states WHERE name = ?", (name,))
        if raw is None:
            return BreakerRow(name, "closed", 0, 0.0, None, 0)
        return _row(raw, now)

    def breaker_release(self, name: str, holder: str) -> bool:
        with self.transaction() as tx:
            released = tx.execute(
                "UPDATE breaker_states SET state = 'open', probe_owner = NULL"
                " WHERE name = ? AND state = 'half_open' AND probe_owner = ? RETURNING name",
                (name, holder),
            )
        return bool(released)

    def breaker_row(self, name: str) -> BreakerRow | None:
        with self.transaction(write=False) as tx:
            now = self._tx_now(tx)
            raw = tx.one(f"SELECT {_COLUMNS} FROM breaker_states WHERE name = ?", (name,))
        return _row(raw, now) if raw else None


__all__ = ["BreakerRows"]
