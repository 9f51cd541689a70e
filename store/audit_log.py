"""The audit log, as the store keeps it: events linked by keyed hashes, their payloads kept apart.

Events are linked as the last step of the transaction whose change they record, under the
chain's lock (`Store._chain_head`), so a change and its evidence commit together or not at all:
another aggregate hands its open transaction to `AuditLog.link`, or its statements and the events
to link behind them to `AuditLog.link_behind`. On PostgreSQL the chain head's round trip also
reads the events' tenants and reserves their sequence numbers, so their INSERT needs no answer
and goes to the server with the COMMIT (`Tx.send`): linking costs one round trip, and none of its
own when it travels behind the change's statements (`link_behind`). There the head is read
without the lock, and the lock is taken in the COMMIT's own script, in front of a check that the
head has not moved and the events' INSERT (`Database._link_tail`): the chain's lock is held while
the server commits, not while a client computes its hashes.

A step whose events need nothing its statements return links them ahead of its statements
(`AuditLog.link_ahead`): after a head read with BEGIN and its time (`AuditLog.head_first`, with the
tenants of the rows the events name), or, when the caller already holds those tenants and the
step's time can be the server's clock in its own SQL, after the head this process saw right after
its last linking COMMIT (`Database._head_guess`, read in that COMMIT's own script) at the store's
calibrated time, both checked under the lock (`AuditLog.append_ahead` for a lone append). The
statements, the events and the COMMIT then travel as one script; a head that moved (or a time
the server's clock or the head's own contradicts) is found by the check, and the events are
linked again under the lock after the head and at the time it found: one round trip more.
Where processes link together, such early heads go stale often: after a relink, a PostgreSQL
store reads the head behind the statements for its next few steps (`CONTENTION_PAUSE` in
`toolgate.store.postgres`). Payloads live in their own table, so retention can purge them while the chain still verifies.

The one look-up that is a hint, not an authority: `AuditLog.first` answers "has this operation
already recorded this event?" with one row at most (e.g. ``delivery.refused``, once per operation,
code and release), instead of reading the operation's whole trail on every attempt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolgate.canonical import canonical_json, sha256_hex
from toolgate.clock import new_id
from toolgate.store.audit_records import (
    AUDIT_FIELDS,
    AuditEvent,
    AuditEventIn,
    KeyedEventIn,
    audit_hash,
    audit_row_content,
)
from toolgate.store.tx import Database, LinkHead, Tx, Written

_COLUMNS = [*AUDIT_FIELDS, "tenant_id", "detail", "detail_sha256", "prev_hash", "hash"]

_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
"""A keyed event id that may travel inside the head check's SQL (`link_ahead`)."""
_HASH = re.compile(r"[0-9a-f]{64}")
"""A chain hash, as toolgate writes them."""

_LATEST_SQL = (
    "SELECT e.*, p.detail AS payload FROM audit_events e LEFT JOIN audit_payloads p"
    " ON p.event_id = e.event_id WHERE e.event = ? ORDER BY e.seq DESC LIMIT 1"
)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value toolgate writes")


def _detail(text: str) -> dict[str, Any]:
    """The detail a stored payload (or an old event's inline detail) holds; {} when the text is
    not a JSON object toolgate could have written (NaN, infinity, not JSON at all): only a
    rewrite outside toolgate stores such a text, and `toolgate.store.chain.verify_chain` names
    it, where parsing it here would break every reader of the log, verify first."""
    try:
        found = json.loads(text, parse_constant=_refuse_constant)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _audit(row: dict[str, Any]) -> AuditEvent:
    data = dict(row)
    payload = data.pop("payload", None)
    if data.get("detail_sha256"):
        data["detail"] = _detail(payload) if payload is not None else {}
        data["payload_retained"] = payload is not None
    else:
        data["detail"] = _detail(data["detail"])
    return AuditEvent(**data)


_OWNERS = (("proposals", "proposal_id"), ("operations", "operation_key"))
"""Where an event's tenant comes from, in order: the proposal, else the operation it names."""


def _owner_reads(events: Sequence[AuditEventIn]) -> list[tuple[str, str]]:
    """The ``(table, id)`` pairs whose tenant the events need, each once, in order."""
    wanted: list[tuple[str, str]] = []
    for event in events:
        for table, column in _OWNERS:
            value = getattr(event, column)
            if value and (table, value) not in wanted:
                wanted.append((table, value))
    return wanted


def _keyed(events: Sequence[AuditEventIn]) -> list[str]:
    """The ids of the `KeyedEventIn` among ``events``, in order: each is linked at most once."""
    return [e.event_id for e in events if isinstance(e, KeyedEventIn)]


def _link_reads(owners: Sequence[tuple[str, str]], keyed: Sequence[str]) -> list[tuple[str, tuple[str]]]:
    """What linking reads with the chain head: the tenant of each ``(table, id)`` owner
    (`_owner_reads`), then whether the chain holds each keyed event (`_keyed`) already."""
    return [
        *(
            (f"SELECT tenant_id FROM {table} WHERE {dict(_OWNERS)[table]} = ?", (value,))
            for table, value in owners
        ),
        *(("SELECT seq FROM audit_events WHERE event_id = ?", (event_id,)) for event_id in keyed),
    ]


def _tenant_of(event: AuditEventIn, found: dict[tuple[str, str], str | None]) -> str | None:
    """The tenant of ``event``: that of the proposal or operation it names (the store's own
    records, ``found``: read in the same transaction, with the chain head), else the one its
    writer gave, else None."""
    for table, column in _OWNERS:
        value = getattr(event, column)
        if value and found.get((table, value)) is not None:
            return found[(table, value)]
    return event.tenant_id


def _insert_sqlite(
    tx: Tx, rows: Sequence[dict[str, Any]], payloads: Sequence[tuple[str, str, str]]
) -> list[dict[str, Any]]:
    """Events, then their payloads: two statements (SQLite has no data-modifying CTE)."""
    row_marks = "(" + ", ".join("?" for _ in _COLUMNS) + ")"
    stored = tx.execute(
        f"INSERT INTO audit_events ({', '.join(_COLUMNS)}) VALUES "
        + ", ".join(row_marks for _ in rows)
        + " RETURNING *",
        tuple(row[c] for row in rows for c in _COLUMNS),
    )
    tx.execute(
        "INSERT INTO audit_payloads (event_id, occurred_at, detail) VALUES "
        + ", ".join("(?, ?, ?)" for _ in payloads),
        tuple(value for payload in payloads for value in payload),
    )
    return stored


def _insert_postgres(
    tx: Tx, rows: Sequence[dict[str, Any]], payloads: Sequence[tuple[str, str, str]]
) -> list[dict[str, Any]]:
    """Events and payloads in one statement (one round trip while the chain lock is held)."""
    row_marks = "(" + ", ".join("?" for _ in _COLUMNS) + ")"
    return tx.execute(
        "WITH payload AS (INSERT INTO audit_payloads (event_id, occurred_at, detail) VALUES "
        + ", ".join("(?, ?, ?)" for _ in payloads)
        + f") INSERT INTO audit_events ({', '.join(_COLUMNS)}) VALUES "
        + ", ".join(row_marks for _ in rows)
        + " RETURNING *",
        (*(v for p in payloads for v in p), *(row[c] for row in rows for c in _COLUMNS)),
    )


def _hash_after(rows: Sequence[dict[str, Any]], now: str, last_hash: str, key: bytes) -> None:
    """Link ``rows`` (their content complete) after ``last_hash`` at ``now``: their time, previous
    hashes and hashes, in order."""
    previous = last_hash
    for row in rows:
        row["occurred_at"] = now
        row["prev_hash"] = previous
        row["hash"] = previous = audit_hash(audit_row_content(row), previous, key)


def _unanswered(
    rows: Sequence[dict[str, Any]],
    payloads: Sequence[tuple[str, str, str]],
    *,
    numbered: bool,
    when: str = "",
    only: Sequence[str] = (),
) -> tuple[str, tuple[Any, ...]]:
    """Events and their payloads in one PostgreSQL statement that returns nothing: with the
    sequence numbers reserved with a locked chain head (``seq`` in each row) when ``numbered``,
    else numbered by the database as it inserts them (behind the lock, `Database._link_tail`);
    only when the SQL condition ``when`` holds, if one is given (`Database._link_ahead`; every
    column is text, so the rows can be selected from a ``VALUES`` list). ``only`` (one per row,
    "" for none): a further condition of each row (a group of events linked behind a later
    statement of the script, `AuditLog.link_ahead`), in a column of the ``VALUES`` list the rows
    are selected from; a later group's rows follow the earlier ones, so whatever a condition
    leaves out is at the chain's end."""
    columns = ["seq", *_COLUMNS] if numbered else _COLUMNS
    row_marks = "(" + ", ".join("?" for _ in columns) + ")"
    if any(only):  # each row with its own condition, in a column of its own
        which = " AND ".join(c for c in ("ok", when) if c)
        oks = [f"({c})" if c else "TRUE" for c in only]
        payload_rows = (
            "SELECT event_id, occurred_at, detail FROM (VALUES "
            + ", ".join(f"(?, ?, ?, {ok})" for ok in oks)
            + f") p(event_id, occurred_at, detail, ok) WHERE {which}"
        )
        event_rows = (
            f"SELECT {', '.join(columns)} FROM (VALUES "
            + ", ".join(row_marks[:-1] + f", {ok})" for ok in oks)
            + f") e({', '.join(columns)}, ok) WHERE {which}"
        )
    elif when:
        payload_rows = (
            "SELECT * FROM (VALUES " + ", ".join("(?, ?, ?)" for _ in payloads) + f") p WHERE {when}"
        )
        event_rows = "SELECT * FROM (VALUES " + ", ".join(row_marks for _ in rows) + f") e WHERE {when}"
    else:
        payload_rows = "VALUES " + ", ".join("(?, ?, ?)" for _ in payloads)
        event_rows = "VALUES " + ", ".join(row_marks for _ in rows)
    return (
        f"WITH payload AS (INSERT INTO audit_payloads (event_id, occurred_at, detail) {payload_rows})"
        f" INSERT INTO audit_events ({', '.join(columns)})"
        + (" OVERRIDING SYSTEM VALUE " if numbered else " ")
        + event_rows,
        (*(v for p in payloads for v in p), *(row[c] for row in rows for c in columns)),
    )


_INSERT = {"sqlite": _insert_sqlite, "postgres": _insert_postgres}
"""How each dialect inserts linked events and their payloads; the stored event rows."""


class AuditLog:
    """The hash-chained audit log of one store (``store.audit``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def append(self, event: AuditEventIn) -> AuditEvent:
        """Append one event to the hash chain."""
        return self.append_many([event])[0]

    def append_many(self, events: Sequence[AuditEventIn]) -> list[AuditEvent]:
        """Append ``events``, in order, in one transaction (one lock of the chain, one commit)."""
        if not events:
            return []
        with self._db.transaction() as tx:
            return self.link(tx, events)

    def append_ahead(self, events: Sequence[AuditEventIn]) -> None:
        """`append_many` for a caller that reads nothing back (a refusal, a model's answer): on
        PostgreSQL the events are linked after the chain's head as this process last saw it
        (`Database._head_guess`), at the store's calibrated time, and go to the server with the
        lock, a check that the head is still that one, holds none of their keyed ids and is no
        later than their time, which is no later than the server's clock, and the COMMIT: one
        round trip when no other process linked since (linked again under the lock otherwise,
        after the head and at the time the check found, as `link_behind`'s events are). Events
        that name a proposal or an operation (their tenant is read with the head), or no head
        to guess, are linked as `append_many` links them."""
        if not events:
            return
        owners, keyed = _owner_reads(events), _keyed(events)
        with self._db.transaction() as tx:
            head = (
                None if owners or not all(_PLAIN_ID.fullmatch(k) for k in keyed) else self._db._head_guess(tx)
            )
            if head is None:
                self.link(tx, events)
                return
            self._chain(tx, events, owners, keyed, head._replace(values=[None for _ in keyed]))

    def link(self, tx: Tx, events: Sequence[AuditEventIn]) -> list[AuditEvent]:
        """Link ``events`` to the chain inside ``tx``: the last step of the transaction whose
        change they record, so the change and its evidence commit together or not at all. A
        `KeyedEventIn` whose id the chain holds already is left out (its presence is read with the
        chain head, under the lock: no round trip of its own on PostgreSQL)."""
        if not events:
            return []
        owners, keyed = _owner_reads(events), _keyed(events)
        head = self._db._link_head(tx, len(events), _link_reads(owners, keyed))
        return self._chain(tx, events, owners, keyed, head)

    def link_behind(
        self,
        tx: Tx,
        statements: Sequence[tuple[str, Sequence[Any]]],
        groups: Sequence[tuple[Sequence[AuditEventIn], Written]],
    ) -> list[list[dict[str, Any]]]:
        """Run ``statements`` (`Tx.many`: each one's rows, in order) and link, behind them, the
        events of each group ``(events, written)`` whose row ``written`` names was written by
        them, in order: on PostgreSQL the statements and the chain's head travel as one script
        (`Database._link_behind`), so a step and its chain head cost one round trip, and the
        head is read without the chain's lock: the events go with the COMMIT, behind the lock
        and a check that the head has not moved (`Database._link_tail`; linked again under the
        lock when it has), so the lock is held for the server's part of the COMMIT's round trip
        only, never across the client's turn. Only the first group decides whether anything is
        linked; a later group's row is written only behind the first's (a settlement behind its
        decision)."""
        candidates = [event for events, _ in groups for event in events]
        owners, keyed = _owner_reads(candidates), _keyed(candidates)
        answers, head = self._db._link_behind(
            tx,
            statements,
            [(len(events), written) for events, written in groups if events],
            _link_reads(owners, keyed),
        )
        if head is not None:
            linked = [e for events, written in groups if answers[written.statement] for e in events]
            self._chain(tx, linked, owners, keyed, head)
        return answers

    def head_first(
        self, tx: Tx, events: Sequence[AuditEventIn]
    ) -> tuple[LinkHead | None, dict[tuple[str, str], str | None]]:
        """The store's time and the chain's head read as ``tx``'s first script, with the tenants
        of the rows ``events`` name (`Database._head_first`), for a step that links ``events``
        ahead of its statements (`link_ahead`): ``(head, tenant of each (table, id))``; None and
        nothing where the backend links behind the statements (SQLite)."""
        owners = _owner_reads(events)
        head = self._db._head_first(tx, _link_reads(owners, []))
        if head is None:
            return None, {}
        found = {owner: None if v is None else str(v) for owner, v in zip(owners, head.values, strict=True)}
        return head._replace(values=[]), found

    def link_ahead(
        self,
        tx: Tx,
        head: LinkHead | None,
        statements: Sequence[tuple[str, Sequence[Any]]],
        rereads: Sequence[tuple[str, Sequence[Any]]],
        events: Sequence[AuditEventIn],
        written: Written,
        tenants: Mapping[tuple[str, str], str | None],
        *,
        behind: Sequence[tuple[Sequence[AuditEventIn], Written]] = (),
    ) -> list[list[dict[str, Any]]]:
        """`link_behind` for a step whose events need nothing its statements return, after a
        head read first (`Database._head_first`, with the time its statements carry; `head_first`
        for rows that exist already): the events are linked after ``head`` before the
        statements run, and the statements, the events (only when ``written`` was written by
        them, behind the chain's lock and a check that the head has not moved and holds none of
        their keyed ids) and the COMMIT travel as one script (`Database._link_ahead`): the step
        costs two round trips. ``behind``: further groups ``(events, written)``, each linked
        after the ones before it and inserted only when its own row was written too (a
        settlement behind its decision). ``tenants`` holds the tenant of each ``(table, id)``
        the events name (rows a proposal's statements insert are not there to read yet). Each
        statement's rows; ``tx`` is committed after it, so nothing may be sent in ``tx`` after
        it. Where ``head`` is None (a backend that reads no head first: SQLite), or events name
        another owner, a keyed id cannot travel in the check's SQL or the head is not a hash,
        the events are linked behind the statements instead (`link_behind`), and the
        transaction commits at the end of its block (so too for keyed events with ``behind``:
        relinking those reads the head again under the lock, which knows no group's row)."""
        groups = [(events, written), *behind]
        candidates = [event for group, _ in groups for event in group]
        owners, keyed = _owner_reads(candidates), _keyed(candidates)
        if (
            head is None
            or any(owner not in tenants for owner in owners)
            or not all(_PLAIN_ID.fullmatch(k) for k in keyed)
            or not _HASH.fullmatch(head.last_hash)
            or (keyed and len(groups) > 1)  # a keyed relink links under the lock, by no group's row
        ):
            return self.link_behind(tx, statements, groups)
        values = [tenants[owner] for owner in owners] + [None for _ in keyed]  # checked under the lock
        only = [
            "" if n == 0 else self._db._wrote(tx, row) for n, (group, row) in enumerate(groups) for _ in group
        ]
        self._chain(tx, candidates, owners, keyed, head._replace(seqs=[], values=values, locked=False), only)
        return self._db._link_ahead(tx, statements, rereads, written)

    def _chain(
        self,
        tx: Tx,
        events: Sequence[AuditEventIn],
        owners: Sequence[tuple[str, str]],
        keyed: Sequence[str],
        head: LinkHead,
        only: Sequence[str] = (),
    ) -> list[AuditEvent]:
        """The rows of ``events`` linked after ``head``, inserted (on PostgreSQL, sent with the
        COMMIT): ``head.values`` holds their tenants (one per owner of ``owners``), then whether
        the chain held each keyed event of ``keyed`` already (one that did is left out). When
        the head was read without the lock, the rows go with the COMMIT unnumbered
        (`Database._link_tail`; linked again after the head found under the lock if it moved by
        then) and are returned with ``seq`` 0: the database numbers them as the COMMIT's script
        inserts them (`link_behind` and `link_ahead`, their callers, return none of them).
        ``only`` (one per event of ``events``, "" for none): a further SQL condition of that
        event's INSERT there (`link_ahead`'s later groups)."""
        if not events:
            return []
        wanted = list(events)  # what to link again if an unlocked head has moved by the COMMIT
        conditions = dict(zip((id(e) for e in events), only, strict=False))
        key = self._db.keys.key("audit-chain")
        drafts: list[tuple[dict[str, Any], str]] = []
        for event in events:
            row: dict[str, Any] = {name: getattr(event, name, None) for name in AUDIT_FIELDS}
            row["event_id"] = event.event_id if isinstance(event, KeyedEventIn) else new_id("evt")
            payload = canonical_json(event.detail)
            row["detail"] = "{}"
            row["detail_sha256"] = sha256_hex(payload)
            drafts.append((row, payload))
        found = {
            owner: None if value is None else str(value)
            for owner, value in zip(owners, head.values[: len(owners)], strict=True)
        }
        linked = {e for e, seq in zip(keyed, head.values[len(owners) :], strict=True) if seq is not None}
        if linked:  # a keyed event already in the chain (its step ran again): left out
            kept = [(d, e) for d, e in zip(drafts, events, strict=True) if d[0]["event_id"] not in linked]
            drafts, events = [d for d, _ in kept], [e for _, e in kept]
            if not drafts:
                return []
        rows = [row for row, _ in drafts]
        for row, event in zip(rows, events, strict=True):
            row["tenant_id"] = _tenant_of(event, found)
        extra = [conditions.get(id(event), "") for event in events] if conditions else []
        _hash_after(rows, head.now, head.last_hash, key)
        payloads = [(row["event_id"], head.now, payload) for row, payload in drafts]
        seqs = head.seqs[: len(drafts)]  # numbers reserved for events left out stay unused (a gap)
        if not head.locked:  # the lock, a check of the head and the INSERT go with the COMMIT
            ids = [row["event_id"] for row in rows if row["event_id"] in keyed]

            def relink(moved: tuple[str, str] | None) -> tuple[str, Sequence[Any]] | None:
                if moved is None or ids:  # the chain may hold a keyed event by now: read it
                    self._relink(tx, wanted)
                    return None
                now, last_hash = moved  # the head under the lock: the same rows, linked after it
                _hash_after(rows, now, last_hash, key)
                return _unanswered(rows, [(e, now, p) for e, _, p in payloads], numbered=False, only=extra)

            def insert(when: str) -> tuple[str, Sequence[Any]]:
                return _unanswered(rows, payloads, numbered=False, when=when, only=extra)

            self._db._link_tail(tx, insert, head.last_hash, ids, relink, at=head.now if head.guessed else "")
            stored = [{**row, "seq": 0} for row in rows]
        elif seqs:  # numbered under the lock: the rows are known, their INSERT goes with the COMMIT
            stored = [{**row, "seq": seq} for (row, _), seq in zip(drafts, seqs, strict=True)]
            tx.send(*_unanswered(stored, payloads, numbered=True))
        else:
            stored = _INSERT[self._db.dialect](tx, [row for row, _ in drafts], payloads)
        by_id = {row["event_id"]: payload for row, payload in drafts}
        return [
            _audit({**r, "payload": by_id[r["event_id"]]})
            for r in sorted(stored, key=lambda r: int(r["seq"]))
        ]

    def _relink(self, tx: Tx, events: Sequence[AuditEventIn]) -> None:
        """Link ``events`` under the chain's lock, reading the head again: an unlocked head they
        were linked after moved before the COMMIT, and they include a keyed event (the chain may
        hold it by now), or another linking in the same transaction comes first
        (`Database._link_tail`). Their owners and keyed ids are read with the locked head, so a
        keyed event another transaction linked meanwhile is left out."""
        self.link(tx, events)

    def latest(self, event: str) -> AuditEvent | None:
        """The most recent event named ``event``, or None."""
        with self._db.transaction(write=False) as tx:
            row = tx.one(_LATEST_SQL, (event,))
        return _audit(row) if row else None

    def append_after(
        self, event: str, build: Callable[[AuditEvent | None], AuditEventIn | None]
    ) -> AuditEvent | None:
        """Append what ``build`` makes of the latest event named ``event`` (nothing when it returns
        None): the read and the append are one transaction under the chain's lock, so processes
        recording the same change at the same moment record it once (``release.loaded``)."""
        with self._db.transaction() as tx:
            self._db._chain_head(tx)  # the chain's lock before the read (SQLite's write lock already is)
            row = tx.one(_LATEST_SQL, (event,))
            made = build(_audit(row) if row else None)
            return self.link(tx, [made])[0] if made is not None else None

    def purge_payloads(self, before: str) -> int:
        """Delete audit payloads older than ``before`` (ISO time); the chain and digests stay."""
        with self._db.transaction() as tx:
            rows = tx.execute(
                "DELETE FROM audit_payloads WHERE occurred_at < ? RETURNING event_id", (before,)
            )
        return len(rows)

    def with_payloads(self) -> list[tuple[AuditEvent, str | None]]:
        """Every event in chain order with its payload's stored text (None: purged), which must be
        the very text its digest covers (`toolgate.store.chain.verify_chain`)."""
        with self._db.transaction(write=False) as tx:
            rows = tx.execute(
                "SELECT e.*, p.detail AS payload FROM audit_events e"
                " LEFT JOIN audit_payloads p ON p.event_id = e.event_id ORDER BY e.seq"
            )
        return [(_audit(r), r["payload"]) for r in rows]

    def events(
        self,
        *,
        operation_key: str | None = None,
        proposal_id: str | None = None,
        call_ids: Sequence[str] = (),
    ) -> list[AuditEvent]:
        """Events matching any of the filters (all events when none is given), in chain order."""
        clauses: list[str] = []
        params: list[Any] = []
        if operation_key:
            clauses.append("operation_key = ?")
            params.append(operation_key)
        if proposal_id:
            clauses.append("proposal_id = ?")
            params.append(proposal_id)
        if call_ids:
            clauses.append(f"call_id IN ({', '.join('?' for _ in call_ids)})")
            params.extend(call_ids)
        sql = (
            "SELECT e.*, p.detail AS payload FROM audit_events e"
            " LEFT JOIN audit_payloads p ON p.event_id = e.event_id"
        )
        if clauses:
            sql += " WHERE " + " OR ".join("e." + c for c in clauses)
        sql += " ORDER BY e.seq"
        with self._db.transaction(write=False) as tx:
            rows = tx.execute(sql, tuple(params))
        return [_audit(r) for r in rows]

    def first(
        self,
        operation_key: str,
        event: str,
        *,
        code: str | None = None,
        tool_release: str | None = None,
    ) -> AuditEvent | None:
        """The earliest (chain order) event ``event`` of ``operation_key``, with ``code`` and
        recorded by ``tool_release`` when given (None: any), or None. Reads one row at most."""
        # the operation's index narrows to its few events; one row at most is read back
        sql = (
            "SELECT e.*, p.detail AS payload FROM audit_events e"
            " LEFT JOIN audit_payloads p ON p.event_id = e.event_id"
            " WHERE e.operation_key = ? AND e.event = ?"
        )
        params: list[Any] = [operation_key, event]
        for column, value in (("code", code), ("tool_release", tool_release)):
            if value is not None:
                sql += f" AND e.{column} = ?"
                params.append(value)
        with self._db.transaction(write=False) as tx:
            row = tx.one(sql + " ORDER BY e.seq LIMIT 1", tuple(params))
        return _audit(row) if row else None


__all__ = ["AuditLog"]
