"""Operations, as the store keeps them: one row per operation key, moved only by conditional updates.

A transition, a claim or a lease renewal is one ``UPDATE ... WHERE status = ?`` that either
matches or does not; the database decides, never a Python check before the write. The audit
events of a change are linked in the change's own transaction (`AuditLog.link`). An operation
whose outcome stays unknown moves to the dead letters for a person to resolve.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from toolgate.canonical import canonical_json
from toolgate.clock import later
from toolgate.errors import InvalidTransitionError
from toolgate.store.audit_log import AuditLog
from toolgate.store.audit_records import AuditEventIn
from toolgate.store.leases import all_taken, release_statements, take_behind
from toolgate.store.records import DeadLetter, OperationRecord, OperationStatus
from toolgate.store.tx import Database, Written


def _loads(value: Any) -> Any:
    return json.loads(value) if value is not None else None


def operation_of(row: dict[str, Any]) -> OperationRecord:
    """An ``operations`` row as its record."""
    data = dict(row)
    data["result"] = _loads(data["result"])
    data["error"] = _loads(data["error"])
    return OperationRecord(**data)


def _dead_letter(row: dict[str, Any]) -> DeadLetter:
    data = dict(row)
    data["context"] = json.loads(data["context"])
    return DeadLetter(**data)


class _Lost(Exception):
    """A claim that did not win took a lease all the same (another claim of the same owner at the
    same instant won, so the leases' condition held): its transaction is rolled back."""


class Operations:
    """The operations of one store and their dead letters (``store.operations``)."""

    def __init__(self, db: Database, audit: AuditLog) -> None:
        self._db = db
        self._audit = audit

    def get(self, operation_key: str) -> OperationRecord | None:
        """The operation, or None."""
        with self._db.transaction(write=False) as tx:
            row = tx.one("SELECT * FROM operations WHERE operation_key = ?", (operation_key,))
        return operation_of(row) if row else None

    def get_at(self, operation_key: str) -> tuple[OperationRecord | None, datetime]:
        """The operation (or None) and the store's time, in one statement where the time costs a
        round trip (PostgreSQL): for a step that judges the row's expiry by the store's clock
        right after reading it (the execute node), never by the process's own."""
        clock = self._db._clock_sql()
        if clock is None:
            return self.get(operation_key), self._db.now()
        with self._db.transaction(write=False) as tx:
            row = tx.one(  # the one row of ``t`` joined to the operation's, if any
                f"SELECT {clock} AS store_now, o.* FROM operations o"
                " RIGHT JOIN (SELECT 1 AS one) t ON o.operation_key = ?",
                (operation_key,),
            )
        assert row is not None  # one row, with NULL columns when there is no such operation
        now = self._db._clock_heard(str(row.pop("store_now")))
        return (operation_of(row) if row["operation_key"] is not None else None), now

    def transition(
        self,
        operation_key: str,
        from_status: OperationStatus,
        to_status: OperationStatus,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        owner: str | None = None,
        lease_lapsed: bool = False,
        audit: Sequence[AuditEventIn] = (),
        release_leases: tuple[Sequence[str], str] | None = None,
        tenants: Mapping[tuple[str, str], str | None] | None = None,
    ) -> OperationRecord:
        """Conditional state change; raises `InvalidTransitionError` when the row is not in ``from_status``
        (or not owned by ``owner``, or, with ``lease_lapsed``, while its claim lease is still live).
        ``audit`` is appended in the same transaction, only when the change happened; so are the
        resource leases ``release_leases`` (keys, holder) given up (`ResourceLeases.release`).

        ``tenants``: the tenant of each ``(table, id)`` the events name, as the caller read it from
        the store's rows (an outcome: its claimed operation and its stored proposal). With them
        and no lease to judge, on PostgreSQL the change needs no reading first: its time is the
        server's clock in its own SQL (`Database._clock_sql`), its events are linked after the
        chain's head this process last saw (`Database._head_guess`), and the whole transaction
        is one script (a moved head is linked again under the lock, one round trip more)."""
        written = Written(0, "operations", "operation_key", operation_key)
        clock = self._db._clock_sql() if tenants is not None and audit and not lease_lapsed else None

        def change(updated_at: str) -> tuple[str, list[Any]]:
            """The conditional UPDATE, its time ``updated_at`` (``?``: a parameter in front)."""
            sql = f"UPDATE operations SET status = ?, updated_at = {updated_at}"
            params: list[Any] = [to_status]
            if result is not None:
                sql += ", result = ?"
                params.append(canonical_json(result))
            if error is not None:
                sql += ", error = ?"
                params.append(canonical_json(error))
            sql += " WHERE operation_key = ? AND status = ?"
            params += [operation_key, from_status]
            if owner is not None:
                sql += " AND owner = ?"
                params.append(owner)
            if lease_lapsed:
                sql += " AND (lease_expires_at IS NULL OR lease_expires_at < ?)"
            return sql + " RETURNING *", params

        with self._db.transaction() as tx:
            head = self._db._head_guess(tx) if clock is not None else None
            if head is not None and clock is not None and tenants is not None:
                # the server's clock in the change's own SQL, the head guessed: one script
                sql, params = change(clock)
                found: Mapping[tuple[str, str], str | None] = tenants
            else:
                # on PostgreSQL the time with the chain head and the events' tenants, read first:
                # the events need nothing the change returns, so they are linked before it runs
                head, found = self._audit.head_first(tx, audit) if audit else (None, {})
                now = self._db._tx_now(tx)  # that reading, on PostgreSQL (as a test's clock moves it)
                sql, params = change("?")
                params.insert(1, now)
                if lease_lapsed:
                    params.append(now)
            statements: list[tuple[str, Sequence[Any]]] = [(sql, tuple(params))]
            if release_leases is not None:  # behind the change; undone with it when it fails
                statements += release_statements(*release_leases)
            if head is not None:
                # committed in the change's own script, whether it happened or not: the leases
                # are given up only behind a change this transaction made
                wrote = self._db._wrote(tx, written)
                statements[1:] = [(f"{text} AND {wrote}", values) for text, values in statements[1:]]
                # the change, the leases given up, the events (only behind the change: the
                # chain's lock, a check that the head has not moved, their INSERT) and the
                # COMMIT as one script: two round trips in all, one after a guessed head.
                # Should a moved head stop the script, the change's row is read again (it was
                # made before the check).
                again = [
                    (
                        f"SELECT * FROM operations WHERE operation_key = ? AND {wrote}",
                        (operation_key,),
                    ),
                    *(("SELECT 1 WHERE false", ()) for _ in statements[1:]),
                ]
                answers = self._audit.link_ahead(tx, head, statements, again, audit, written, found)
            else:  # the change, the leases given up and the chain head behind them
                answers = self._audit.link_behind(tx, statements, [(audit, written)])
            rows = answers[0]
            if not rows and head is None:  # the leases stay: rolled back with the error
                current = tx.one("SELECT status FROM operations WHERE operation_key = ?", (operation_key,))
                raise InvalidTransitionError(
                    operation_key, from_status, current["status"] if current else None
                )
        if not rows:  # linked ahead: committed with nothing changed; the status is read after it
            current = self._status(operation_key)
            raise InvalidTransitionError(operation_key, from_status, current["status"] if current else None)
        return operation_of(rows[0])

    def _status(self, operation_key: str) -> dict[str, Any] | None:
        """The operation's status as a row, or None."""
        with self._db.transaction(write=False) as tx:
            return tx.one("SELECT status FROM operations WHERE operation_key = ?", (operation_key,))

    def claim(
        self,
        operation_key: str,
        owner: str,
        lease_s: float,
        *,
        audit: Sequence[AuditEventIn] = (),
        resources: tuple[Sequence[str], str] | None = None,
        tenants: Mapping[tuple[str, str], str | None] | None = None,
    ) -> OperationRecord | None:
        """The one statement that decides who executes: ``approved -> executing`` (with ``audit``
        appended in its transaction when this caller won).

        Only while the proposal has not expired, with a lease of ``lease_s`` from the store's clock.
        Returns the claimed row, or None when someone else owns (or finished) the operation or the
        approval expired. ``resources`` (keys, holder): the resource leases the claimed write needs,
        taken for ``lease_s`` in the claim's transaction after its update (the operation's row is
        locked before the leases' rows, as in the outcome's transaction that gives them up); when
        another holder has one, the claim is rolled back with them and `ResourcesBusy` raised.

        ``tenants``: the tenant of each ``(table, id)`` the events name, as the caller read it from
        the store's rows (the operation it claims, its stored proposal). With them, on PostgreSQL
        the claim needs no reading first: the store's time is the server's clock in the script's
        own SQL (`Database._script_clock`: the expiry, the lease and the resource leases judged
        and stamped by it), the events are linked after the chain's head this process last saw
        (`Database._head_guess`), and the whole transaction is one script.
        """
        keys, holder = resources if resources is not None else ((), owner)
        written = Written(0, "operations", "operation_key", operation_key)
        clock = self._db._script_clock() if tenants is not None and audit else None
        try:
            with self._db.transaction() as tx:
                head = self._db._head_guess(tx) if clock is not None else None
                until = self._db._script_clock(lease_s) if head is not None else None
                found: Mapping[tuple[str, str], str | None]
                if head is not None and clock is not None and until is not None and tenants is not None:
                    now, lease, found = clock, until, tenants  # SQL: the server's, in the script
                    claim: tuple[str, Sequence[Any]] = (
                        f"UPDATE operations SET status = 'executing', owner = ?, lease_expires_at = {lease},"
                        f" attempts = attempts + 1, updated_at = {now} WHERE operation_key = ?"
                        " AND status = 'approved' AND EXISTS (SELECT 1 FROM proposals p"
                        f" WHERE p.proposal_id = operations.proposal_id AND p.expires_at > {now}) RETURNING *",
                        (owner, operation_key),
                    )
                else:
                    # on PostgreSQL the time with the chain head and the events' tenants, read first
                    head, found = self._audit.head_first(tx, audit) if audit else (None, {})
                    now = self._db._tx_now(tx)  # that reading, on PostgreSQL (as a test's clock moves it)
                    lease = later(now, lease_s)
                    claim = (
                        "UPDATE operations SET status = 'executing', owner = ?, lease_expires_at = ?,"
                        " attempts = attempts + 1, updated_at = ? WHERE operation_key = ?"
                        " AND status = 'approved' AND EXISTS (SELECT 1 FROM proposals p"
                        " WHERE p.proposal_id = operations.proposal_id AND p.expires_at > ?) RETURNING *",
                        (owner, lease, now, operation_key, now),
                    )
                if head is None:  # the claim, its leases and the chain head behind them
                    answers = self._audit.link_behind(
                        tx,
                        [
                            claim,
                            *take_behind(  # each only behind the claim this script made
                                keys,
                                holder,
                                now,
                                lease_s,
                                (
                                    "EXISTS (SELECT 1 FROM operations c WHERE c.operation_key = ?"
                                    " AND c.status = 'executing' AND c.owner = ? AND c.lease_expires_at = ?"
                                    " AND c.updated_at = ?)",
                                    (operation_key, owner, lease, now),
                                ),
                            ),
                        ],
                        [(audit, written)],
                    )
                else:
                    # the claim, its leases (only behind a claim this transaction made), a check
                    # that it took every one (else the whole transaction fails: `ResourcesBusy`),
                    # the events behind the chain's lock and the COMMIT as one script: two round
                    # trips in all, one after a guessed head. Should a moved head stop the
                    # script, what the statements wrote is read again (it was before the check).
                    leased = [
                        Written(n, "resource_leases", "resource_key", k)
                        for n, k in enumerate(sorted(set(keys)), 1)
                    ]
                    takes_behind = self._db._wrote(tx, written)
                    at = (now, lease) if head.guessed else None  # the script's own clock, as SQL
                    takes = take_behind(keys, holder, now, lease_s, (takes_behind, ()), at=at)
                    again: list[tuple[str, Sequence[Any]]] = [
                        (
                            f"SELECT * FROM operations WHERE operation_key = ? AND {takes_behind}",
                            (operation_key,),
                        ),
                        *(
                            (
                                f"SELECT resource_key FROM resource_leases WHERE resource_key = ?"
                                f" AND {self._db._wrote(tx, row)}",
                                (row.key,),
                            )
                            for row in leased
                        ),
                    ]
                    statements = [claim, *takes]
                    if leased:
                        statements.append((self._db._all_written(tx, written, leased), ()))
                        again.append(("SELECT 1 WHERE false", ()))
                    answers = self._audit.link_ahead(tx, head, statements, again, audit, written, found)
                rows, took = answers[0], answers[1 : 1 + len(set(keys))]
                if not rows:
                    if any(took):  # the same owner's claim at the same instant won: not this one
                        raise _Lost  # what this one took goes back with the rollback
                    return None
                all_taken(keys, took)  # busy: all rolled back, the events with them
        except _Lost:
            return None
        return operation_of(rows[0])

    def renew_lease(self, operation_key: str, owner: str, lease_s: float) -> bool:
        """Extend ``owner``'s lease to ``lease_s`` from now while its handler still runs."""
        with self._db.transaction() as tx:
            now = self._db._tx_now(tx)
            rows = tx.execute(
                "UPDATE operations SET lease_expires_at = ? WHERE operation_key = ? AND owner = ?"
                " AND status IN ('executing', 'unknown') RETURNING operation_key",
                (later(now, lease_s), operation_key, owner),
            )
        return bool(rows)

    def stale_executing(self, grace_s: float) -> list[OperationRecord]:
        """Operations still ``executing`` whose claim lease lapsed more than ``grace_s`` ago."""
        with self._db.transaction(write=False) as tx:
            cutoff = later(self._db._tx_now(tx), -grace_s)
            rows = tx.execute(
                "SELECT * FROM operations WHERE status = 'executing' AND lease_expires_at < ? ORDER BY updated_at",
                (cutoff,),
            )
        return [operation_of(r) for r in rows]

    def due(self, limit: int) -> list[OperationRecord]:
        """Up to ``limit`` approved operations, longest approved first: a hint (`claim` decides)."""
        with self._db.transaction(write=False) as tx:
            rows = tx.execute(
                "SELECT * FROM operations WHERE status = 'approved' ORDER BY updated_at, operation_key LIMIT ?",
                (max(int(limit), 0),),
            )
        return [operation_of(r) for r in rows]

    def dead_letter(self, operation_key: str, reason: str, context: dict[str, Any]) -> DeadLetter | None:
        """Move an ``unknown`` operation whose claim lease has lapsed to ``dead_lettered`` and record
        its letter for a person, in one transaction. None (and nothing changed) while the lease is live
        or the operation is not ``unknown``."""
        with self._db.transaction() as tx:
            now = self._db._tx_now(tx)
            moved = tx.execute(
                "UPDATE operations SET status = 'dead_lettered', updated_at = ? WHERE operation_key = ?"
                " AND status = 'unknown' AND (lease_expires_at IS NULL OR lease_expires_at < ?)"
                " RETURNING operation_key",
                (now, operation_key, now),
            )
            if not moved:
                return None
            tx.send(  # with the read of the letter that follows
                "INSERT INTO dead_letters (operation_key, created_at, reason, context) VALUES (?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (operation_key, now, reason, canonical_json(context)),
            )
            row = tx.one("SELECT * FROM dead_letters WHERE operation_key = ?", (operation_key,))
        assert row is not None
        return _dead_letter(row)

    def dead_letters(self, *, open_only: bool = True) -> list[DeadLetter]:
        """Dead letters, oldest first."""
        sql = "SELECT * FROM dead_letters" + (" WHERE resolved_at IS NULL" if open_only else "")
        with self._db.transaction(write=False) as tx:
            rows = tx.execute(sql + " ORDER BY created_at")
        return [_dead_letter(r) for r in rows]

    def resolve_dead_letter(
        self, operation_key: str, *, resolution: str, resolved_by: str, note: str
    ) -> bool:
        """Close a dead letter once; False when it was already resolved or does not exist."""
        with self._db.transaction() as tx:
            rows = tx.execute(
                "UPDATE dead_letters SET resolved_at = ?, resolved_by = ?, resolution = ?, note = ?"
                " WHERE operation_key = ? AND resolved_at IS NULL RETURNING operation_key",
                (self._db._tx_now(tx), resolved_by, resolution, note, operation_key),
            )
        return bool(rows)

    def list(self, status: str | None = None) -> list[OperationRecord]:
        """Operations, oldest first, optionally filtered by status (last: the name ``list`` shadows
        the builtin in the annotations of the methods after it)."""
        with self._db.transaction(write=False) as tx:
            if status:
                rows = tx.execute("SELECT * FROM operations WHERE status = ? ORDER BY created_at", (status,))
            else:
                rows = tx.execute("SELECT * FROM operations ORDER BY created_at")
        return [operation_of(r) for r in rows]


__all__ = ["Operations", "operation_of"]
