"""Reviewers' decisions, as the store keeps them: one row per decision, bound by a MAC.

A decision is inserted once per reviewer and proposal, bound by a MAC under the store's keys
(read back marked ``authentic`` or not). The decision that completes a verdict settles the
operation in the same transaction (`Approvals.record_and_settle`; an approval only while no
rejection is on record), with the audit events of both.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from toolgate.clock import parse_iso
from toolgate.errors import ApprovalError
from toolgate.store.audit_log import AuditLog
from toolgate.store.audit_records import AuditEventIn
from toolgate.store.keys import Keyring
from toolgate.store.operations import operation_of
from toolgate.store.records import ApprovalRecord, OperationRecord, Settlement
from toolgate.store.tx import Database, Written


def approval_of(row: dict[str, Any], keys: Keyring) -> ApprovalRecord:
    """An ``approvals`` row as its record, marked ``authentic`` when its MAC verifies."""
    data = dict(row)
    mac = data.pop("mac", None)
    stored = tuple(data.items())
    data["reviewer_roles"] = tuple(json.loads(data["reviewer_roles"]))
    data["reviewer_tenant_id"] = data.get("reviewer_tenant_id") or ""
    authentic = keys.verify_row("approval", stored, mac, lambda: ApprovalRecord(**data).content())
    return ApprovalRecord(**data, authentic=authentic)


class _AlreadyRecorded(Exception):
    """The decision's own row was on record already (the same record sent again): the settlement
    that ran behind its INSERT must not stay, so the transaction is rolled back."""


def _settlement(
    settle: Settlement, approval_id: str, now: str, recorded: str = ""
) -> tuple[str, Sequence[Any]]:
    """The operation change ``settle`` names, as a statement to run behind the decision's INSERT
    in one script: it changes the row only while the decision ``approval_id`` is on record (the
    INSERT in front of it stored it, or it was stored before: `Approvals.record_and_settle` then
    rolls back; with ``recorded``, SQL that holds only when this transaction stored it, only
    then) and, for an approval, while no rejection is (one that came in meanwhile leaves the
    verdict to a judgement of every stored decision)."""
    unless_rejected = (
        " AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.proposal_id = operations.proposal_id"
        " AND a.decision = 'reject')"
        if settle.to_status == "approved"
        else ""
    )
    return (
        "UPDATE operations SET status = ?, updated_at = ? WHERE operation_key = ? AND status = ?"
        + unless_rejected
        + " AND EXISTS (SELECT 1 FROM approvals d WHERE d.approval_id = ?)"
        + (f" AND {recorded}" if recorded else "")
        + " RETURNING *",
        (settle.to_status, now, settle.operation_key, settle.from_status, approval_id),
    )


class Approvals:
    """The reviewers' decisions of one store (``store.approvals``)."""

    def __init__(self, db: Database, audit: AuditLog) -> None:
        self._db = db
        self._audit = audit

    def record(self, approval: ApprovalRecord, *, audit: Sequence[AuditEventIn] = ()) -> bool:
        """Append a reviewer's decision (and ``audit``, in the same transaction); False, with nothing
        written, if this reviewer already decided this proposal."""
        return self.record_and_settle(approval, audit=audit)[0]

    def record_and_settle(
        self,
        approval: ApprovalRecord | Callable[[str], ApprovalRecord],
        *,
        audit: Sequence[AuditEventIn] = (),
        settle: Settlement | None = None,
        expires_at: str | None = None,
        while_pending: str | None = None,
    ) -> tuple[bool, OperationRecord | None]:
        """`record`, and in the same transaction the operation change ``settle`` names
        (conditional on its ``from_status``): ``(recorded, settled operation or None)``. Used when
        this decision completes the verdict, so an approval and its decision commit together.

        ``approval`` may be built from the transaction's time (``approval(now)``, `toolgate.clock.iso`
        text: a decision stamped by the store's clock without a clock read of its own). With
        ``expires_at`` (the proposal's expiry) the decision is judged by that time too: at or
        past it nothing is written and `ApprovalError` ``expired`` is raised. With ``while_pending``
        (the proposal's operation key) the decision is stored only while that operation is
        ``pending_approval``, judged by its INSERT (on PostgreSQL behind the operation row's lock,
        so a decision that settled it meanwhile is waited for): a decision racing the one that
        settled it is not recorded, ``(False, None)``, as if it came after."""
        try:
            with self._db.transaction() as tx:
                # on PostgreSQL the time with the chain head and the tenants the events name,
                # read first: the events need nothing the statements return
                head, tenants = self._audit.head_first(tx, [*audit, *(settle.audit if settle else ())])
                now = self._db._tx_now(tx)  # that reading, on PostgreSQL (as a test's clock moves it)
                if expires_at is not None and parse_iso(now) >= parse_iso(expires_at):
                    raise ApprovalError("expired", f"the proposal expired at {expires_at}")
                if callable(approval):
                    approval = approval(now)
                values: tuple[Any, ...] = (
                    approval.approval_id,
                    approval.proposal_id,
                    approval.reviewer_id,
                    approval.reviewer_tenant_id,
                    json.dumps(sorted(approval.reviewer_roles)),
                    approval.decision,
                    approval.digest,
                    approval.reason,
                    approval.decided_at,
                    self._db.keys.mac("approval", approval.content()),
                )
                statements: list[tuple[str, Sequence[Any]]] = [
                    (
                        "INSERT INTO approvals (approval_id, proposal_id, reviewer_id, reviewer_tenant_id,"
                        " reviewer_roles, decision, digest, reason, decided_at, mac)"
                        + (
                            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                            if while_pending is None
                            else " SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM operations"
                            " WHERE operation_key = ? AND status = 'pending_approval'"
                            + (" FOR UPDATE)" if self._db.dialect == "postgres" else ")")
                        )
                        + " ON CONFLICT DO NOTHING RETURNING approval_id",
                        values if while_pending is None else (*values, while_pending),
                    )
                ]
                recorded = Written(0, "approvals", "approval_id", approval.approval_id)
                groups = [(audit, recorded)]
                if settle is not None:
                    # linked ahead, the script commits whatever it did: the settlement runs only
                    # behind a decision this transaction stored (nothing to roll back after it)
                    only = self._db._wrote(tx, recorded) if head is not None else ""
                    statements.append(_settlement(settle, approval.approval_id, now, only))
                    groups.append(
                        (settle.audit, Written(1, "operations", "operation_key", settle.operation_key))
                    )
                if head is not None and audit:
                    # the decision, its settlement, the events of each (only behind its row: the
                    # chain's lock, a check that the head has not moved, their INSERT) and the
                    # COMMIT as one script: two round trips in all. Should a moved head stop the
                    # script, what the statements stored is read again (it was before the check).
                    again: list[tuple[str, Sequence[Any]]] = [
                        (
                            "SELECT approval_id FROM approvals WHERE approval_id = ?"
                            f" AND {self._db._wrote(tx, recorded)}",
                            (approval.approval_id,),
                        )
                    ]
                    if settle is not None:
                        again.append(
                            (
                                "SELECT * FROM operations WHERE operation_key = ?"
                                f" AND {self._db._wrote(tx, groups[1][1])}",
                                (settle.operation_key,),
                            )
                        )
                    answers = self._audit.link_ahead(
                        tx, head, statements, again, audit, recorded, tenants, behind=groups[1:]
                    )
                else:  # the decision, its settlement and the chain head behind them
                    answers = self._audit.link_behind(tx, statements, groups)
                settled_rows = answers[1] if settle is not None else []
                if not answers[0]:
                    if settled_rows:  # this very decision was on record: what it settled is undone
                        raise _AlreadyRecorded
                    return False, None
                settled = operation_of(settled_rows[0]) if settled_rows else None
        except _AlreadyRecorded:  # rolled back: nothing written
            return False, None
        return True, settled

    def for_proposal(self, proposal_id: str) -> list[ApprovalRecord]:
        """Every decision on the proposal, in order, each marked ``authentic`` when its MAC verifies."""
        with self._db.transaction(write=False) as tx:
            rows = tx.execute(
                "SELECT * FROM approvals WHERE proposal_id = ? ORDER BY decided_at, approval_id",
                (proposal_id,),
            )
        return [approval_of(r, self._db.keys) for r in rows]

    def all(self) -> list[ApprovalRecord]:
        """Every decision in the store (for verification), each marked ``authentic`` or not."""
        with self._db.transaction(write=False) as tx:
            rows = tx.execute("SELECT * FROM approvals ORDER BY decided_at, approval_id")
        return [approval_of(r, self._db.keys) for r in rows]


__all__ = ["Approvals", "approval_of"]
