"""What is believed about a production incident: one task turn of a thread, read from records
that carry authority and checked against each other (`read_incident`).

When: ``toolgate evals capture`` (`toolgate.evals.captured.capture`) reads the thread, then
`toolgate.evals.captured.incident_case` makes the case. Nothing here decides who may capture.

- The thread's checkpointed state (messages, call records, budget, principal) counts only when its
  seal verifies (`toolgate.graph.seals.seal`): checkpointed state is untrusted input, and a thread
  changed outside the gateway, or refused for it, is not captured (``state_tampered``).
- The store's records, each MAC-verified (``records_tampered`` otherwise): the thread's release
  pin, its proposals and their decisions, the requester's identity. They must agree with the
  state (``records_disagree`` otherwise): one tenant and requester, every proposal of the task
  named by a call record and every call record's proposal in the store.
- The audit log confirms what the case will expect: every refused call has its ``call.rejected``
  event with the same code, every read that ran its ``call.completed`` or ``call.failed``.
- The thread's final status is expected only when the task turn is its last and the thread did
  not stop waiting for operations that moved on without it (a worker delivered, a person settled a
  dead letter): else nobody knows how it ends (None: not checked).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from toolgate.errors import REJECTION_CODES, StoreError, ToolgateUsageError
from toolgate.evals.observation import call_outcomes
from toolgate.graph.seals.seal import tampered_keys
from toolgate.graph.state import gateway_state
from toolgate.policy.principal import Principal
from toolgate.store.audit import audit_call_id
from toolgate.store.audit_records import AuditEvent
from toolgate.store.base import Store
from toolgate.store.identity_records import IdentityRecord
from toolgate.store.records import ApprovalRecord, OperationRecord, ProposalRecord
from toolgate.store.thread_releases import ThreadReleases

SourceKind = Literal["thread", "operation", "proposal"]
"""What ``toolgate evals capture`` was given: a thread id, an operation key or a proposal id."""
BATCH_AUDITED = frozenset({"too_many_calls"})
"""Refusals audited once per turn, not per call (confirmed by their turn, not by call id)."""
FinalStatus = Literal["done", "awaiting_approval", "waiting", "needs_review"]
"""Final thread statuses a case can expect (``refused`` threads are never captured)."""
FINAL_STATUSES: tuple[FinalStatus, ...] = ("done", "awaiting_approval", "waiting", "needs_review")


class CaptureRefused(ToolgateUsageError):
    """A capture, review, edit or export was refused; ``code`` is stable (``not_found``,
    ``state_tampered``, ``self_review``, ...). Nothing was written but its audit event."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, kw_only=True)
class Incident:
    """The verified facts of one task turn of one thread."""

    thread_id: str
    tenant_id: str
    release: str
    """The release that served the thread (its pin; the sealed state's label before pins)."""
    task: int
    """Which task turn (1: the thread's first user message)."""
    requester: IdentityRecord
    """The requester as the identity store holds them (authentic)."""
    input: str
    responses: list[AIMessage]
    """The model's tool-calling responses of the task turn, in order."""
    final: str | None
    """The model's last words in the task turn (None: it ended waiting or without them)."""
    records: Mapping[str, Mapping[str, Any]]
    """The state's call records, by call id."""
    outcomes: Mapping[str, str]
    """Per call id: accepted, failed, proposal, not_run or the refusal code."""
    proposals: list[tuple[ProposalRecord, OperationRecord]]
    """The task turn's proposals with their operations, oldest first."""
    decisions: Mapping[str, list[ApprovalRecord]]
    """Recorded decisions per proposal id, in order."""
    operation_events: Mapping[str, list[AuditEvent]] = field(default_factory=dict)
    """Audit events per operation key."""
    status: FinalStatus | None = None
    """The final status to expect, or None (not checked; see the module docstring)."""
    budget: Mapping[str, Any] = field(default_factory=dict)


def _text(message: BaseMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(
        str(b.get("text", "")) if isinstance(b, dict) else str(b)
        for b in message.content
        if not isinstance(b, dict) or b.get("type") == "text"
    )


def _is_model(message: BaseMessage) -> TypeGuard[AIMessage]:
    return isinstance(message, AIMessage) and message.name != "toolgate"


def model_calls(message: AIMessage) -> list[tuple[dict[str, Any], bool]]:
    """The response's calls as stored: parsed ones, then those moved aside or unparseable."""
    return [(dict(c), False) for c in message.tool_calls] + [
        (dict(c), True) for c in message.invalid_tool_calls
    ]


def _task_of(messages: Sequence[BaseMessage], focus_call: str | None) -> tuple[int, int, int]:
    """``(task number, first index, end index)`` of the task turn holding ``focus_call`` (the last
    task turn when None)."""
    starts = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    if not starts:
        raise CaptureRefused("not_found", "the thread holds no user message")
    index = len(messages) - 1
    if focus_call is not None:
        found = [
            i
            for i, m in enumerate(messages)
            if _is_model(m) and any(c.get("id") == focus_call for c, _ in model_calls(m))
        ]
        if not found:
            raise CaptureRefused("records_disagree", "the thread's messages hold no call for that operation")
        index = found[0]
    number = max(1, sum(1 for start in starts if start <= index))
    first = starts[number - 1]
    end = starts[number] if number < len(starts) else len(messages)
    return number, first, end


def read_incident(
    store: Store, thread_id: str, values: Mapping[str, Any], *, focus_call: str | None
) -> Incident:
    """The verified facts of the task turn of ``thread_id`` holding ``focus_call`` (the last task
    turn when None), from its checkpointed ``values`` and the store; `CaptureRefused` otherwise."""
    values = gateway_state(values)  # the grouped keys (principal, release, budget) as keys
    messages: list[BaseMessage] = list(values.get("messages") or [])
    if not messages:
        raise CaptureRefused("not_found", f"no thread, operation or proposal {thread_id}")
    if tampered_keys(store.keys, thread_id, values) or values.get("status") == "refused":
        raise CaptureRefused("state_tampered", "the thread's saved state was changed outside the gateway")
    try:
        principal = Principal.from_dict(values["principal"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CaptureRefused("records_disagree", "the thread names no principal") from exc
    try:
        pin = ThreadReleases(store).get(thread_id)
    except StoreError:
        pin = None  # a store that never pinned a thread (release control not installed)
    if pin is not None and not pin.authentic:
        raise CaptureRefused("records_tampered", "the thread's release pin does not verify")
    if pin is not None and pin.tenant_id != principal.tenant_id:
        raise CaptureRefused("records_disagree", "the thread's release pin names another tenant")
    requester = store.identities.get(principal.user_id)
    if requester is None or requester.tenant_id != principal.tenant_id:
        raise CaptureRefused("records_disagree", "the thread's requester is not a person of its tenant")
    if not requester.authentic:
        raise CaptureRefused("records_tampered", "the requester's identity does not verify")
    task, first, end = _task_of(messages, focus_call)
    turn = messages[first:end]
    responses = [m for m in turn if _is_model(m) and model_calls(m)]
    words = [m for m in turn if _is_model(m) and not model_calls(m)]
    call_ids = [str(c.get("id") or "") for m in responses for c, _ in model_calls(m)]
    records: Mapping[str, Mapping[str, Any]] = values.get("calls") or {}
    outcomes, _ = call_outcomes(dict(values))
    proposals = _proposals(store, thread_id, principal, call_ids, records)
    decisions = {p.proposal_id: _decisions(store, p) for p, _ in proposals}
    _confirmmodel_calls(store, thread_id, call_ids, outcomes)
    operation_events = {
        p.operation_key: store.audit.events(operation_key=p.operation_key) for p, _ in proposals
    }
    status = _final_status(values.get("status"), last=end == len(messages), proposals=proposals)
    return Incident(
        thread_id=thread_id,
        tenant_id=principal.tenant_id,
        release=pin.release if pin is not None else str(values.get("release") or ""),
        task=task,
        requester=requester,
        input=_text(turn[0]),
        responses=responses,
        final=_text(words[-1]) if words else None,
        records=records,
        outcomes={c: outcomes.get(c, "not_run") for c in call_ids},
        proposals=proposals,
        decisions=decisions,
        operation_events=operation_events,
        status=status,
        budget=dict(values.get("budget") or {}),
    )


def _final_status(
    status: Any, *, last: bool, proposals: Sequence[tuple[ProposalRecord, OperationRecord]]
) -> FinalStatus | None:
    """The thread's status, when the case can expect it (see the module docstring)."""
    if not last:
        return None
    for known in FINAL_STATUSES:
        if status == known:
            if known == "awaiting_approval" and not any(
                op.status == "pending_approval" for _, op in proposals
            ):
                return None  # the operations moved on while the thread waited: how it ends is unknown
            return known
    return None


def _proposals(
    store: Store,
    thread_id: str,
    principal: Principal,
    call_ids: Sequence[str],
    records: Mapping[str, Mapping[str, Any]],
) -> list[tuple[ProposalRecord, OperationRecord]]:
    """The task turn's proposals, each authentic, of the thread's tenant and requester, and in
    one-to-one agreement with the call records."""
    mine = [(p, op) for p, op in store.proposals.list() if p.thread_id == thread_id and p.call_id in call_ids]
    for proposal, _ in mine:
        if not proposal.authentic:
            raise CaptureRefused("records_tampered", f"proposal {proposal.proposal_id} does not verify")
        if (proposal.tenant_id, proposal.requester_id) != (principal.tenant_id, principal.user_id):
            raise CaptureRefused(
                "records_disagree", f"proposal {proposal.proposal_id} names another requester"
            )
        if proposal.supersedes:
            raise CaptureRefused(
                "not_replayable", "a reviewer edited a proposal of this task: a case has no edit step"
            )
    stored = {p.proposal_id for p, _ in mine}
    named = {str(records[c]["proposal_id"]) for c in call_ids if records.get(c, {}).get("proposal_id")}
    if stored != named:
        raise CaptureRefused("records_disagree", "the thread's call records and the store's proposals differ")
    return mine


def _decisions(store: Store, proposal: ProposalRecord) -> list[ApprovalRecord]:
    found = store.approvals.for_proposal(proposal.proposal_id)
    if not all(d.authentic for d in found):
        raise CaptureRefused("records_tampered", f"a decision on {proposal.proposal_id} does not verify")
    return sorted(found, key=lambda d: d.decided_at)


def _confirmmodel_calls(
    store: Store, thread_id: str, call_ids: Sequence[str], outcomes: Mapping[str, str]
) -> None:
    """Every refusal and every read that ran, as the state says, has its audit event."""
    audited = {audit_call_id(c): c for c in call_ids}
    events = [e for e in store.audit.events(call_ids=list(audited)) if e.thread_id == thread_id]
    seen = {(audited.get(e.call_id or ""), e.event, e.code) for e in events}
    for call_id in call_ids:
        outcome = outcomes.get(call_id, "not_run")
        if outcome in REJECTION_CODES and outcome not in BATCH_AUDITED:
            confirmed = (call_id, "call.rejected", outcome) in seen
        elif outcome == "accepted":
            confirmed = (call_id, "call.completed", None) in seen
        elif outcome == "failed":
            if not any(c == call_id and e == "call.failed" for c, e, _ in seen):
                raise CaptureRefused("not_replayable", f"read {call_id} failed before its handler ran")
            continue
        else:
            continue
        if not confirmed:
            raise CaptureRefused(
                "records_disagree", f"the audit log does not confirm call {call_id} ended {outcome}"
            )


__all__ = [
    "BATCH_AUDITED",
    "FINAL_STATUSES",
    "CaptureRefused",
    "FinalStatus",
    "Incident",
    "SourceKind",
    "model_calls",
    "read_incident",
]
