"""Guard snapshots: what a step that guards a race reads, in one statement.

Recording a decision (`toolgate.graph.review.decisions.decide`) and claiming an approved
operation (`toolgate.graph.delivery.executor.Executor.deliver`) each judge several rows of
several aggregates at one moment: the proposal, its operation, the proposal that superseded it,
its decisions and the identities of everyone those name. Read one by one that is five round trips
on PostgreSQL, each seeing a different moment; read here it is one ``SELECT`` whose columns are
the rows as JSON (``row_to_json`` and ``json_agg`` on PostgreSQL, ``json_object`` and
``json_group_array`` on SQLite), so every row comes from the same statement's snapshot.

Nothing is judged here: each row comes back as its aggregate reads it (`proposal_of`,
`operation_of`, `approval_of`, `identity_of`: MACs verified, identity versions checked
against the audit chain's bindings), and the caller applies every rule to them. The rows are
for one judgement, never kept: approvals, operations and identities change.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from toolgate.store.approvals import approval_of
from toolgate.store.identities import identity_of
from toolgate.store.identity_records import IdentityRecord
from toolgate.store.operations import operation_of
from toolgate.store.proposals import proposal_of
from toolgate.store.record_versions import bound_sql
from toolgate.store.records import ApprovalRecord, OperationRecord, ProposalRecord
from toolgate.store.tx import Database, Tx

_TABLES = ("proposals", "operations", "approvals", "identities")
"""The tables a snapshot reads whole rows of (SQLite names their columns in `json_object`)."""


@dataclass(frozen=True, kw_only=True)
class GuardSnapshot:
    """The rows one guard judges, read in one statement (see the module)."""

    proposal: ProposalRecord | None = None
    """The proposal (read only when asked for: `Snapshots.for_decision`), ``authentic`` or not."""
    operation: OperationRecord | None = None
    """The operation: the proposal's own (`Snapshots.for_decision`) or the one asked for by key
    (`Snapshots.for_claim`); None when there is none."""
    superseding: ProposalRecord | None = None
    """The newest proposal whose ``supersedes`` names this one (a reviewer's edit), or None."""
    replaced_status: str | None = None
    """The status of the operation of the proposal this one ``supersedes`` (None: none, or no
    such proposal or operation)."""
    decisions: list[ApprovalRecord] = field(default_factory=list)
    """Every decision on the proposal, in the order `Approvals.for_proposal` gives them."""
    identities: dict[str, IdentityRecord] = field(default_factory=dict)
    """The identity rows that exist of the requester, every decision's reviewer and the people
    asked for, by user id (a missing id is no identity)."""
    now: datetime | None = None
    """The store's time, read in the same statement where that saves a round trip (PostgreSQL),
    else by `Store.now` right after it (`Snapshots.for_claim`; None for `Snapshots.for_decision`,
    whose writing transaction reads its own)."""


class Snapshots:
    """One-statement reads for the steps that guard a race (``store.snapshots``)."""

    STATEMENTS = 64
    """Statements kept once made, by shape (the target, how many people are asked for, with the
    proposal or not, the clock's SQL): a process asks for a handful."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._columns: dict[str, tuple[str, ...]] = {}
        self._statements: dict[tuple[str, int, bool, str | None], str] = {}

    def for_decision(self, proposal_id: str, people: Sequence[str] = ()) -> GuardSnapshot:
        """What recording a decision on ``proposal_id`` judges: the proposal, its operation, its
        replacement, the status of the operation it replaces, its decisions, and the identities
        of its requester, its reviewers and ``people`` (the reviewer deciding now)."""
        target = "SELECT proposal_id, operation_key, requester_id, supersedes FROM proposals WHERE proposal_id = ?"
        return self._read(target, proposal_id, people, with_proposal=True)

    def for_claim(self, operation_key: str, people: Sequence[str] = (), *, clock: bool = False) -> GuardSnapshot:
        """What a delivery judges right before claiming ``operation_key``: the operation, the
        decisions on the proposal it names, and the identities of that proposal's requester, its
        reviewers and ``people``; with ``clock``, the store's time too (``now``: the operation's
        expiry and the requester's business rules are judged at it, by a caller that has not read
        the time yet). The proposal itself is not read (immutable: the caller holds it)."""
        target = (
            "SELECT o.proposal_id, o.operation_key, p.requester_id, p.supersedes FROM operations o"
            " LEFT JOIN proposals p ON p.proposal_id = o.proposal_id WHERE o.operation_key = ?"
        )
        return self._read(target, operation_key, people, with_proposal=False, with_clock=clock)

    def _read(
        self, target: str, key: str, people: Sequence[str], *, with_proposal: bool, with_clock: bool = False
    ) -> GuardSnapshot:
        wanted = sorted(set(people))
        clock = self._db._clock_sql() if with_clock else None
        shape = (target, len(wanted), with_proposal, clock)
        sql = self._statements.get(shape)
        if sql is None:  # made once per shape: the text depends on nothing else
            sql = self._sql(target, "".join(" UNION ALL SELECT ?" for _ in wanted), with_proposal, clock)
            if len(self._statements) < self.STATEMENTS:
                self._statements[shape] = sql
        with self._db.transaction(write=False) as tx:
            row = self._one(tx, sql, (key, *wanted))
        now = None
        if clock is not None:
            now = self._db._clock_heard(str(row["store_now"]))
        elif with_clock:
            now = self._db.now()
        keys = self._db.keys
        proposal = _json(row["proposal"]) if with_proposal else None
        operation = _json(row["operation"])
        superseding = _json(row["superseding"])
        decisions = [approval_of(r, keys) for r in _json(row["decisions"]) or []]
        decisions.sort(key=lambda d: (d.decided_at, d.approval_id))
        people_rows = [identity_of(r, keys) for r in _json(row["identities"]) or []]
        return GuardSnapshot(
            proposal=proposal_of(proposal, keys) if proposal else None,
            operation=operation_of(operation) if operation else None,
            superseding=proposal_of(superseding, keys) if superseding else None,
            replaced_status=row["replaced_status"],
            decisions=decisions,
            identities={record.user_id: record for record in people_rows},
            now=now,
        )

    def _one(self, tx: Tx, sql: str, params: tuple[Any, ...]) -> dict[str, Any]:
        found = tx.one(sql, params)
        assert found is not None  # a SELECT of scalar subqueries always returns its one row
        return found

    def _sql(self, target: str, extra: str, with_proposal: bool, clock: str | None = None) -> str:
        """The one statement: a row of scalar subqueries over the target ``t`` (its proposal id,
        operation key, requester and the proposal it supersedes), and ``clock`` (the store's time
        as SQL) as ``store_now`` when given."""
        t = "(SELECT {} FROM t)"
        proposal = (
            f"(SELECT {self._obj('p', 'proposals')} FROM proposals p WHERE p.proposal_id = {t.format('proposal_id')})"
            if with_proposal
            else "NULL"
        )
        identity_row = f"SELECT i.*, {bound_sql('identity', 'i.user_id')} AS bound_sha256 FROM identities i"
        return (
            f"WITH t AS ({target})"
            f" SELECT {proposal} AS proposal,"
            f" (SELECT {self._obj('o', 'operations')} FROM operations o"
            f" WHERE o.operation_key = {t.format('operation_key')}) AS operation,"
            f" (SELECT {self._obj('s', 'proposals')} FROM proposals s"
            f" WHERE s.supersedes = {t.format('proposal_id')} ORDER BY s.created_at DESC LIMIT 1) AS superseding,"
            " (SELECT r.status FROM proposals q JOIN operations r ON r.operation_key = q.operation_key"
            f" WHERE q.proposal_id = {t.format('supersedes')}) AS replaced_status,"
            f" (SELECT {self._agg(self._obj('a', 'approvals'))} FROM approvals a"
            f" WHERE a.proposal_id = {t.format('proposal_id')}) AS decisions,"
            f" (SELECT {self._agg(self._obj('x', 'identities', 'bound_sha256'))} FROM ({identity_row}"
            # one IN over every id wanted, which both databases answer by the identities' key
            # (PostgreSQL scans the whole table for an OR of an IN and equalities)
            " WHERE i.user_id IN (SELECT d.reviewer_id FROM approvals d"
            f" WHERE d.proposal_id = {t.format('proposal_id')}"
            f" UNION ALL SELECT requester_id FROM t{extra})) x) AS identities"
            + (f", {clock} AS store_now" if clock is not None else "")
        )

    def _obj(self, alias: str, table: str, *extra: str) -> str:
        """A row of ``table`` (as ``alias``) as one JSON object, keyed by column name."""
        if self._db.dialect == "postgres":
            return f"row_to_json({alias})"
        columns = (*self._table_columns(table), *extra)
        return "json_object(" + ", ".join(f"'{c}', {alias}.{c}" for c in columns) + ")"

    def _agg(self, obj: str) -> str:
        """JSON objects of every row as one JSON array (an empty one for no rows)."""
        if self._db.dialect == "postgres":
            return f"COALESCE(json_agg({obj}), '[]'::json)"
        return f"json_group_array({obj})"

    def _table_columns(self, table: str) -> tuple[str, ...]:
        """``table``'s columns (SQLite has no ``row_to_json``), read for every table of `_TABLES`
        in one statement on first use: migrations run before the aggregates are used."""
        if not self._columns:
            marks = ", ".join("?" for _ in _TABLES)
            with self._db.transaction(write=False) as tx:
                rows = tx.execute(
                    "SELECT m.name AS tbl, c.name AS col FROM sqlite_master m, pragma_table_info(m.name) c"
                    f" WHERE m.type = 'table' AND m.name IN ({marks}) ORDER BY m.name, c.cid",
                    _TABLES,
                )
            columns: dict[str, list[str]] = {}
            for row in rows:
                columns.setdefault(str(row["tbl"]), []).append(str(row["col"]))
            self._columns = {name: tuple(found) for name, found in columns.items()}
        return self._columns[table]


def _json(value: Any) -> Any:
    """A JSON column as Python (psycopg parses ``json`` already; SQLite returns its text)."""
    return json.loads(value) if isinstance(value, str) else value


__all__ = ["GuardSnapshot", "Snapshots"]
