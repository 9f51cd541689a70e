"""The store contract implemented once in portable SQL, over a small backend adapter.

SQLite and PostgreSQL differ only in how a connection is opened, how a write transaction
takes its lock, and the DDL in `migrations`. Every decision that matters (unique operation
keys, the claim, immutability, legal transitions) is made by the database: a conditional
update or insert, never a Python check before a write.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from toolgate.canonical import canonical_json, sha256_hex
from toolgate.clock import iso, new_id, parse_iso, utcnow
from toolgate.errors import ConfigurationError, InvalidTransitionError, StoreError
from toolgate.store._identity_rows import IdentityRows
from toolgate.store.base import Store, Tx
from toolgate.store.chain import AUDIT_FIELDS, GENESIS_HASH, audit_hash, audit_row_content
from toolgate.store.keys import Keyring
from toolgate.store.migrations import MIGRATIONS, Migration
from toolgate.store.records import (
    ApprovalRecord,
    AuditEvent,
    AuditEventIn,
    DeadLetter,
    OperationRecord,
    OperationStatus,
    ProposalRecord,
    Settlement,
)


def _later(now: str, seconds: float) -> str:
    """``now`` (`iso` text) moved by ``seconds``."""
    return iso(parse_iso(now) + timedelta(seconds=seconds))


def _loads(value: Any) -> Any:
    return json.loads(value) if value is not None else None


def _proposal(row: dict[str, Any]) -> ProposalRecord:
    data = dict(row)
    data["arguments"] = json.loads(data["arguments"])
    data["editors"] = tuple(json.loads(data["editors"])) if data.get("editors") else ()
    return ProposalRecord(**data)


def _dead_letter(row: dict[str, Any]) -> DeadLetter:
    data = dict(row)
    data["context"] = json.loads(data["context"])
    return DeadLetter(**data)


def _operation(row: dict[str, Any]) -> OperationRecord:
    data = dict(row)
    data["result"] = _loads(data["result"])
    data["error"] = _loads(data["error"])
    return OperationRecord(**data)


def _approval(row: dict[str, Any], keys: Keyring) -> ApprovalRecord:
    data = dict(row)
    mac = data.pop("mac", None)
    data["reviewer_roles"] = tuple(json.loads(data["reviewer_roles"]))
    data["reviewer_tenant_id"] = data.get("reviewer_tenant_id") or ""
    record = ApprovalRecord(**data)
    return dataclasses.replace(record, authentic=keys.verify("approval", record.content(), mac))


def _audit(row: dict[str, Any]) -> AuditEvent:
    data = dict(row)
    payload = data.pop("payload", None)
    if data.get("detail_sha256"):
        data["detail"] = json.loads(payload) if payload is not None else {}
        data["payload_retained"] = payload is not None
    else:
        data["detail"] = json.loads(data["detail"])
    return AuditEvent(**data)


class SqlStore(IdentityRows, Store, abc.ABC):
    """`Store` over a SQL database; subclasses provide connections, locking and the clock."""

    dialect: str = "sql"
    _initializer: Callable[[Store], None] | None = None
    _initialized: bool = False
    _init_lock = threading.RLock()

    def set_initializer(self, initializer: Callable[[Store], None]) -> None:
        """Run ``initializer(store)`` once, before the first unit of work (lazy setup for servers)."""
        self._initializer = initializer
        self._initialized = False

    def _ensure_ready(self) -> None:
        if self._initializer is None or self._initialized:
            return
        with self._init_lock:
            if self._initialized:
                return
            self._initialized = True
            try:
                self._initializer(self)
            except BaseException:
                self._initialized = False
                raise

    # ---- backend hooks ---------------------------------------------------------------

    @abc.abstractmethod
    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        """A unit of work; ``write=True`` takes the write lock up front."""

    @abc.abstractmethod
    def _chain_head(self, tx: Tx) -> tuple[str, str]:
        """Take the audit chain's lock (held until ``tx`` ends) and read, under it, the store's
        time and the hash of the chain's last event: ``(now, last_hash)``, the genesis hash for an
        empty chain. Called as the last step of a transaction, so the lock covers only linking the
        new events and the commit, never the state change's own round trips."""

    def _insert_audit_rows(
        self, tx: Tx, rows: Sequence[dict[str, Any]], payloads: Sequence[tuple[str, str, str]]
    ) -> list[dict[str, Any]]:
        """Insert linked events and their payloads; the stored rows, in chain order."""
        columns = [*AUDIT_FIELDS, "detail", "detail_sha256", "prev_hash", "hash"]
        row_marks = "(" + ", ".join("?" for _ in columns) + ")"
        stored = tx.execute(
            f"INSERT INTO audit_events ({', '.join(columns)}) VALUES "
            + ", ".join(row_marks for _ in rows)
            + " RETURNING *",
            tuple(row[c] for row in rows for c in columns),
        )
        tx.execute(
            "INSERT INTO audit_payloads (event_id, occurred_at, detail) VALUES "
            + ", ".join("(?, ?, ?)" for _ in payloads),
            tuple(value for payload in payloads for value in payload),
        )
        return sorted(stored, key=lambda r: int(r["seq"]))

    @abc.abstractmethod
    def _run_script(self, tx: Tx, migration: Migration) -> None:
        """Execute one migration's SQL for this backend."""

    @abc.abstractmethod
    def _lock_migrations(self, tx: Tx) -> None:
        """Serialize concurrent migration runs across processes."""

    @abc.abstractmethod
    def _tx_now(self, tx: Tx) -> str:
        """The database's current time as `iso` text, read inside ``tx``."""

    def now(self) -> datetime:
        with self.transaction(write=False) as tx:
            return parse_iso(self._tx_now(tx))

    # ---- schema ----------------------------------------------------------------------

    def setup(self) -> None:
        self.migrate("toolgate", MIGRATIONS)

    def require_schema(self) -> None:
        try:
            with self.transaction(write=False) as tx:
                row = tx.one(
                    "SELECT COALESCE(MAX(version), 0) AS v FROM toolgate_schema WHERE component = ?",
                    ("toolgate",),
                )
        except StoreError as exc:
            raise ConfigurationError(f"{self.url} holds no toolgate store") from exc
        version = int(row["v"]) if row else 0
        if version != len(MIGRATIONS):
            raise ConfigurationError(
                f"{self.url} is at schema version {version}, this toolgate needs {len(MIGRATIONS)}; "
                "run a command that writes (e.g. toolgate worker recover) to upgrade it first"
            )

    def migrate(self, component: str, migrations: Sequence[Migration]) -> int:
        with self.transaction() as tx:
            self._lock_migrations(tx)
            tx.execute(
                "CREATE TABLE IF NOT EXISTS toolgate_schema ("
                " component TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,"
                " applied_at TEXT NOT NULL, PRIMARY KEY (component, version))"
            )
            row = tx.one(
                "SELECT COALESCE(MAX(version), 0) AS v FROM toolgate_schema WHERE component = ?",
                (component,),
            )
            current = int(row["v"]) if row else 0
            if current > len(migrations):
                raise ConfigurationError(
                    f"database schema of {component!r} is at version {current}, newer than this "
                    f"toolgate ({len(migrations)}); refusing to run against it"
                )
            for version, migration in enumerate(migrations, start=1):
                if version <= current:
                    continue
                self._run_script(tx, migration)
                tx.execute(
                    "INSERT INTO toolgate_schema (component, version, name, applied_at) VALUES (?, ?, ?, ?)",
                    (component, version, migration.name, iso(utcnow())),
                )
            return len(migrations) - current

    # ---- proposals and operations ----------------------------------------------------

    def create_proposal(
        self, proposal: ProposalRecord, *, audit: Sequence[AuditEventIn] = ()
    ) -> tuple[ProposalRecord, OperationRecord, bool]:
        with self.transaction() as tx:
            now = self._tx_now(tx)
            inserted = tx.execute(
                "INSERT INTO proposals (proposal_id, operation_key, thread_id, call_id, tool, tool_version,"
                " handler_revision, release, tenant_id, requester_id, arguments, arguments_sha256, digest,"
                " risk, effect, rollback, approval_class, created_at, expires_at, supersedes, trace_id, editors)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
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
                    canonical_json(proposal.arguments),
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
                ),
            )
            if inserted:
                prow: dict[str, Any] | None = inserted[0]
                orow = tx.one(
                    "INSERT INTO operations (operation_key, proposal_id, tool, tenant_id, status,"
                    " attempts, created_at, updated_at) VALUES (?, ?, ?, ?, 'pending_approval', 0, ?, ?)"
                    " RETURNING *",
                    (
                        proposal.operation_key,
                        proposal.proposal_id,
                        proposal.tool,
                        proposal.tenant_id,
                        now,
                        now,
                    ),
                )
                self._append_events(tx, audit)
            else:
                prow = tx.one("SELECT * FROM proposals WHERE operation_key = ?", (proposal.operation_key,))
                orow = tx.one("SELECT * FROM operations WHERE operation_key = ?", (proposal.operation_key,))
        assert prow is not None and orow is not None
        return _proposal(prow), _operation(orow), bool(inserted)

    def get_proposal(self, proposal_id: str) -> ProposalRecord | None:
        with self.transaction(write=False) as tx:
            row = tx.one("SELECT * FROM proposals WHERE proposal_id = ?", (proposal_id,))
        return _proposal(row) if row else None

    def list_proposals(self, status: str | None = None) -> list[tuple[ProposalRecord, OperationRecord]]:
        if status:
            return self._proposal_pairs("o.status = ?", (status,))
        return self._proposal_pairs("1 = 1", ())

    def same_effect(self, proposal: ProposalRecord) -> list[tuple[ProposalRecord, OperationRecord]]:
        return self._proposal_pairs(
            "p.thread_id = ? AND p.tool = ? AND p.arguments_sha256 = ? AND p.proposal_id <> ?",
            (proposal.thread_id, proposal.tool, proposal.arguments_sha256, proposal.proposal_id),
        )

    def _proposal_pairs(
        self, where: str, params: tuple[Any, ...]
    ) -> list[tuple[ProposalRecord, OperationRecord]]:
        """Proposals matching `where` (over `p` proposals and `o` operations) with their operations,
        oldest first."""
        sql = (
            "SELECT p.proposal_id AS pid FROM proposals p JOIN operations o"
            f" ON o.operation_key = p.operation_key WHERE {where} ORDER BY p.created_at, p.proposal_id"
        )
        out: list[tuple[ProposalRecord, OperationRecord]] = []
        with self.transaction(write=False) as tx:
            for row in tx.execute(sql, params):
                prow = tx.one("SELECT * FROM proposals WHERE proposal_id = ?", (row["pid"],))
                assert prow is not None
                orow = tx.one("SELECT * FROM operations WHERE operation_key = ?", (prow["operation_key"],))
                assert orow is not None
                out.append((_proposal(prow), _operation(orow)))
        return out

    def record_decision(self, approval: ApprovalRecord, *, audit: Sequence[AuditEventIn] = ()) -> bool:
        return self.record_and_settle(approval, audit=audit)[0]

    def record_and_settle(
        self,
        approval: ApprovalRecord,
        *,
        audit: Sequence[AuditEventIn] = (),
        settle: Settlement | None = None,
    ) -> tuple[bool, OperationRecord | None]:
        with self.transaction() as tx:
            inserted = tx.execute(
                "INSERT INTO approvals (approval_id, proposal_id, reviewer_id, reviewer_tenant_id,"
                " reviewer_roles, decision, digest, reason, decided_at, mac)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING RETURNING approval_id",
                (
                    approval.approval_id,
                    approval.proposal_id,
                    approval.reviewer_id,
                    approval.reviewer_tenant_id,
                    json.dumps(sorted(approval.reviewer_roles)),
                    approval.decision,
                    approval.digest,
                    approval.reason,
                    approval.decided_at,
                    self.keys.mac("approval", approval.content()),
                ),
            )
            if not inserted:
                return False, None
            settled = None
            if settle is not None:
                # an approval settles only while no rejection is on record: one that came in
                # meanwhile leaves the verdict to a judgement of every stored decision
                unless_rejected = (
                    " AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.proposal_id = operations.proposal_id"
                    " AND a.decision = 'reject')"
                    if settle.to_status == "approved"
                    else ""
                )
                rows = tx.execute(
                    "UPDATE operations SET status = ?, updated_at = ? WHERE operation_key = ?"
                    " AND status = ?" + unless_rejected + " RETURNING *",
                    (settle.to_status, self._tx_now(tx), settle.operation_key, settle.from_status),
                )
                settled = _operation(rows[0]) if rows else None
            self._append_events(tx, [*audit, *(settle.audit if settle and settled else ())])
        return True, settled

    def decisions_for(self, proposal_id: str) -> list[ApprovalRecord]:
        with self.transaction(write=False) as tx:
            rows = tx.execute(
                "SELECT * FROM approvals WHERE proposal_id = ? ORDER BY decided_at, approval_id",
                (proposal_id,),
            )
        return [_approval(r, self.keys) for r in rows]

    def all_decisions(self) -> list[ApprovalRecord]:
        with self.transaction(write=False) as tx:
            rows = tx.execute("SELECT * FROM approvals ORDER BY decided_at, approval_id")
        return [_approval(r, self.keys) for r in rows]

    def get_operation(self, operation_key: str) -> OperationRecord | None:
        with self.transaction(write=False) as tx:
            row = tx.one("SELECT * FROM operations WHERE operation_key = ?", (operation_key,))
        return _operation(row) if row else None

    def list_operations(self, status: str | None = None) -> list[OperationRecord]:
        with self.transaction(write=False) as tx:
            if status:
                rows = tx.execute("SELECT * FROM operations WHERE status = ? ORDER BY created_at", (status,))
            else:
                rows = tx.execute("SELECT * FROM operations ORDER BY created_at")
        return [_operation(r) for r in rows]

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
    ) -> OperationRecord:
        sql = "UPDATE operations SET status = ?, updated_at = ?"
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
        sql += " RETURNING *"
        with self.transaction() as tx:
            now = self._tx_now(tx)
            params.insert(1, now)
            if lease_lapsed:
                params.append(now)
            rows = tx.execute(sql, tuple(params))
            if rows:
                self._append_events(tx, audit)
            else:
                current = tx.one("SELECT status FROM operations WHERE operation_key = ?", (operation_key,))
        if not rows:
            raise InvalidTransitionError(operation_key, from_status, current["status"] if current else None)
        return _operation(rows[0])

    def claim(
        self, operation_key: str, owner: str, lease_s: float, *, audit: Sequence[AuditEventIn] = ()
    ) -> OperationRecord | None:
        with self.transaction() as tx:
            now = self._tx_now(tx)
            rows = tx.execute(
                "UPDATE operations SET status = 'executing', owner = ?, lease_expires_at = ?,"
                " attempts = attempts + 1, updated_at = ?"
                " WHERE operation_key = ? AND status = 'approved' AND EXISTS (SELECT 1 FROM proposals p"
                " WHERE p.proposal_id = operations.proposal_id AND p.expires_at > ?) RETURNING *",
                (owner, _later(now, lease_s), now, operation_key, now),
            )
            if rows:
                self._append_events(tx, audit)
        return _operation(rows[0]) if rows else None

    def renew_lease(self, operation_key: str, owner: str, lease_s: float) -> bool:
        with self.transaction() as tx:
            now = self._tx_now(tx)
            rows = tx.execute(
                "UPDATE operations SET lease_expires_at = ? WHERE operation_key = ? AND owner = ?"
                " AND status IN ('executing', 'unknown') RETURNING operation_key",
                (_later(now, lease_s), operation_key, owner),
            )
        return bool(rows)

    def superseding(self, proposal_id: str) -> ProposalRecord | None:
        with self.transaction(write=False) as tx:
            row = tx.one(
                "SELECT * FROM proposals WHERE supersedes = ? ORDER BY created_at DESC", (proposal_id,)
            )
        return _proposal(row) if row else None

    def stale_executing(self, grace_s: float) -> list[OperationRecord]:
        with self.transaction(write=False) as tx:
            cutoff = _later(self._tx_now(tx), -grace_s)
            rows = tx.execute(
                "SELECT * FROM operations WHERE status = 'executing' AND lease_expires_at < ? ORDER BY updated_at",
                (cutoff,),
            )
        return [_operation(r) for r in rows]

    # ---- dead letters ----------------------------------------------------------------

    def add_dead_letter(self, operation_key: str, reason: str, context: dict[str, Any]) -> DeadLetter | None:
        with self.transaction() as tx:
            now = self._tx_now(tx)
            moved = tx.execute(
                "UPDATE operations SET status = 'dead_lettered', updated_at = ? WHERE operation_key = ?"
                " AND status = 'unknown' AND (lease_expires_at IS NULL OR lease_expires_at < ?)"
                " RETURNING operation_key",
                (now, operation_key, now),
            )
            if not moved:
                return None
            tx.execute(
                "INSERT INTO dead_letters (operation_key, created_at, reason, context) VALUES (?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (operation_key, now, reason, canonical_json(context)),
            )
            row = tx.one("SELECT * FROM dead_letters WHERE operation_key = ?", (operation_key,))
        assert row is not None
        return _dead_letter(row)

    def dead_letters(self, *, open_only: bool = True) -> list[DeadLetter]:
        sql = "SELECT * FROM dead_letters" + (" WHERE resolved_at IS NULL" if open_only else "")
        with self.transaction(write=False) as tx:
            rows = tx.execute(sql + " ORDER BY created_at")
        return [_dead_letter(r) for r in rows]

    def resolve_dead_letter(
        self, operation_key: str, *, resolution: str, resolved_by: str, note: str
    ) -> bool:
        with self.transaction() as tx:
            rows = tx.execute(
                "UPDATE dead_letters SET resolved_at = ?, resolved_by = ?, resolution = ?, note = ?"
                " WHERE operation_key = ? AND resolved_at IS NULL RETURNING operation_key",
                (self._tx_now(tx), resolved_by, resolution, note, operation_key),
            )
        return bool(rows)

    # ---- rate limits -------------------------------------------------------------------

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

    # ---- audit -----------------------------------------------------------------------

    def append_audit(self, event: AuditEventIn) -> AuditEvent:
        return self.append_audits([event])[0]

    def append_audits(self, events: Sequence[AuditEventIn]) -> list[AuditEvent]:
        if not events:
            return []
        with self.transaction() as tx:
            return self._append_events(tx, events)

    def _append_events(self, tx: Tx, events: Sequence[AuditEventIn]) -> list[AuditEvent]:
        """Link ``events`` to the chain inside ``tx``: the last step of the transaction whose
        change they record, so the change and its evidence commit together or not at all."""
        if not events:
            return []
        key = self.keys.key("audit-chain")
        drafts: list[tuple[dict[str, Any], str]] = []
        for event in events:
            row: dict[str, Any] = {name: getattr(event, name, None) for name in AUDIT_FIELDS}
            row["event_id"] = new_id("evt")
            payload = canonical_json(event.detail)
            row["detail"] = "{}"
            row["detail_sha256"] = sha256_hex(payload)
            drafts.append((row, payload))
        now, previous = self._chain_head(tx)
        for row, _ in drafts:
            row["occurred_at"] = now
            row["prev_hash"] = previous
            row["hash"] = previous = audit_hash(audit_row_content(row), previous, key)
        stored = self._insert_audit_rows(
            tx, [row for row, _ in drafts], [(row["event_id"], now, payload) for row, payload in drafts]
        )
        payloads = {row["event_id"]: payload for row, payload in drafts}
        return [_audit({**r, "payload": payloads[r["event_id"]]}) for r in stored]

    def latest_audit_event(self, event: str) -> AuditEvent | None:
        with self.transaction(write=False) as tx:
            row = tx.one(
                "SELECT e.*, p.detail AS payload FROM audit_events e LEFT JOIN audit_payloads p"
                " ON p.event_id = e.event_id WHERE e.event = ? ORDER BY e.seq DESC LIMIT 1",
                (event,),
            )
        return _audit(row) if row else None

    def purge_audit_payloads(self, before: str) -> int:
        with self.transaction() as tx:
            rows = tx.execute(
                "DELETE FROM audit_payloads WHERE occurred_at < ? RETURNING event_id", (before,)
            )
        return len(rows)

    def audit_events(
        self,
        *,
        operation_key: str | None = None,
        proposal_id: str | None = None,
        call_ids: Sequence[str] = (),
    ) -> list[AuditEvent]:
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
        with self.transaction(write=False) as tx:
            rows = tx.execute(sql, tuple(params))
        return [_audit(r) for r in rows]


__all__ = [
    "GENESIS_HASH",
    "SqlStore",
    "audit_hash",
    "audit_row_content",
    "iso",
    "new_id",
    "parse_iso",
    "utcnow",
]
