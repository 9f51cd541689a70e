"""Circuit-breaker state shared by every process on one store.

A breaker opened by one process refuses in every other, and in half-open exactly one caller across
all processes gets the probe: the probe is claimed by one conditional update. Every time decision
(how long the breaker stays open, when an unreported probe lapses) is judged by the store's clock,
so a process with a skewed clock can neither reopen nor close a breaker early
(`toolgate.policy.shared_breaker` is the breaker on top of these rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from toolgate.clock import later, parse_iso
from toolgate.store.tx import Database

Admit = Literal["closed", "probe", "open"]


@dataclass(frozen=True)
class BreakerRow:
    """One breaker's shared state."""

    name: str
    state: Literal["closed", "open", "half_open"]
    failures: int
    """Consecutive dependency failures recorded (any process)."""
    retry_in_s: float
    """Seconds of the store's clock until an open breaker lets a probe through (0 otherwise)."""
    probe_owner: str | None
    times_opened: int


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


class BreakerStates:
    """The shared circuit-breaker states of one store (``store.breakers``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def admit(self, name: str, holder: str, probe_lease_s: float) -> tuple[Admit, float, int]:
        """May ``holder`` call the dependency behind breaker ``name`` now? ``("closed", 0, failures)``
        when the breaker is closed; ``("probe", 0, failures)`` when ``holder`` just claimed the one
        probe (the breaker was open past its timeout, or the last probe went unreported for
        ``probe_lease_s``); ``("open", retry_in_s, failures)`` otherwise. Judged by the store's clock."""
        with self._db.transaction(write=False) as tx:
            now = self._db._tx_now(tx)
            raw = tx.one(f"SELECT {_COLUMNS} FROM breaker_states WHERE name = ?", (name,))
        if raw is None or raw["state"] == "closed":
            return "closed", 0.0, int(raw["failures"]) if raw else 0
        row = _row(raw, now)
        if row.retry_in_s > 0:
            return "open", row.retry_in_s, row.failures
        with self._db.transaction() as tx:  # the one probe: whoever's conditional update matches
            now = self._db._tx_now(tx)
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

    def report(
        self, name: str, holder: str, *, failed: bool, failure_threshold: int, reset_timeout_s: float
    ) -> BreakerRow:
        """Record one call's verdict. A failure counts; at ``failure_threshold`` consecutive ones, or
        when it is ``holder``'s probe, the breaker opens for ``reset_timeout_s`` of the store's clock.
        A success resets the count and, from the probe's holder, closes the breaker; a success
        reported while the breaker is open (a straggler) changes nothing. Returns the row after."""
        with self._db.transaction() as tx:
            now = self._db._tx_now(tx)
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
            tx.send(  # with the read of the state that follows
                "UPDATE breaker_states SET state = 'closed', failures = 0, probe_owner = NULL"
                " WHERE name = ? AND ((state = 'closed' AND failures > 0)"
                " OR (state = 'half_open' AND probe_owner = ?))",
                (name, holder),
            )
            after = tx.one(f"SELECT {_COLUMNS} FROM breaker_states WHERE name = ?", (name,))
        if after is None:
            return BreakerRow(name, "closed", 0, 0.0, None, 0)
        return _row(after, now)

    def release(self, name: str, holder: str) -> bool:
        """Give back ``holder``'s unreported probe (back to open with its old timer, so the next
        caller may probe at once); False when ``holder`` holds no probe of ``name``."""
        with self._db.transaction() as tx:
            released = tx.execute(
                "UPDATE breaker_states SET state = 'open', probe_owner = NULL"
                " WHERE name = ? AND state = 'half_open' AND probe_owner = ? RETURNING name",
                (name, holder),
            )
        return bool(released)

    def row(self, name: str) -> BreakerRow | None:
        """The shared state of ``name`` (None: never failed anywhere)."""
        with self._db.transaction(write=False) as tx:
            now = self._db._tx_now(tx)
            raw = tx.one(f"SELECT {_COLUMNS} FROM breaker_states WHERE name = ?", (name,))
        return _row(raw, now) if raw else None


__all__ = ["Admit", "BreakerRow", "BreakerStates"]
