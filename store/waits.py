"""Durable waits: a thread suspended until the job its write started is done, as store records.

A write that declares a `toolgate.tools.waits.Wait` opens one wait per operation when it completes
(`open_wait`); the worker checks the job when the wait is due by the store's clock
(`due_waits`) and records each check in one conditional update (`record_wait_check`): the job
done, or the wait past its expiry by the store's clock, or a check refused for want of the
requesting user's sealed credentials (outcome ``refused``), makes it ``ready``; the resumed thread
marks it ``resumed``. Every row carries a MAC under the store's ``wait`` key over what gives it
authority (thread, job, state, outcome, result): a row changed outside the store reads back with
``verified=False``, and nothing acts on it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from toolgate.clock import later
from toolgate.store.tx import Database

WaitState = Literal["waiting", "ready", "resumed"]
WaitOutcome = Literal["", "done", "expired", "refused"]


@dataclass(frozen=True, kw_only=True)
class WaitOf:
    """Whose wait it is and for what: the completed write, its thread and requester, the job."""

    operation_key: str
    thread_id: str
    tenant_id: str
    user_id: str
    call_id: str
    tool: str
    status_tool: str
    job_ref: str


@dataclass(frozen=True, kw_only=True)
class WaitIn(WaitOf):
    """What opens a wait: whose it is and the schedule of its checks."""

    every_s: float
    max_wait_s: float


@dataclass(frozen=True, kw_only=True)
class WaitRecord(WaitOf):
    """One stored wait."""

    state: WaitState
    outcome: WaitOutcome
    checks: int
    """Status checks recorded so far."""
    last_status: str
    """The job's status at the latest check (``error:<kind>`` when the check failed)."""
    result: dict[str, Any] | None
    """The status tool's (sanitized) result at the latest check."""
    every_s: float
    next_check_at: str
    expires_at: str
    created_at: str
    updated_at: str
    verified: bool
    """The row's MAC matches: it was written by the store, not changed outside it."""

    @property
    def final(self) -> bool:
        """The wait is over (ready or already resumed) and its row is the store's own."""
        return self.verified and self.state in ("ready", "resumed")

    def sealed_fields(self) -> dict[str, Any]:
        """What the row's MAC covers."""
        return wait_mac_fields(
            self.operation_key,
            self.thread_id,
            self.tenant_id,
            self.user_id,
            self.call_id,
            self.job_ref,
            self.state,
            self.outcome,
            self.checks,
            self.last_status,
            self.result,
            self.expires_at,
        )

    def facts(self) -> dict[str, Any]:
        """The wait as ``key=value`` facts (CLI output, stream events)."""
        return {
            "wait": self.operation_key,
            "thread": self.thread_id,
            "tool": self.tool,
            "job": self.job_ref,
            "state": self.state,
            "outcome": self.outcome or "none",
            "checks": self.checks,
            "job_status": self.last_status or "none",
            "next_check_at": self.next_check_at,
            "expires_at": self.expires_at,
            "verified": str(self.verified).lower(),
        }


def wait_mac_fields(*values: Any) -> dict[str, Any]:
    """The MAC'd fields of a wait row, by name (one definition for writing and checking)."""
    names = (
        "operation_key",
        "thread_id",
        "tenant_id",
        "user_id",
        "call_id",
        "job_ref",
        "state",
        "outcome",
        "checks",
        "last_status",
        "result",
        "expires_at",
    )
    return dict(zip(names, values, strict=True))


class DurableWaits:
    """The durable waits of one store (``store.waits``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _wait(self, row: dict[str, Any] | None) -> WaitRecord | None:
        if row is None:
            return None
        fields = {k: row[k] for k in WaitRecord.__dataclass_fields__ if k not in ("result", "verified")}
        result = json.loads(row["result"]) if row["result"] is not None else None
        unverified = WaitRecord(**fields, result=result, verified=False)
        verified = self._db.keys.verify("wait", unverified.sealed_fields(), row["mac"])
        return WaitRecord(**fields, result=result, verified=verified)

    def _wait_mac(self, sealed: dict[str, Any]) -> str:
        """The MAC of a row's sealed fields (``result`` as a value, not as its JSON text)."""
        return self._db.keys.mac("wait", wait_mac_fields(*(sealed[k] for k in _MAC_ORDER)))

    def open(self, wait: WaitIn) -> WaitRecord:
        """Open the wait of ``wait.operation_key`` (first check ``every_s`` from now, expiry
        ``max_wait_s`` from now, by the store's clock); an existing wait is returned unchanged."""
        with self._db.transaction() as tx:
            now = self._db._tx_now(tx)
            row: dict[str, Any] = {
                **{k: getattr(wait, k) for k in WaitIn.__dataclass_fields__ if k != "max_wait_s"},
                "state": "waiting",
                "outcome": "",
                "checks": 0,
                "last_status": "",
                "result": None,
                "next_check_at": later(now, wait.every_s),
                "expires_at": later(now, wait.max_wait_s),
                "created_at": now,
                "updated_at": now,
            }
            row["mac"] = self._wait_mac(row)
            columns = list(row)
            tx.send(  # with the read of the stored wait that follows
                f"INSERT INTO job_waits ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"
                " ON CONFLICT (operation_key) DO NOTHING",
                [row[c] for c in columns],
            )
            stored = self._wait(
                tx.one("SELECT * FROM job_waits WHERE operation_key = ?", (wait.operation_key,))
            )
        assert stored is not None
        return stored

    def get(self, operation_key: str) -> WaitRecord | None:
        """The wait of an operation, or None."""
        with self._db.transaction(write=False) as tx:
            return self._wait(tx.one("SELECT * FROM job_waits WHERE operation_key = ?", (operation_key,)))

    def due(self, limit: int) -> list[WaitRecord]:
        """Waits still ``waiting`` whose next check is due by the store's clock, oldest due first."""
        with self._db.transaction(write=False) as tx:
            rows = tx.execute(
                "SELECT * FROM job_waits WHERE state = 'waiting' AND next_check_at <= ?"
                " ORDER BY next_check_at, operation_key LIMIT ?",
                (self._db._tx_now(tx), limit),
            )
        return [w for w in map(self._wait, rows) if w is not None]

    def record_check(
        self,
        operation_key: str,
        *,
        checks_seen: int,
        job_status: str,
        result: dict[str, Any] | None,
        done: bool,
        refused: bool = False,
    ) -> WaitRecord | None:
        """Record one check of a ``waiting``, verified wait that still has ``checks_seen`` checks
        (so two workers never both record one): ``done`` makes it ``ready`` (outcome ``done``);
        ``refused`` (the check could not run as the requesting user) makes it ``ready`` with
        outcome ``refused``; otherwise past its expiry by the store's clock it becomes ``ready``
        (``expired``), else the next check is due ``every_s`` from now. None, with nothing changed, when the wait is
        missing, not waiting, tampered with, or another check was recorded first."""
        with self._db.transaction() as tx:
            current = self._wait(tx.one("SELECT * FROM job_waits WHERE operation_key = ?", (operation_key,)))
            if current is None or not current.verified or current.state != "waiting":
                return None
            now = self._db._tx_now(tx)
            outcome = "done" if done else ("expired" if now >= current.expires_at else "")
            outcome = "refused" if refused else outcome
            result = json.loads(json.dumps(result, sort_keys=True)) if result is not None else None
            row = {
                **current.sealed_fields(),
                "state": "ready" if outcome else "waiting",
                "outcome": outcome,
                "checks": checks_seen + 1,
                "last_status": job_status[:64],
                "result": result,
            }
            changed = tx.execute(
                "UPDATE job_waits SET state = ?, outcome = ?, checks = ?, last_status = ?, result = ?,"
                " next_check_at = ?, updated_at = ?, mac = ?"
                " WHERE operation_key = ? AND state = 'waiting' AND checks = ? RETURNING operation_key",
                (
                    row["state"],
                    outcome,
                    row["checks"],
                    row["last_status"],
                    json.dumps(result, sort_keys=True) if result is not None else None,
                    later(now, current.every_s),
                    now,
                    self._wait_mac(row),
                    operation_key,
                    checks_seen,
                ),
            )
            if not changed:
                return None
            return self._wait(tx.one("SELECT * FROM job_waits WHERE operation_key = ?", (operation_key,)))

    def resume(self, operation_key: str) -> bool:
        """Mark a verified ``ready`` wait ``resumed`` (its thread has its result); False otherwise."""
        with self._db.transaction() as tx:
            current = self._wait(tx.one("SELECT * FROM job_waits WHERE operation_key = ?", (operation_key,)))
            if current is None or not current.verified or current.state != "ready":
                return False
            row = {**current.sealed_fields(), "state": "resumed"}
            changed = tx.execute(
                "UPDATE job_waits SET state = 'resumed', updated_at = ?, mac = ?"
                " WHERE operation_key = ? AND state = 'ready' RETURNING operation_key",
                (self._db._tx_now(tx), self._wait_mac(row), operation_key),
            )
        return bool(changed)

    def list(self, state: WaitState | None = None, limit: int = 100) -> list[WaitRecord]:
        """Waits, newest first, optionally in one state."""
        where, params = ("WHERE state = ?", [state]) if state else ("", [])
        with self._db.transaction(write=False) as tx:
            rows = tx.execute(
                f"SELECT * FROM job_waits {where} ORDER BY created_at DESC, operation_key LIMIT ?",
                (*params, limit),
            )
        return [w for w in map(self._wait, rows) if w is not None]


_MAC_ORDER = tuple(wait_mac_fields(*range(12)))
"""The MAC'd columns, in `wait_mac_fields`' order."""


__all__ = ["DurableWaits", "WaitIn", "WaitOf", "WaitOutcome", "WaitRecord", "WaitState", "wait_mac_fields"]
