"""Reviewers' decisions, as the store keeps them: one row per decision, bound by a MAC.

A decision is inserted once per reviewer and proposal, bound by a MAC under the store's keys
(read back marked ``authentic`` or not). The decision that completes a verdict settles the
operation in the same transaction (`Approvals.record_and_settle`; an approval only while no
rejection is on record), with the audit events of both.
"""

from __future__ import annotations

import dataclasses
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
from toolgate.store.tx import Database


def approval_of(row: dict[str, Any], keys: Keyring) -> ApprovalRecord:
    """An ``approvals`` row as its record, marked ``authentic`` when its MAC verifies."""
    data = dict(row)
    mac = data.pop("mac", None)
    data["reviewer_roles"] = tuple(json.loads(data["reviewer_roles"]))
    data["reviewer_tenant_id"] = data.get("reviewer_tenant_id") or ""
    record = ApprovalRecord(**data)
    return dataclasses.replace(record, authentic=keys.verify("approval", record.content(), mac))


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
    ) -> tuple[bool, OperationRecord | None]:
        """`record`, and in the same transaction the operation change ``settle`` names
        (conditional on its ``from_status``): ``(recorded, settled operation or None)``. Used when
        this decision completes the verdict, so an approval and its decision commit together.

        ``approval`` may be built from the transaction's time (``approval(now)``, `toolgate.clock.iso`
        text: a decision stamped by the store's clock without a clock read of its own). With
        ``expires_at`` (the proposal's expiry) the decision is judged by that time too: at or
        past it nothing is written and `ApprovalError` ``expired`` is raised."""
        with self._db.transaction() as tx:
            now = self._db._tx_now(tx)
            if expires_at is not None and parse_iso(now) >= parse_iso(expires_at):
                raise ApprovalError("expired", f"the proposal expired at {expires_at}")
            if callable(approval):
                approval = approval(now)
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
                    self._db.keys.mac("approval", approval.content()),
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
                    (settle.to_status, now, settle.operation_key, settle.from_status),
                )
                settled = operation_of(rows[0]) if rows else None
            self._audit.link(tx, [*audit, *(settle.audit if settle and settled else ())])
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
