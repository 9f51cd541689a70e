"""Proposals and reviewers' decisions in SQL.

A proposal and its operation are inserted together, once per operation key, the proposal bound by
a MAC under the store's keys (read back marked ``authentic`` or not); a decision is
inserted once, bound by a MAC under the store's keys, and may settle the operation in the same
transaction (an approval only while no rejection is on record).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolgate.canonical import canonical_json
from toolgate.store.audit_records import AuditEventIn
from toolgate.store.operations import operation_of
from toolgate.store.records import ApprovalRecord, OperationRecord, ProposalRecord, Settlement

if TYPE_CHECKING:
    from toolgate.store.audit_log import AuditLog
    from toolgate.store.base import Tx
    from toolgate.store.keys import Keyring


def _proposal(row: dict[str, Any], keys: Keyring) -> ProposalRecord:
    data = dict(row)
    mac = data.pop("mac", None)
    data["arguments"] = json.loads(data["arguments"])
    data["editors"] = tuple(json.loads(data["editors"])) if data.get("editors") else ()
    record = ProposalRecord(**data)
    # no MAC (inserted with database access alone, or before proposals carried one): not authentic
    return dataclasses.replace(record, authentic=keys.verify("proposal", record.sealed(), mac))


def _approval(row: dict[str, Any], keys: Keyring) -> ApprovalRecord:
    data = dict(row)
    mac = data.pop("mac", None)
    data["reviewer_roles"] = tuple(json.loads(data["reviewer_roles"]))
    data["reviewer_tenant_id"] = data.get("reviewer_tenant_id") or ""
    record = ApprovalRecord(**data)
    return dataclasses.replace(record, authentic=keys.verify("approval", record.content(), mac))


class ProposalRows:
    """The proposals part of `SqlStore` (mixed in; uses its transactions, clock, keys and audit chain)."""

    keys: Keyring

    if TYPE_CHECKING:

        def transaction(self, *, write: bool = True) -> Any: ...

        def _tx_now(self, tx: Tx) -> str: ...

        @property
        def audit(self) -> AuditLog: ...

    def create_proposal(
        self, proposal: ProposalRecord, *, audit: Sequence[AuditEventIn] = ()
    ) -> tuple[ProposalRecord, OperationRecord, bool]:
        with self.transaction() as tx:
            now = self._tx_now(tx)
            inserted = tx.execute(
                "INSERT INTO proposals (proposal_id, operation_key, thread_id, call_id, tool, tool_version,"
                " handler_revision, release, tenant_id, requester_id, arguments, arguments_sha256, digest,"
                " risk, effect, rollback, approval_class, created_at, expires_at, supersedes, trace_id, editors,"
                " escalation_rule_id, escalation_reason, mac)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
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
                    proposal.escalation_rule_id,
                    proposal.escalation_reason,
                    self.keys.mac("proposal", proposal.sealed()),
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
                self.audit.link(tx, audit)
            else:
                prow = tx.one("SELECT * FROM proposals WHERE operation_key = ?", (proposal.operation_key,))
                orow = tx.one("SELECT * FROM operations WHERE operation_key = ?", (proposal.operation_key,))
        assert prow is not None and orow is not None
        return _proposal(prow, self.keys), operation_of(orow), bool(inserted)

    def get_proposal(self, proposal_id: str) -> ProposalRecord | None:
        with self.transaction(write=False) as tx:
            row = tx.one("SELECT * FROM proposals WHERE proposal_id = ?", (proposal_id,))
        return _proposal(row, self.keys) if row else None

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
                out.append((_proposal(prow, self.keys), operation_of(orow)))
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
                settled = operation_of(rows[0]) if rows else None
            self.audit.link(tx, [*audit, *(settle.audit if settle and settled else ())])
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

    def superseding(self, proposal_id: str) -> ProposalRecord | None:
        with self.transaction(write=False) as tx:
            row = tx.one(
                "SELECT * FROM proposals WHERE supersedes = ? ORDER BY created_at DESC", (proposal_id,)
            )
        return _proposal(row, self.keys) if row else None


__all__ = ["ProposalRows"]
