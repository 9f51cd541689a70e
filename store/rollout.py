"""Release-control state in the store: the active-release pointer, rollouts, thread pins, shadows.

Every change is one transaction that re-reads the rows it changes (under the write lock: SQLite's
``BEGIN IMMEDIATE``, a transaction-scoped advisory lock on PostgreSQL), refuses rows whose MAC
does not verify (never re-signing them), checks the expected phase and version, and writes new
MACs, and binds each written row's version into the audit chain in the same transaction
(`toolgate.store.record_versions`), so an older row copied back reads as replayed. A thread's pin
is an insert-if-absent: however many processes pin one thread at once, the database keeps the
first (and binds it) and everyone reads that one back, so a thread never changes arm.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from toolgate.canonical import canonical_json
from toolgate.clock import iso, new_id, utcnow
from toolgate.errors import ReleaseControlError, StoreError
from toolgate.store.base import Store, Tx
from toolgate.store.record_versions import (
    Bound,
    VersionedKind,
    VersionedRow,
    bind,
    bound_sql,
    freshness,
    pin_key,
)
from toolgate.store.rollout_records import (
    COMPONENT,
    MIGRATIONS,
    ReleasePointer,
    ReleaseState,
    Rollout,
    ShadowRecord,
    ThreadPin,
)

_LOCK = 0x7467_0003
"""PostgreSQL advisory lock serializing release-control changes (SQLite's writer lock does it there)."""

_POINTER = (
    f"SELECT r.*, {bound_sql('release_pointer', 'r.configured')} AS bound_sha256 FROM release_pointer r"
)
_ROLLOUT = (
    f"SELECT r.*, {bound_sql('release_rollout', 'r.rollout_id')} AS bound_sha256 FROM release_rollouts r"
)
_PIN_KEY = "r.rollout_id || ':' || r.thread_id"
"""`pin_key` in SQL."""
_PIN = (
    f"SELECT r.*, {bound_sql('rollout_pin', _PIN_KEY)} AS bound_sha256"
    " FROM release_pins r WHERE r.rollout_id = ? AND r.thread_id = ?"
)
"""Each kind of row with the digest of its latest binding in the audit chain (one statement, one
snapshot)."""

Change = Callable[[ReleasePointer | None, Rollout | None], tuple[ReleasePointer | None, Rollout | None]]
"""Computes the new pointer and rollout from the current authentic ones (raise to refuse)."""


def _versioned(kind: VersionedKind, key: str, record: ReleasePointer | Rollout | ThreadPin) -> VersionedRow:
    """One release-control row as `toolgate.store.chain.verify_versions` judges it."""
    return VersionedRow(
        kind=kind,
        key=key,
        audited_key=key,
        version=getattr(record, "version", 1),
        content=record.content(),
        mac_ok=record.authentic or record.replayed,
    )


class RolloutStore:
    """Release-control rows of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ---- schema ------------------------------------------------------------------------

    def setup(self) -> None:
        """Create or upgrade the release-control tables."""
        self.store.migrate(COMPONENT, MIGRATIONS)

    def installed(self) -> bool:
        """True when the tables exist (a read-only store opened before any rollout may lack them)."""
        try:
            with self.store.transaction(write=False) as tx:
                row = tx.one(
                    "SELECT COALESCE(MAX(version), 0) AS v FROM toolgate_schema WHERE component = ?",
                    (COMPONENT,),
                )
        except StoreError:
            return False
        return bool(row and int(row["v"]) >= len(MIGRATIONS))

    # ---- reading -------------------------------------------------------------------------

    def _now(self, tx: Tx) -> str:
        tx_now = getattr(self.store, "_tx_now", None)
        return tx_now(tx) if tx_now is not None else iso(utcnow())

    def _verify(self, record: Any, mac: str | None, kind: VersionedKind, key: str, bound: str | None) -> Any:
        """``record`` marked authentic when its MAC verifies and it is the latest audited version."""
        if not self.store.keys.verify("release", record.content(), mac):
            return record
        version = getattr(record, "version", 1)
        replayed = freshness(kind, key, version, record.content(), bound) == "replayed"
        return dataclasses.replace(record, authentic=not replayed, replayed=replayed)

    def _pointer(self, row: dict[str, Any] | None) -> ReleasePointer | None:
        if row is None:
            return None
        data = dict(row)
        mac, bound = data.pop("mac"), data.pop("bound_sha256", None)
        pointer = ReleasePointer(**data)
        return self._verify(pointer, mac, "release_pointer", pointer.configured, bound)

    def _rollout(self, row: dict[str, Any] | None) -> Rollout | None:
        if row is None:
            return None
        data = dict(row)
        mac, bound = data.pop("mac"), data.pop("bound_sha256", None)
        rollout = Rollout(**data)
        return self._verify(rollout, mac, "release_rollout", rollout.rollout_id, bound)

    def _read(self, tx: Tx, configured: str, *, lock: bool = False) -> ReleaseState:
        if lock and getattr(self.store, "dialect", "") == "postgres":
            tx.execute(f"SELECT pg_advisory_xact_lock({_LOCK})")
        pointer = self._pointer(tx.one(f"{_POINTER} WHERE r.configured = ?", (configured,)))
        rollout = None
        if pointer is not None and pointer.rollout_id:
            row = tx.one(f"{_ROLLOUT} WHERE r.rollout_id = ?", (pointer.rollout_id,))
            rollout = self._rollout(row)
            if rollout is None:
                return ReleaseState(pointer, None, missing_rollout=True)
            if rollout.configured != configured:  # a row moved between configurations
                rollout = dataclasses.replace(rollout, authentic=False)
        return ReleaseState(pointer, rollout)

    def state(self, configured: str) -> ReleaseState:
        """The pointer and current rollout of ``configured`` (check `ReleaseState.tampered`)."""
        with self.store.transaction(write=False) as tx:
            return self._read(tx, configured)

    def get_rollout(self, rollout_id: str) -> Rollout | None:
        """One rollout by id, current or past (check ``authentic``), or None."""
        with self.store.transaction(write=False) as tx:
            return self._rollout(tx.one(f"{_ROLLOUT} WHERE r.rollout_id = ?", (rollout_id,)))

    def versioned_rows(self) -> list[VersionedRow]:
        """Every pointer, rollout and rollout pin as the audit chain's version bindings judge them."""
        with self.store.transaction(write=False) as tx:
            pointers = [self._pointer(r) for r in tx.execute(f"{_POINTER} ORDER BY r.configured")]
            rollouts = [self._rollout(r) for r in tx.execute(f"{_ROLLOUT} ORDER BY r.rollout_id")]
            pins = [
                self._pin(r)
                for r in tx.execute(
                    _PIN.replace(
                        " WHERE r.rollout_id = ? AND r.thread_id = ?", " ORDER BY r.rollout_id, r.thread_id"
                    )
                )
            ]
        return [
            *(_versioned("release_pointer", p.configured, p) for p in pointers if p is not None),
            *(_versioned("release_rollout", r.rollout_id, r) for r in rollouts if r is not None),
            *(_versioned("rollout_pin", pin_key(p.rollout_id, p.thread_id), p) for p in pins),
        ]

    @staticmethod
    def _audit_seq(tx: Tx) -> int:
        """The newest audit sequence number (0 for an empty log): where a new rollout's signals begin."""
        row = tx.one("SELECT COALESCE(MAX(seq), 0) AS seq FROM audit_events")
        return int(row["seq"]) if row else 0

    # ---- changing ------------------------------------------------------------------------

    def change(self, configured: str, expect_version: int, change: Change) -> ReleaseState:
        """Apply ``change`` to the current rows in one transaction.

        Refuses (`ReleaseControlError`, nothing written) when a row does not verify
        (``release_state_tampered``) or the pointer's version is no longer ``expect_version``
        (``state_changed``: someone else changed release control since it was read). Each row
        written is bound into the audit chain with its new version, in the same transaction."""
        with self.store.transaction() as tx:
            current = self._read(tx, configured, lock=True)
            if current.tampered:
                raise ReleaseControlError(
                    "release_state_tampered",
                    f"release-control records of {configured} do not verify ({', '.join(current.tampered)});"
                    " refusing to act on or re-sign them",
                )
            version = current.pointer.version if current.pointer else 0
            if version != expect_version:
                raise ReleaseControlError(
                    "state_changed", "release control changed since it was read; look again and retry"
                )
            pointer, rollout = change(current.pointer, current.rollout)
            now = self._now(tx)
            written: list[Bound] = []
            if rollout is not None:
                insert = current.rollout is None or rollout.rollout_id != current.rollout.rollout_id
                rollout = dataclasses.replace(
                    rollout,
                    started_at=now if insert else rollout.started_at,  # the store's clock, never a caller's
                    started_seq=self._audit_seq(tx) if insert else rollout.started_seq,
                    version=1 if insert else rollout.version + 1,
                    updated_at=now,
                    authentic=True,
                )
                self._write_rollout(tx, rollout, insert=insert)
                written.append(
                    Bound(
                        kind="release_rollout",
                        key=rollout.rollout_id,
                        version=rollout.version,
                        content=rollout.content(),
                        tool_release=rollout.candidate,
                    )
                )
            if pointer is not None:
                pointer = dataclasses.replace(pointer, version=version + 1, updated_at=now, authentic=True)
                self._write_pointer(tx, pointer, insert=current.pointer is None)
                written.append(
                    Bound(
                        kind="release_pointer",
                        key=pointer.configured,
                        version=pointer.version,
                        content=pointer.content(),
                        tool_release=pointer.active,
                    )
                )
            bind(tx, self.store.audit, written)
        return ReleaseState(pointer, rollout)

    def _write_pointer(self, tx: Tx, pointer: ReleasePointer, *, insert: bool) -> None:
        mac = self.store.keys.mac("release", pointer.content())
        values = (
            pointer.active,
            pointer.active_sha256,
            pointer.previous,
            pointer.previous_sha256,
            pointer.rollout_id,
            pointer.version,
            pointer.updated_at,
            mac,
            pointer.configured,
        )
        if insert:
            tx.send(
                "INSERT INTO release_pointer (active, active_sha256, previous, previous_sha256, rollout_id,"
                " version, updated_at, mac, configured) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )
        else:
            tx.send(
                "UPDATE release_pointer SET active = ?, active_sha256 = ?, previous = ?, previous_sha256 = ?,"
                " rollout_id = ?, version = ?, updated_at = ?, mac = ? WHERE configured = ?",
                values,
            )

    def _write_rollout(self, tx: Tx, rollout: Rollout, *, insert: bool) -> None:
        data = rollout.content()
        data.pop("kind")
        data["mac"] = self.store.keys.mac("release", rollout.content())
        columns = list(data)
        if insert:
            tx.send(
                f"INSERT INTO release_rollouts ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
                tuple(data.values()),
            )
        else:
            sets = ", ".join(f"{c} = ?" for c in columns if c != "rollout_id")
            tx.send(
                f"UPDATE release_rollouts SET {sets} WHERE rollout_id = ?",
                (*(data[c] for c in columns if c != "rollout_id"), rollout.rollout_id),
            )

    @staticmethod
    def new_rollout_id() -> str:
        """A fresh rollout id."""
        return new_id("rol")

    # ---- pins ----------------------------------------------------------------------------

    def pin(self, rollout_id: str, thread_id: str, release: str, arm: str) -> ThreadPin:
        """Pin ``thread_id`` to ``release`` and ``arm`` unless it is pinned already; the stored pin
        (the first one, whoever wrote it) comes back either way."""
        with self.store.transaction() as tx:
            now = self._now(tx)
            pin = ThreadPin(
                rollout_id=rollout_id, thread_id=thread_id, release=release, arm=arm, pinned_at=now
            )
            inserted = tx.execute(
                "INSERT INTO release_pins (rollout_id, thread_id, release, arm, pinned_at, mac)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING thread_id",
                (rollout_id, thread_id, release, arm, now, self.store.keys.mac("release", pin.content())),
            )
            row = tx.one(_PIN, (rollout_id, thread_id))
            if inserted:
                key = pin_key(rollout_id, thread_id)
                bound = Bound(
                    kind="rollout_pin",
                    key=key,
                    version=1,
                    content=pin.content(),
                )
                bind(tx, self.store.audit, [bound])
        assert row is not None
        return self._pin(row)

    def get_pin(self, rollout_id: str, thread_id: str) -> ThreadPin | None:
        """The thread's pin in ``rollout_id`` (check ``authentic``), or None."""
        with self.store.transaction(write=False) as tx:
            row = tx.one(_PIN, (rollout_id, thread_id))
        return self._pin(row) if row else None

    def _pin(self, row: dict[str, Any]) -> ThreadPin:
        data = dict(row)
        mac, bound = data.pop("mac"), data.pop("bound_sha256", None)
        pin = ThreadPin(**data)
        return self._verify(pin, mac, "rollout_pin", pin_key(pin.rollout_id, pin.thread_id), bound)

    # ---- shadow decisions --------------------------------------------------------------

    def record_shadow(self, record: ShadowRecord) -> None:
        """Append the decisions of one shadowed model turn."""
        with self.store.transaction() as tx:
            tx.execute(
                "INSERT INTO shadow_decisions (shadow_id, rollout_id, thread_id, turn, control_release,"
                " candidate_release, control, candidate, candidate_calls, matched, error, recorded_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    new_id("shd"),
                    record.rollout_id,
                    record.thread_id,
                    record.turn,
                    record.control_release,
                    record.candidate_release,
                    canonical_json(record.control),
                    canonical_json(record.candidate),
                    len(record.candidate),
                    1 if record.matched else 0,
                    record.error,
                    self._now(tx),
                ),
            )

    def shadow_records(self, rollout_id: str) -> list[ShadowRecord]:
        """Every shadowed turn of ``rollout_id``, oldest first."""
        with self.store.transaction(write=False) as tx:
            rows = tx.execute(
                "SELECT * FROM shadow_decisions WHERE rollout_id = ? ORDER BY recorded_at, shadow_id",
                (rollout_id,),
            )
        return [
            ShadowRecord(
                rollout_id=r["rollout_id"],
                thread_id=r["thread_id"],
                turn=int(r["turn"]),
                control_release=r["control_release"],
                candidate_release=r["candidate_release"],
                control=json.loads(r["control"]),
                candidate=json.loads(r["candidate"]),
                matched=bool(r["matched"]),
                error=r["error"],
                recorded_at=r["recorded_at"],
            )
            for r in rows
        ]

    def shadow_totals(self, rollout_id: str) -> tuple[int, int, int]:
        """``(turns, candidate calls, mismatched turns)`` shadowed in ``rollout_id``."""
        with self.store.transaction(write=False) as tx:
            row = tx.one(
                "SELECT COUNT(*) AS turns, COALESCE(SUM(candidate_calls), 0) AS calls,"
                " COALESCE(SUM(1 - matched), 0) AS mismatched FROM shadow_decisions WHERE rollout_id = ?",
                (rollout_id,),
            )
        assert row is not None
        return int(row["turns"]), int(row["calls"]), int(row["mismatched"])


__all__ = ["Change", "RolloutStore"]
