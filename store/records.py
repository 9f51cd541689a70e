"""The records of a proposed write's life: proposal, approvals, operation state, dead letters.

A proposal is what a reviewer approves, an approval one reviewer's decision on its digest, the
operation the execution state of its key, and a dead letter an outcome nobody could determine.
Identities (`toolgate.store.identity_records`) and audit events
(`toolgate.store.audit_records`) have records of their own. Persisted shapes carry
``schema_version`` where they leave the process (JSON exports); the database schema itself is
versioned by the append-only migration list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from toolgate.store.audit_records import AuditEventIn

OperationStatus = Literal[
    "pending_approval",
    "approved",
    "rejected",
    "expired",
    "executing",
    "succeeded",
    "failed",
    "unknown",
    "dead_lettered",
]
"""Every state an operation can be in; transitions are conditional updates in the database."""

TERMINAL_STATUSES: frozenset[str] = frozenset({"rejected", "expired", "succeeded", "failed", "dead_lettered"})
"""States from which nothing executes any more."""

Decision = Literal["approve", "reject"]


@dataclass(frozen=True, kw_only=True)
class ProposalRecord:
    """An immutable write proposal: exactly what a reviewer approves (the database refuses updates)."""

    proposal_id: str
    """``prop_...``, derived from the operation key so a re-run proposal node finds the same row."""
    operation_key: str
    """The one intended effect this proposal stands for."""
    thread_id: str
    """LangGraph thread (task) that proposed it."""
    call_id: str
    """Model tool call id it answers."""
    tool: str
    """Tool name."""
    tool_version: str
    """Tool contract version."""
    handler_revision: str
    """Handler revision the operation is pinned to."""
    release: str
    """Release the proposal was made under."""
    tenant_id: str
    """Authenticated tenant of the requester."""
    requester_id: str
    """Authenticated requesting user (never a reviewer of this proposal)."""
    arguments: dict[str, Any]
    """Canonical, model-validated arguments."""
    arguments_sha256: str
    """SHA-256 of the canonical arguments alone."""
    digest: str
    """SHA-256 over the whole content: arguments, tool, revisions, requester, risk, effect, expiry."""
    risk: str
    """read-only, caution or danger."""
    effect: str
    """Expected effect, for the reviewer."""
    rollback: str
    """Rollback statement or explicit no-rollback reason."""
    approval_class: str
    """Label of the approval class, e.g. ``operator``."""
    created_at: str
    """ISO-8601 UTC creation time."""
    expires_at: str
    """ISO-8601 UTC time after which approval is impossible."""
    supersedes: str | None = None
    """The proposal this one replaces (a reviewer's edit is a new proposal, never a change)."""
    trace_id: str | None = None
    """Trace the proposal was made in, so reviewers' and workers' audit events join it (not digested)."""
    editors: tuple[str, ...] = ()
    """Reviewers who shaped these arguments by editing (along the whole edit chain); none of them
    may count as an approver of this proposal."""
    escalation_rule_id: str | None = None
    """The policy rule that raised ``approval_class`` above the tool's own class, if one did."""
    escalation_reason: str | None = None
    """Why, as the rule says it; shown to reviewers."""
    requester_text: str | None = None
    """The requester's last message before the proposal, redacted and bounded: what the reviewer
    reads as "what the requester asked". Covered by the MAC when present (rows from before it have
    none and still verify), outside the digest: it is context for the decision, not the operation."""
    authentic: bool = field(default=False, compare=False)
    """Set by the store on read: whether the row's MAC (`sealed`, under the store's secret) verified.
    A row inserted with database access alone, or written before proposals carried a MAC, is not
    authentic: it is never reviewed, edited or executed."""

    def escalation(self) -> dict[str, Any] | None:
        """The escalation on record, for reviewers and the audit log (None: the tool's own class)."""
        if not self.escalation_rule_id:
            return None
        return {
            "rule_id": self.escalation_rule_id,
            "reason": self.escalation_reason,
            "approval_class": self.approval_class,
        }

    def sealed(self) -> dict[str, Any]:
        """Everything the row's MAC covers: the digested content and every other stored column."""
        return {
            **self.content(),
            "proposal_id": self.proposal_id,
            "arguments_sha256": self.arguments_sha256,
            "digest": self.digest,
            "trace_id": self.trace_id,
            **({"requester_text": self.requester_text} if self.requester_text else {}),
        }

    def content(self) -> dict[str, Any]:
        """Everything the digest covers."""
        extra: dict[str, Any] = {"supersedes": self.supersedes} if self.supersedes else {}
        if self.editors:
            extra["editors"] = sorted(self.editors)
        if self.escalation_rule_id:
            extra["escalation"] = {"rule_id": self.escalation_rule_id, "reason": self.escalation_reason}
        return {
            **extra,
            "operation_key": self.operation_key,
            "thread_id": self.thread_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "tool_version": self.tool_version,
            "handler_revision": self.handler_revision,
            "release": self.release,
            "tenant_id": self.tenant_id,
            "requester_id": self.requester_id,
            "arguments": self.arguments,
            "risk": self.risk,
            "effect": self.effect,
            "rollback": self.rollback,
            "approval_class": self.approval_class,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
        }


@dataclass(frozen=True, kw_only=True)
class ApprovalRecord:
    """One reviewer's decision on one proposal digest, written by authenticated trusted code."""

    approval_id: str
    """``apr_...`` identifier."""
    proposal_id: str
    """Proposal decided on."""
    reviewer_id: str
    """Authenticated reviewer."""
    reviewer_tenant_id: str
    """Tenant of the reviewer when deciding; a decision counts only inside its own tenant."""
    reviewer_roles: tuple[str, ...]
    """Roles the reviewer held when deciding."""
    decision: Decision
    """approve or reject."""
    digest: str
    """Proposal digest the reviewer saw; must equal the proposal's."""
    reason: str
    """Reviewer's reason (required for a rejection)."""
    decided_at: str
    """ISO-8601 UTC decision time (the store's clock)."""
    authentic: bool = False
    """Set by the store on read: whether the row's MAC verified. A row written with database access alone
    (no store secret) is not authentic and never counts as a decision."""

    def content(self) -> dict[str, Any]:
        """Everything the record's MAC covers."""
        return {
            "approval_id": self.approval_id,
            "proposal_id": self.proposal_id,
            "reviewer_id": self.reviewer_id,
            "reviewer_tenant_id": self.reviewer_tenant_id,
            "reviewer_roles": sorted(self.reviewer_roles),
            "decision": self.decision,
            "digest": self.digest,
            "reason": self.reason,
            "decided_at": self.decided_at,
        }


@dataclass(frozen=True, kw_only=True)
class OperationRecord:
    """Execution state of one operation key."""

    operation_key: str
    """Unique key of the intended effect."""
    proposal_id: str | None
    """Proposal it belongs to (None for reads recorded as operations)."""
    tool: str
    """Tool name."""
    tenant_id: str
    """Tenant of the requester."""
    status: OperationStatus
    """Current state."""
    owner: str | None
    """Worker that holds the execution claim."""
    lease_expires_at: str | None
    """When the claim's lease lapses (recovery may reconcile after this)."""
    attempts: int
    """How many times a claim was acquired."""
    result: dict[str, Any] | None
    """Stored sanitized result of a finished operation, returned to duplicate deliveries."""
    error: dict[str, Any] | None
    """Structured error of a failed or unknown operation."""
    created_at: str
    """ISO-8601 UTC creation time."""
    updated_at: str
    """ISO-8601 UTC time of the last transition."""


@dataclass(frozen=True, kw_only=True)
class Settlement:
    """The operation status change a decision brings about, made in the decision's transaction
    when the reviewer's decision completes the verdict (conditional on ``from_status``)."""

    operation_key: str
    from_status: OperationStatus
    to_status: OperationStatus
    audit: Sequence[AuditEventIn] = ()
    """Events appended only when the status changed."""


@dataclass(frozen=True, kw_only=True)
class DeadLetter:
    """An operation whose outcome nobody could determine, waiting for a person."""

    operation_key: str
    created_at: str
    reason: str
    context: dict[str, Any]
    """Tool, argument digest, attempt history, last error: what the person needs to decide."""
    resolved_at: str | None = None
    resolved_by: str | None = None
    resolution: str | None = None
    note: str | None = None


__all__ = [
    "TERMINAL_STATUSES",
    "ApprovalRecord",
    "DeadLetter",
    "Decision",
    "OperationRecord",
    "OperationStatus",
    "ProposalRecord",
    "Settlement",
]
