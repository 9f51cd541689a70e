"""Proposals, as the store keeps them: inserted once per operation key, together with their operation.

A proposal is immutable and bound by a MAC under the store's keys (read back marked
``authentic`` or not); its ``pending_approval`` operation row and the audit events of its
creation commit in the same transaction.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable, Collection, Sequence
from typing import Any

from toolgate.canonical import ordered_json
from toolgate.errors import StoreError
from toolgate.store.audit_log import AuditLog
from toolgate.store.audit_records import AuditEventIn
from toolgate.store.keys import Keyring
from toolgate.store.operations import operation_of
from toolgate.store.records import OperationRecord, ProposalRecord
from toolgate.store.tx import Database, Tx, Written


def proposal_of(row: dict[str, Any], keys: Keyring) -> ProposalRecord:
    """A ``proposals`` row as its record, marked ``authentic`` when its MAC verifies."""
    data = dict(row)
    mac = data.pop("mac", None)
    stored = tuple(data.items())
    data["arguments"] = json.loads(data["arguments"])
    data["editors"] = tuple(json.loads(data["editors"])) if data.get("editors") else ()
    # no MAC (inserted with database access alone, or before proposals carried one): not authentic
    authentic = keys.verify_row("proposal", stored, mac, lambda: ProposalRecord(**data).sealed())
    return ProposalRecord(**data, authentic=authentic)


PAGE_SIZE = 100
"""Proposals per page of a listing unless the caller asks for fewer or more."""
PAGE_MAX = 500
"""The most proposals one page holds, whatever the caller asks."""
_IN_CHUNK = 500
"""Keys per ``IN (...)`` list (SQLite bounds the parameters of one statement)."""


class InvalidCursor(ValueError):
    """An ``after`` that no page handed out (it is opaque: a page's ``next_after``)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProposalPage:
    """One page of a proposal listing."""

    rows: list[tuple[ProposalRecord, OperationRecord]]
    """The proposals with their operations, in the order their operations were created."""
    next_after: str | None
    """Pass as ``after`` for the next page; None when this page is the last."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Beside:
    """The other proposals a reviewer is shown beside one (`Proposals.beside`); a listing not
    asked for is empty."""

    newest: list[tuple[ProposalRecord, OperationRecord]]
    """The newest of its tool in its tenant, of every status, newest first."""
    live: list[tuple[ProposalRecord, OperationRecord]]
    """The newest of its tool in its tenant whose operation is in the statuses asked for, newest
    first."""
    same_effect: list[tuple[ProposalRecord, OperationRecord]]
    """The others of its thread for the same tool and arguments, oldest first."""


class Proposals:
    """The proposals of one store (``store.proposals``)."""

    def __init__(self, db: Database, audit: AuditLog) -> None:
        self._db = db
        self._audit = audit

    def create(
        self, proposal: ProposalRecord, *, audit: Sequence[AuditEventIn] = ()
    ) -> tuple[ProposalRecord, OperationRecord, bool]:
        """Insert the proposal and its ``pending_approval`` operation atomically, with ``audit``
        appended in the same transaction.

        Idempotent by operation key: a second call returns the stored rows and ``False`` (and
        appends nothing).
        """
        return self.create_at(lambda _: (proposal, audit))

    def create_at(
        self, make: Callable[[str], tuple[ProposalRecord, Sequence[AuditEventIn]]]
    ) -> tuple[ProposalRecord, OperationRecord, bool]:
        """`create` for a proposal whose times are the insert's own: ``make(now)`` (``now``: the
        transaction's time, `toolgate.clock.iso` text) builds it and its audit events inside the
        transaction, so stamping a proposal costs no clock read of its own."""
        keys = self._db.keys
        with self._db.transaction() as tx:
            # on PostgreSQL the time with the chain head, read first (the rows are new: nothing
            # of them needs reading before their events are linked)
            head = self._db._head_first(tx)
            now = self._db._tx_now(tx)  # that reading, on PostgreSQL (as a test's clock moves it)
            proposal, audit = make(now)
            mac = keys.mac("proposal", proposal.sealed())
            # The operation's INSERT runs only behind a proposal stored under this id with this
            # MAC, so nothing is inserted when the key holds another proposal already.
            statements: list[tuple[str, Sequence[Any]]] = [
                (
                    "INSERT INTO proposals (proposal_id, operation_key, thread_id, call_id, tool,"
                    " tool_version, handler_revision, release, tenant_id, requester_id, arguments,"
                    " arguments_sha256, digest, risk, effect, rollback, approval_class, created_at,"
                    " expires_at, supersedes, trace_id, editors, escalation_rule_id, escalation_reason,"
                    " requester_text, mac)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT DO NOTHING RETURNING *",
                    (
                        proposal.proposal_id,
                        proposal.operation_key,
                        proposal.thread_id,
                        proposal.call_id,
                        proposal.tool,
                        proposal.tool_version,
                        proposal.handler_revision,
                        proposal.release,
                        proposal.tenant_id,
                        proposal.requester_id,
                        ordered_json(proposal.arguments),  # the model's key order; digests are canonical
                        proposal.arguments_sha256,
                        proposal.digest,
                        proposal.risk,
                        proposal.effect,
                        proposal.rollback,
                        proposal.approval_class,
                        proposal.created_at,
                        proposal.expires_at,
                        proposal.supersedes,
                        proposal.trace_id,
                        json.dumps(sorted(proposal.editors)) if proposal.editors else None,
                        proposal.escalation_rule_id,
                        proposal.escalation_reason,
                        proposal.requester_text or None,
                        mac,
                    ),
                ),
                (
                    # ON CONFLICT: the same proposal sent again finds its operation stored
                    "INSERT INTO operations (operation_key, proposal_id, tool, tenant_id, status,"
                    " attempts, created_at, updated_at) SELECT ?, ?, ?, ?, 'pending_approval', 0, ?, ?"
                    " WHERE EXISTS (SELECT 1 FROM proposals p WHERE p.proposal_id = ? AND p.mac = ?)"
                    " ON CONFLICT DO NOTHING RETURNING *",
                    (
                        proposal.operation_key,
                        proposal.proposal_id,
                        proposal.tool,
                        proposal.tenant_id,
                        now,
                        now,
                        proposal.proposal_id,
                        mac,
                    ),
                ),
            ]
            stored = [
                ("SELECT * FROM proposals WHERE operation_key = ?", (proposal.operation_key,)),
                ("SELECT * FROM operations WHERE operation_key = ?", (proposal.operation_key,)),
            ]
            written = Written(0, "proposals", "proposal_id", proposal.proposal_id)
            if head is not None:
                # the INSERTs, the rows as stored, the events (only behind a proposal stored here)
                # and the COMMIT as one script: two round trips in all
                tenants = {
                    ("proposals", proposal.proposal_id): proposal.tenant_id,
                    ("operations", proposal.operation_key): proposal.tenant_id,
                }
                # should a moved chain head stop the script, the proposal was stored here (the
                # events are linked only then): its INSERTs' rows are read again
                again = [
                    stored[0],
                    (
                        "SELECT * FROM operations WHERE operation_key = ? AND proposal_id = ?",
                        (proposal.operation_key, proposal.proposal_id),
                    ),
                ]
                # the script commits: the operation's INSERT runs behind a proposal stored here
                # and fails the whole script (a unique key) when another operation holds the key
                strict = (
                    "INSERT INTO operations (operation_key, proposal_id, tool, tenant_id, status,"
                    " attempts, created_at, updated_at) SELECT ?, ?, ?, ?, 'pending_approval', 0, ?, ?"
                    " WHERE EXISTS (SELECT 1 FROM proposals p WHERE p.proposal_id = ? AND p.mac = ?"
                    " AND p.xmin = pg_current_xact_id()::xid) RETURNING *",
                    statements[1][1],
                )
                inserted, created, stored_proposal, stored_operation = self._audit.link_ahead(
                    tx, head, [statements[0], strict, *stored], [*again, *stored], audit, written, tenants
                )
            else:  # the proposal, its operation and the chain head behind them
                inserted, created = self._audit.link_behind(tx, statements, [(audit, written)])
                stored_proposal = stored_operation = []
            if inserted:
                if not created:  # the key's operation row exists without this proposal
                    raise StoreError(
                        f"operation {proposal.operation_key} exists already; proposal"
                        f" {proposal.proposal_id} was not stored"
                    )
                prow: dict[str, Any] | None = inserted[0]
                orow: dict[str, Any] | None = created[0]
            else:  # both rows as stored, in one round trip (read already on PostgreSQL)
                if head is None:
                    stored_proposal, stored_operation = tx.many(stored)
                prow = stored_proposal[0] if stored_proposal else None
                orow = stored_operation[0] if stored_operation else None
        assert prow is not None and orow is not None
        return proposal_of(prow, keys), operation_of(orow), bool(inserted)

    def get(self, proposal_id: str) -> ProposalRecord | None:
        """The proposal, or None."""
        with self._db.transaction(write=False) as tx:
            row = tx.one("SELECT * FROM proposals WHERE proposal_id = ?", (proposal_id,))
        return proposal_of(row, self._db.keys) if row else None

    def same_effect(self, proposal: ProposalRecord) -> list[tuple[ProposalRecord, OperationRecord]]:
        """Other proposals of the same thread for the same tool and arguments, oldest first (a
        reviewer is told when an identical operation already ran): one statement."""
        return self._pairs(*_same_effect(proposal))

    def for_tool(
        self, tool: str, tenant_id: str, limit: int = 200, *, statuses: Collection[str] | None = None
    ) -> list[tuple[ProposalRecord, OperationRecord]]:
        """The newest ``limit`` proposals of ``tool`` in ``tenant_id`` with their operations, newest
        first (bounded, so a busy tool costs one page of rows, not its history): one statement.
        ``statuses``: only those whose operation is in one of them, chosen by the database."""
        if statuses is not None and not statuses:
            return []
        return self._listed({"tool": _newest_of_tool(tool, tenant_id, limit, statuses)})["tool"][::-1]

    def beside(
        self,
        proposal: ProposalRecord,
        limit: int = 200,
        *,
        newest: bool = False,
        live: Collection[str] = (),
        same_effect: bool = False,
    ) -> Beside:
        """The other proposals a reviewer is shown beside ``proposal``, each listing only when asked
        for, all of them read in one statement (one round trip on PostgreSQL, however many are
        asked): ``newest``, `for_tool` of its tool and tenant; ``live``, `for_tool` with
        ``statuses=live``; ``same_effect``, `same_effect`. The tool's listings are bounded as
        `for_tool` bounds them (``proposal`` counts among the ``limit`` newest when it is one of
        them) and never hold ``proposal`` itself. A proposal in several listings is read and
        MAC-verified once."""
        wanted: dict[str, tuple[str, tuple[Any, ...]]] = {}
        if newest:
            wanted["newest"] = _newest_of_tool(proposal.tool, proposal.tenant_id, limit, None)
        if live:
            wanted["live"] = _newest_of_tool(proposal.tool, proposal.tenant_id, limit, live)
        if same_effect:
            where, params = _same_effect(proposal)
            wanted["same_effect"] = (f"SELECT p.proposal_id FROM proposals p WHERE {where}", params)
        found = self._listed(wanted, besides=proposal.proposal_id) if wanted else {}
        return Beside(
            newest=found.get("newest", [])[::-1],
            live=found.get("live", [])[::-1],
            same_effect=found.get("same_effect", []),
        )

    def superseding(self, proposal_id: str) -> ProposalRecord | None:
        """The newest proposal that replaces ``proposal_id`` (a reviewer's edit), or None."""
        with self._db.transaction(write=False) as tx:
            row = tx.one(
                "SELECT * FROM proposals WHERE supersedes = ? ORDER BY created_at DESC", (proposal_id,)
            )
        return proposal_of(row, self._db.keys) if row else None

    def _pairs(self, where: str, params: tuple[Any, ...]) -> list[tuple[ProposalRecord, OperationRecord]]:
        """Proposals matching `where` (over `p` proposals and `o` operations) with their operations,
        oldest first: one statement, whatever the number of rows."""
        with self._db.transaction(write=False) as tx:
            rows = tx.execute(
                f"{_SELECT_PAIR}{_FROM_PAIR} WHERE {where} ORDER BY p.created_at, p.proposal_id", params
            )
        keys = self._db.keys
        return [_pair_of(row, keys) for row in rows]

    def _listed(
        self, wanted: dict[str, tuple[str, tuple[Any, ...]]], *, besides: str | None = None
    ) -> dict[str, list[tuple[ProposalRecord, OperationRecord]]]:
        """Several listings read in one statement, by name, each oldest first. ``wanted`` gives
        each one's ``SELECT p.proposal_id`` (over `p` proposals and `o` operations, with its own
        order and limit: a CTE of the statement) and its parameters; ``besides``, a proposal id
        none of them is to hold. Each proposal comes back once, with a flag per listing that
        holds it, so it is MAC-verified once."""
        names = list(wanted)
        ctes = ", ".join(f"l{n} AS ({wanted[name][0]})" for n, name in enumerate(names))
        flags = "".join(
            f', CASE WHEN p.proposal_id IN (SELECT proposal_id FROM l{n}) THEN 1 ELSE 0 END AS "in.{n}"'
            for n in range(len(names))
        )
        union = " UNION ALL ".join(f"SELECT proposal_id FROM l{n}" for n in range(len(names)))
        params: tuple[Any, ...] = tuple(p for name in names for p in wanted[name][1])
        where = f"p.proposal_id IN ({union})"
        if besides is not None:
            where += " AND p.proposal_id <> ?"
            params += (besides,)
        with self._db.transaction(write=False) as tx:
            rows = tx.execute(
                f"WITH {ctes} {_SELECT_PAIR}{flags}{_FROM_PAIR} WHERE {where} ORDER BY p.created_at, p.proposal_id",
                params,
            )
        keys = self._db.keys
        found: dict[str, list[tuple[ProposalRecord, OperationRecord]]] = {name: [] for name in names}
        for row in rows:
            held = [name for n, name in enumerate(names) if row.pop(f"in.{n}")]
            pair = _pair_of(row, keys)
            for name in held:
                found[name].append(pair)
        return found

    def page(
        self, status: str | None = None, *, after: str | None = None, limit: int = PAGE_SIZE
    ) -> ProposalPage:
        """One page of proposals with their operations, in the order their operations were created,
        optionally only those whose operation is in ``status`` (a reviewer's pending list).

        Keyset pagination on the operations' ``(status, created_at, operation_key)`` index: a page
        costs the same whether 1 or 100,000 proposals are pending. ``after`` is the ``next_after``
        of the previous page (`InvalidCursor` when it is not one); ``limit`` is clamped to
        ``1..PAGE_MAX``."""
        since = parse_cursor(after) if after else None
        size = min(max(int(limit), 1), PAGE_MAX)
        where = ["proposal_id IS NOT NULL"]
        params: list[Any] = []
        if status:
            where.append("status = ?")
            params.append(status)
        if since is not None:
            where.append("(created_at, operation_key) > (?, ?)")
            params += since
        with self._db.transaction(write=False) as tx:
            orows = tx.execute(
                f"SELECT * FROM operations WHERE {' AND '.join(where)}"
                " ORDER BY created_at, operation_key LIMIT ?",
                (*params, size + 1),
            )
            shown = orows[:size]
            keys_shown = [str(row["operation_key"]) for row in shown]
            prows = _by_key(tx, "proposals", keys_shown)
        keys = self._db.keys
        rows = [
            (proposal_of(prows[str(row["operation_key"])], keys), operation_of(row))
            for row in shown
            if str(row["operation_key"]) in prows
        ]
        more = len(orows) > size
        return ProposalPage(rows=rows, next_after=cursor_of(shown[-1]) if more and shown else None)

    def list(self, status: str | None = None) -> list[tuple[ProposalRecord, OperationRecord]]:
        """Every proposal with its operation, oldest first, optionally filtered by operation status
        (audits and exports; a reviewer's listing pages with `page`). Last: the name ``list``
        shadows the builtin in the annotations of the methods after it."""
        if status:
            return self._pairs("o.status = ?", (status,))
        return self._pairs("1 = 1", ())


def cursor_of(operation_row: dict[str, Any]) -> str:
    """The opaque position after ``operation_row`` (its creation time and key)."""
    raw = json.dumps([str(operation_row["created_at"]), str(operation_row["operation_key"])])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def parse_cursor(text: str) -> tuple[str, str]:
    """``(created_at, operation_key)`` of a `cursor_of` text; `InvalidCursor` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidCursor("after is not a position a page handed out") from exc
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise InvalidCursor("after is not a position a page handed out")
    return value[0], value[1]


_OPERATION_COLUMNS = tuple(f.name for f in dataclasses.fields(OperationRecord))
"""The ``operations`` columns, each a field of `OperationRecord` (`operation_of` builds it from
the row)."""
_SELECT_PAIR = "SELECT p.*, " + ", ".join(f'o.{column} AS "o.{column}"' for column in _OPERATION_COLUMNS)
"""The select list of a proposal's row with its operation's, over `_FROM_PAIR`: the operation's
columns named ``o.<column>`` (no column of either table has a dot in its name)."""
_FROM_PAIR = " FROM proposals p JOIN operations o ON o.operation_key = p.operation_key"


def _pair_of(row: dict[str, Any], keys: Keyring) -> tuple[ProposalRecord, OperationRecord]:
    """A `_SELECT_PAIR` row as the proposal (MAC verified) and its operation."""
    proposal = {name: value for name, value in row.items() if not name.startswith("o.")}
    return proposal_of(proposal, keys), operation_of({c: row[f"o.{c}"] for c in _OPERATION_COLUMNS})


def _newest_of_tool(
    tool: str, tenant_id: str, limit: int, statuses: Collection[str] | None
) -> tuple[str, tuple[Any, ...]]:
    """The ids of the newest ``limit`` proposals of ``tool`` in ``tenant_id`` (only those whose
    operation is in ``statuses``, when given), for `Proposals._listed`."""
    sql = "SELECT p.proposal_id FROM proposals p WHERE p.tool = ? AND p.tenant_id = ?"
    params: tuple[Any, ...] = (tool, tenant_id)
    if statuses is not None:
        chosen = sorted(statuses)
        # found from the operations in those statuses (`operations_live_idx`: an operation
        # carries its proposal's tool and tenant), so the cost follows how many are in them, not
        # how many the tool ever had: walking the tool's proposals newest first read its whole
        # history whenever fewer than ``limit`` were live (nearly always). CROSS JOIN: SQLite
        # would walk the proposals' index for the order otherwise (PostgreSQL plans it freely)
        sql = (
            "SELECT p.proposal_id FROM operations o CROSS JOIN proposals p"
            f" WHERE o.tool = ? AND o.tenant_id = ? AND o.status IN ({', '.join('?' for _ in chosen)})"
            " AND p.operation_key = o.operation_key AND p.tool = ? AND p.tenant_id = ?"
        )
        params += (*chosen, tool, tenant_id)
    return f"{sql} ORDER BY p.created_at DESC, p.proposal_id DESC LIMIT ?", (*params, max(0, int(limit)))


def _same_effect(proposal: ProposalRecord) -> tuple[str, tuple[Any, ...]]:
    """The condition (over `p` proposals) of `Proposals.same_effect`, with its parameters."""
    return (
        "p.thread_id = ? AND p.tool = ? AND p.arguments_sha256 = ? AND p.proposal_id <> ?",
        (proposal.thread_id, proposal.tool, proposal.arguments_sha256, proposal.proposal_id),
    )


def _by_key(tx: Tx, table: str, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Rows of ``table`` by ``operation_key``, a statement per `_IN_CHUNK` keys."""
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(keys), _IN_CHUNK):
        chunk = keys[start : start + _IN_CHUNK]
        marks = ", ".join("?" for _ in chunk)
        for row in tx.execute(f"SELECT * FROM {table} WHERE operation_key IN ({marks})", tuple(chunk)):
            found[str(row["operation_key"])] = row
    return found


__all__ = [
    "PAGE_MAX",
    "PAGE_SIZE",
    "Beside",
    "InvalidCursor",
    "ProposalPage",
    "Proposals",
    "cursor_of",
    "parse_cursor",
    "proposal_of",
]
