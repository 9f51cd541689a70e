"""Durable waits in SQL: one MAC'd row per waited operation, progressed by conditional updates."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from toolgate.clock import later
from toolgate.store.waits import WaitIn, WaitRecord, WaitState, wait_mac_fields

if TYPE_CHECKING:
    from toolgate.store.keys import Keyring
    from toolgate.store.tx import Tx


class WaitRows:
    """The durable-wait part of `SqlStore` (mixed in; uses its transactions, clock and keys)."""

    if TYPE_CHECKING:
        keys: Keyring

        def transaction(self, *, write: bool = True) -> Any: ...

        def _tx_now(self, tx: Tx) -> str: ...

    def _wait(self, row: dict[str, Any] | None) -> WaitRecord | None:
        if row is None:
            return None
        fields = {k: row[k] for k in WaitRecord.__dataclass_fields__ if k not in ("result", "verified")}
        result = json.loads(row["result"]) if row["result"] is not None else None
        unverified = WaitRecord(**fields, result=result, verified=False)
        verified = self.keys.verify("wait", unverified.sealed_fields(), row["mac"])
        return WaitRecord(**fields, result=result, verified=verified)

    def _wait_mac(self, sealed: dict[str, Any]) -> str:
        """The MAC of a row's sealed fields (``result`` as a value, not as its JSON text)."""
        return self.keys.mac("wait", wait_mac_fields(*(sealed[k] for k in _MAC_ORDER)))

    def open_wait(self, wait: WaitIn) -> WaitRecord:
        with self.transaction() as tx:
            now = self._tx_now(tx)
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
            tx.execute(
                f"INSERT INTO job_waits ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"
                " ON CONFLICT (operation_key) DO NOTHING",
                [row[c] for c in columns],
            )
            stored = self._wait(
                tx.one("SELECT * FROM job_waits WHERE operation_key = ?", (wait.operation_key,))
            )
        assert stored is not None
        return stored

    def get_wait(self, operation_key: str) -> WaitRecord | None:
        with self.transaction(write=False) as tx:
            return self._wait(tx.one("SELECT * FROM job_waits WHERE operation_key = ?", (operation_key,)))

    def due_waits(self, limit: int) -> list[WaitRecord]:
        with self.transaction(write=False) as tx:
            rows = tx.execute(
                "SELECT * FROM job_waits WHERE state = 'waiting' AND next_check_at <= ?"
                " ORDER BY next_check_at, operation_key LIMIT ?",
                (self._tx_now(tx), limit),
            )
        return [w for w in map(self._wait, rows) if w is not None]

    def record_wait_check(
        self,
        operation_key: str,
        *,
        checks_seen: int,
        job_status: str,
        result: dict[str, Any] | None,
        done: bool,
        refused: bool = False,
    ) -> WaitRecord | None:
        with self.transaction() as tx:
            current = self._wait(tx.one("SELECT * FROM job_waits WHERE operation_key = ?", (operation_key,)))
            if current is None or not current.verified or current.state != "waiting":
                return None
            now = self._tx_now(tx)
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

    def resume_wait(self, operation_key: str) -> bool:
        with self.transaction() as tx:
            current = self._wait(tx.one("SELECT * FROM job_waits WHERE operation_key = ?", (operation_key,)))
            if current is None or not current.verified or current.state != "ready":
                return False
            row = {**current.sealed_fields(), "state": "resumed"}
            changed = tx.execute(
                "UPDATE job_waits SET state = 'resumed', updated_at = ?, mac = ?"
                " WHERE operation_key = ? AND state = 'ready' RETURNING operation_key",
                (self._tx_now(tx), self._wait_mac(row), operation_key),
            )
        return bool(changed)

    def list_waits(self, state: WaitState | None = None, limit: int = 100) -> list[WaitRecord]:
        where, params = ("WHERE state = ?", [state]) if state else ("", [])
        with self.transaction(write=False) as tx:
            rows = tx.execute(
                f"SELECT * FROM job_waits {where} ORDER BY created_at DESC, operation_key LIMIT ?",
                (*params, limit),
            )
        return [w for w in map(self._wait, rows) if w is not None]


_MAC_ORDER = tuple(wait_mac_fields(*range(12)))
"""The MAC'd columns, in `wait_mac_fields`' order."""


__all__ = ["WaitRows"]
