"""Reconstructing what happened to one operation (or one refused call) from the audit log.

Investigators need the whole path months later: request, call, policy decision, proposal,
approval, claim, handler and result, in order, with actors, release and hashes; and whether the
log itself can still be trusted (chain intact, approver attributable, no secrets inside).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolgate.policy.output import count_secrets
from toolgate.store.audit import Auditor
from toolgate.store.audit_records import AuditEvent
from toolgate.store.base import Store
from toolgate.store.chain import verify_chain
from toolgate.telemetry.tokens import TokenTotals, TokenUsage, total

EXPECTED: dict[str, tuple[str, ...]] = {
    "succeeded": (
        "model.response",
        "call.accepted",
        "proposal.created",
        "approval.recorded",
        "proposal.approved",
        "operation.claimed",
        "handler.started",
        "handler.finished",
        "operation.completed",
    ),
    "rejected": (
        "model.response",
        "call.accepted",
        "proposal.created",
        "approval.recorded",
        "proposal.rejected",
    ),
    "expired": ("model.response", "call.accepted", "proposal.created", "proposal.expired"),
    "pending_approval": ("model.response", "call.accepted", "proposal.created"),
    "dead_lettered": (
        "model.response",
        "call.accepted",
        "proposal.created",
        "operation.claimed",
        "operation.dead_lettered",
    ),
    "refused": ("model.response", "call.rejected"),
}
"""The transitions a complete record of each final state must contain."""


@dataclass
class TraceReport:
    """One operation's (or refused call's) events and their summary figures."""

    subject: str
    events: list[AuditEvent]
    final: str
    missing: list[str] = field(default_factory=list)
    approver: str = "n/a"
    raw_secrets: int = 0
    tamper_check: str = "PASS"
    first_bad_event: str | None = None
    retention: str = "not_run"
    tokens: TokenTotals | None = None
    """Tokens of the task turn that proposed the call (every model response of that turn)."""

    def summary(self) -> str:
        """The one-line summary: event and transition counts, release ids, secrets, tamper check."""
        release = "present" if self.events and all(e.tool_release for e in self.events) else "missing"
        return (
            f"events_for_operation={len(self.events)} missing_transitions={len(self.missing)} "
            f"release_ids={release} approver={self.approver} raw_secrets={self.raw_secrets} "
            f"tamper_check={self.tamper_check} retention_policy={self.retention}"
        )


Visible = Callable[[AuditEvent], bool]
"""Which events a reader may see (an auditor's tenants); None sees them all."""


def _events(store: Store, visible: Visible | None, **filters: Any) -> list[AuditEvent]:
    events = store.audit.events(**filters)
    return events if visible is None else [e for e in events if visible(e)]


def _thread_responses(store: Store, visible: Visible | None, thread_id: str | None) -> list[AuditEvent]:
    """The ``model.response`` events of ``thread_id``, in chain order: read once per trace, for both
    the response that proposed the call and the tokens of its task turn."""
    if not thread_id:
        return []
    return [e for e in _events(store, visible) if e.event == "model.response" and e.thread_id == thread_id]


def _with_request(events: list[AuditEvent], responses: list[AuditEvent]) -> list[AuditEvent]:
    """Add the model response that proposed the first call (same thread, just before it)."""
    first = next((e for e in events if e.event in ("call.accepted", "call.rejected")), None)
    if first is None or not first.thread_id:
        return events
    before = [e for e in responses if e.thread_id == first.thread_id and e.seq < first.seq]
    return ([before[-1]] if before else []) + events


def task_tokens(response: AuditEvent, responses: list[AuditEvent]) -> TokenTotals:
    """The tokens of the task turn ``response`` (a ``model.response`` event) belongs to: every one
    of its thread's ``responses`` with the same task number (an event without one, recorded before
    task numbers or with its payload purged by retention, counts alone)."""
    task = response.detail.get("task")
    turns = [response]
    if task is not None and response.thread_id:
        turns = [e for e in responses if e.thread_id == response.thread_id and e.detail.get("task") == task]
    return total(TokenUsage.from_detail(e.detail.get("tokens")) for e in turns)


def latest_task_tokens(store: Store, thread_id: str) -> TokenTotals | None:
    """The tokens of ``thread_id``'s latest task turn (None before its first model response)."""
    responses = _thread_responses(store, None, thread_id)
    return task_tokens(responses[-1], responses) if responses else None


def trace(
    store: Store,
    auditor: Auditor,
    *,
    operation_key: str | None = None,
    call_id: str | None = None,
    visible: Visible | None = None,
) -> TraceReport:
    """Every event of ``operation_key`` (with the calls that led to it) or of one refused ``call_id``,
    of those ``visible`` to the reader."""
    if operation_key:
        events = _events(store, visible, operation_key=operation_key)
        call_ids = sorted({e.call_id for e in events if e.call_id})
        proposal_ids = sorted({e.proposal_id for e in events if e.proposal_id})
        merged = {e.seq: e for e in events}
        if call_ids:
            merged.update(
                {
                    e.seq: e
                    for e in _events(store, visible, call_ids=call_ids)
                    if e.event in ("call.accepted", "call.rejected")
                }
            )
        for proposal_id in proposal_ids:
            merged.update({e.seq: e for e in _events(store, visible, proposal_id=proposal_id)})
        ordered = sorted(merged.values(), key=lambda e: e.seq)
        op = store.operations.get(operation_key)
        final: str = op.status if op else "missing"
        subject = operation_key
    else:
        assert call_id is not None
        ordered = _events(store, visible, call_ids=[call_id])
        final = "refused" if any(e.event == "call.rejected" for e in ordered) else "accepted"
        subject = call_id
        proposal_ids = []
    first_call = next((e for e in ordered if e.event in ("call.accepted", "call.rejected")), None)
    responses = _thread_responses(store, visible, first_call.thread_id if first_call else None)
    ordered = _with_request(ordered, responses)
    report = TraceReport(subject=subject, events=ordered, final=final)
    seen = {e.event for e in ordered}
    report.missing = [name for name in EXPECTED.get(final, ()) if name not in seen]
    response = next((e for e in ordered if e.event == "model.response"), None)
    report.tokens = task_tokens(response, responses) if response is not None else None
    approvals = [e for e in ordered if e.event == "approval.recorded"]
    if approvals:
        reviewers = {
            auditor.actor(d.reviewer_id): d for pid in proposal_ids for d in store.approvals.for_proposal(pid)
        }
        report.approver = (
            "verified"
            if all(
                e.actor_id in reviewers and reviewers[e.actor_id].digest == e.detail.get("digest")
                for e in approvals
            )
            else "UNVERIFIED"
        )
    text = json.dumps([e.detail for e in ordered], sort_keys=True)
    report.raw_secrets = count_secrets(text)
    chain = verify_chain(store)
    report.tamper_check = "PASS" if chain.ok else "FAIL"
    report.first_bad_event = chain.first_bad_event_id
    if store.audit.latest("audit.retention_applied") is not None:
        report.retention = "applied"
    return report


__all__ = ["EXPECTED", "TraceReport", "latest_task_tokens", "task_tokens", "trace"]
